"""An escalated child handoff in the service's inbox: listed for the parent's approvers with its chain and
its escalation, answerable by them and refused to the child's own approvers."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from fastapi.testclient import TestClient
from tests.runtime import handoff_family as family

from stateward.api import ApiSettings, create_app, mint_key
from stateward.api.app import key_store
from stateward.core.status import RunStatus
from stateward.runtime.runtime import Runtime
from stateward.store.sqlite import SQLiteStore
from stateward.tools import ChildHandoff


def _key(runtime: Runtime, *roles: str) -> dict[str, str]:
    _, token = mint_key(key_store(runtime), tenant="default", name="alice", roles=roles, now=datetime.now(UTC))
    return {"Authorization": f"Bearer {token}"}


def test_an_escalated_handoff_is_the_parents_approvers_to_answer_through_the_api(tmp_path: Path) -> None:
    runtime = Runtime(SQLiteStore(tmp_path / "api.db"), agents=family.registry())
    agent = runtime.agents.create("escalating-parent", {"on_handoff": ChildHandoff.ESCALATE_TO_PARENT.value})
    runtime.start(agent, goal="refund A-1", run_id="root")
    (child,) = runtime.children("root")
    with TestClient(create_app(runtime, ApiSettings())) as client:
        listed = client.get("/v1/inbox", headers=_key(runtime, "approver", "triage")).json()["items"]
        assert [(i["run_id"], i["chain"]) for i in listed] == [(child.run_id, ["root"])]
        request = listed[0]["request"]
        assert request["kind"] == "handoff" and request["approver_role"] == "triage"
        assert request["escalation"] == {"parent_run_id": "root", "child_role": "refunds"}
        assert client.get("/v1/inbox", headers=_key(runtime, "approver", "refunds")).json()["items"] == []
        path = f"/v1/runs/{child.run_id}/requests/{request['request_id']}/reply"
        refused = client.post(path, json={"text": "cancel"}, headers=_key(runtime, "approver", "refunds"))
        assert refused.status_code == 403, refused.text
        done = client.post(path, json={"text": "cancel"}, headers=_key(runtime, "approver", "triage"))
        assert done.status_code == 200, done.text
    runtime.drive(child.run_id)  # the service leaves driving to workers; here, the library drives the tree
    assert runtime.get("root").status is RunStatus.COMPLETED
    runtime.close()


def test_the_console_inbox_says_a_handoff_is_escalated(tmp_path: Path) -> None:
    from tests.api.test_inbox_pages import Inbox, signed_in

    runtime = Runtime(SQLiteStore(tmp_path / "console.db"), agents=family.registry())
    agent = runtime.agents.create("escalating-parent", {"on_handoff": ChildHandoff.ESCALATE_TO_PARENT.value})
    runtime.start(agent, goal="refund A-1", run_id="root", tenant="acme")
    inbox = Inbox(runtime, ApiSettings())
    token, _ = inbox.key("acme", "approver", "triage")
    client, _ = signed_in(inbox, token)
    page = client.get("/inbox").text
    assert 'data-testid="escalated">escalated from child (its role: refunds)</span>' in page
    runtime.close()
