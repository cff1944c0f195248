"""Reconciliation requests over HTTP and in the inbox's pages: guarded like approvals, labelled as the Runtime's."""

from __future__ import annotations

import re

from tests.api.agents_for_api import CREDITED, NOTIFIED
from tests.api.conftest import Service
from tests.api.test_inbox_pages import Inbox, inbox, signed_in  # noqa: F401 (the fixture)

from stateward.core.events import EventType


def _to_reconciliation(service: Service) -> str:
    """A creditor run of tenant acme, approved by finance over HTTP, waiting on its reconciliation."""
    run = _start(service, service.key("acme", "submitter"))
    finance = service.key("acme", "approver", "finance", name="fin")
    digest = service.runtime.get(run).pending.guarded_action.digest  # type: ignore[union-attr]
    approved = service.client.post(
        f"/v1/runs/{run}/requests/approval_001/approve", json={"digest": digest}, headers=finance
    )
    assert approved.status_code == 200, approved.text
    state = service.runtime.drive(run)  # a worker's part
    assert state.pending is not None and state.pending.kind == "reconciliation"
    return run


def _start(service: Service, headers: dict[str, str]) -> str:
    response = service.client.post(
        "/v1/runs", json={"agent": "creditor", "goal": "credit", "params": {}, "drive": True}, headers=headers
    )
    assert response.status_code == 201, response.text
    return str(response.json()["run_id"])


def test_a_key_without_the_tools_role_cannot_answer_or_see_a_reconciliation(service: Service) -> None:
    run = _to_reconciliation(service)
    comms = service.key("acme", "approver", "comms", name="eve")
    ops = service.key("acme", "approver", "ops", name="op")  # the agent's role: the tool's own overrides it
    for headers in (comms, ops):
        refused = service.client.post(f"/v1/runs/{run}/requests/approval_002/approve", json={}, headers=headers)
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "ROLE_NOT_ALLOWED", refused.text
        listed = service.client.get("/v1/inbox", headers=headers).json()["items"]
        assert [i["request"]["request_id"] for i in listed if i["run_id"] == run] == []
    other_tenant = service.key("globex", "approver", "finance")
    foreign = service.client.post(f"/v1/runs/{run}/requests/approval_002/approve", json={}, headers=other_tenant)
    assert foreign.status_code == 404
    assert [e for e in service.runtime.events(run) if e.type is EventType.REQUEST_ANSWERED][1:] == []
    finance = service.key("acme", "approver", "finance", name="fin2")
    by_role = service.client.get("/v1/inbox", params={"role": "finance"}, headers=finance).json()["items"]
    [item] = [i for i in by_role if i["run_id"] == run]
    assert item["request"]["kind"] == "reconciliation" and item["request"]["approver_role"] == "finance"
    assert item["request"]["asked_by"] == "runtime" and item["request"]["reconciles"]["idempotency_key"]
    admin = service.key("acme", "admin")
    assert service.client.get("/v1/inbox", params={"role": "comms"}, headers=admin).json()["items"] == []


def test_it_happened_over_http_is_recorded_and_the_run_goes_on(service: Service) -> None:
    CREDITED.clear()
    NOTIFIED.clear()
    run = _to_reconciliation(service)
    finance = service.key("acme", "approver", "finance", name="fin")
    done = service.client.post(
        f"/v1/runs/{run}/requests/approval_002/approve", json={"comment": "seen in the ledger"}, headers=finance
    )
    assert done.status_code == 200, done.text
    state = service.runtime.drive(run)
    assert state.status.value == "COMPLETED" and len(CREDITED) == 1 and NOTIFIED == ["credited acct-7"]


def test_the_request_page_says_what_each_answer_does_and_admits_nothing(inbox: Inbox) -> None:  # noqa: F811
    token, _ = inbox.key("acme", "approver", "finance")
    run = inbox.waiting_run(agent="creditor")
    client, csrf = signed_in(inbox, token)
    digest = inbox.runtime.get(run).pending.guarded_action.digest  # type: ignore[union-attr]
    answered = client.post(
        f"/inbox/runs/{run}/requests/approval_001/answer",
        data={"verdict": "approve", "csrf_token": csrf, "digest": digest},
    )
    assert answered.status_code == 200, answered.text
    inbox.runtime.drive(run)
    html = client.get(f"/inbox/runs/{run}/requests/approval_002").text
    assert "The call whose outcome is unknown" in html and "The exact action an approval admits" not in html
    assert "this call, once" not in html and "it admits no action" in html
    question = re.search(r'<p class="label">stateward asks</p>\s*<p class="inert" data-testid="question">', html)
    assert question is not None and "The model&#39;s words" not in html  # the Runtime's question, labelled so
    effects = html[html.index('data-testid="answer-effects"') :]
    assert "It happened" in effects and "NOT_EXECUTED" in effects and "retry" in effects
    assert 'data-testid="idempotency-key"' in html
    listed = client.get("/inbox", params={"role": "finance"}).text
    assert run in listed
    assert run not in client.get("/inbox", params={"role": "comms"}).text
    comms, comms_csrf = signed_in(inbox, inbox.key("acme", "approver", "comms")[0])
    page = comms.get(f"/inbox/runs/{run}/requests/approval_002").text
    assert 'data-testid="not-yours"' in page and 'data-testid="approve"' not in page
    refused = comms.post(
        f"/inbox/runs/{run}/requests/approval_002/answer", data={"verdict": "approve", "csrf_token": comms_csrf}
    )
    assert refused.status_code == 403 and "ROLE_NOT_ALLOWED" in refused.text
