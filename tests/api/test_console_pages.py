"""The run console's pages without a browser: tenancy and roles on every route, CSRF on the controls,
the security headers, inert model text, and a plan run's DAG drawn with its items' states."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.api.agents_for_api import HOSTILE_QUESTION, agents
from tests.api.test_inbox_pages import Inbox, signed_in

from stateward.api import ApiSettings
from stateward.api.web.console import TIMELINE_EVENTS
from stateward.api.web.headers import CONTENT_SECURITY_POLICY
from stateward.core.events import EventType, NewEvent
from stateward.core.state import AgentRef, RunState, RunStatus
from stateward.runtime.runtime import Runtime
from stateward.store.records import StepWrite
from stateward.store.sqlite import SQLiteStore
from stateward_demos.payment.agent import build_agent, goal


@pytest.fixture
def inbox(tmp_path: Path) -> Iterator[Inbox]:
    runtime = Runtime(SQLiteStore(tmp_path / "console.db"), agents=agents)
    yield Inbox(runtime, ApiSettings())
    runtime.close()


ROUTES = ("/runs/{run}", "/runs/{run}/live")


def test_console_needs_a_session_and_carries_the_inbox_policy(inbox: Inbox) -> None:
    client = inbox.browser()
    page = client.get("/runs", follow_redirects=False)
    assert (page.status_code, page.headers["location"]) == (303, "/inbox/login?next=%2Fruns")
    token, _ = inbox.key("acme", "viewer")
    client, _ = signed_in(inbox, token)
    listing = client.get("/runs")
    assert listing.status_code == 200
    assert listing.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert re.findall(r"<script(?![^>]*\bsrc=)", listing.text) == [] and "style=" not in listing.text


def test_another_tenants_run_looks_unknown_on_every_route(inbox: Inbox) -> None:
    theirs = inbox.waiting_run(tenant="other")
    mine = inbox.waiting_run(tenant="acme")
    token, _ = inbox.key("acme", "viewer", "operator")
    client, csrf = signed_in(inbox, token)
    for route in ROUTES:
        assert client.get(route.format(run=theirs)).status_code == 404
        assert client.get(route.format(run="run_nope")).status_code == 404
        assert client.get(route.format(run=mine)).status_code == 200
    listing = client.get("/runs").text
    assert mine in listing and theirs not in listing
    searched = client.get("/runs", params={"q": theirs}).text
    assert 'data-testid="no-match"' in searched and f'data-run-id="{theirs}"' not in searched
    assert 'data-testid="run-row"' in client.get("/runs", params={"q": mine}).text
    refused = client.post(f"/runs/{theirs}/control", data={"action": "cancel", "csrf_token": csrf})
    assert refused.status_code == 404
    assert inbox.runtime.store.load_run(theirs).status is RunStatus.WAITING_FOR_USER


def test_controls_need_an_operator_and_the_csrf_token(inbox: Inbox) -> None:
    run = inbox.waiting_run(tenant="acme")
    viewer, _ = inbox.key("acme", "viewer", name="vera")
    client, csrf = signed_in(inbox, viewer)
    page = client.get(f"/runs/{run}").text
    assert 'data-testid="controls"' not in page  # a viewer gets no buttons ...
    denied = client.post(f"/runs/{run}/control", data={"action": "cancel", "csrf_token": csrf})
    assert denied.status_code == 403  # ... and the route refuses them too
    operator, _ = inbox.key("acme", "viewer", "operator", name="otto")
    client, csrf = signed_in(inbox, operator)
    assert 'data-testid="controls"' in client.get(f"/runs/{run}").text
    forged = client.post(f"/runs/{run}/control", data={"action": "cancel", "csrf_token": "forged"})
    assert forged.status_code == 403 and "CSRF_REJECTED" in forged.text
    odd = client.post(f"/runs/{run}/control", data={"action": "explode", "csrf_token": csrf})
    assert odd.status_code == 400 or odd.status_code == 422
    assert inbox.runtime.store.load_run(run).status is RunStatus.WAITING_FOR_USER
    done = client.post(f"/runs/{run}/control", data={"action": "cancel", "csrf_token": csrf})
    assert done.status_code == 200 and 'data-testid="run-status"' in done.text
    assert inbox.runtime.store.load_run(run).status is RunStatus.CANCELLED
    assert ">CANCELLED<" in done.text


def test_model_text_renders_inert(inbox: Inbox) -> None:
    run = inbox.waiting_run(agent="asker", tenant="acme")
    token, _ = inbox.key("acme", "viewer")
    client, _ = signed_in(inbox, token)
    page = client.get(f"/runs/{run}").text
    assert "<script>" not in page and "<img" not in page
    assert "The model&#39;s words" in page or "The model's words" in page
    assert HOSTILE_QUESTION not in page


def test_a_plan_runs_page_draws_its_dag_with_each_items_state(tmp_path: Path) -> None:
    runtime = Runtime(SQLiteStore(tmp_path / "plan.db"))
    try:
        state = runtime.start(build_agent(), goal().objective, tenant="acme")
        inbox = Inbox(runtime, ApiSettings())
        token, _ = inbox.key("acme", "viewer")
        client, _ = signed_in(inbox, token)
        page = client.get(f"/runs/{state.run_id}").text
        items = re.findall(r'data-item="([^"]+)" data-state="([^"]+)"', page)
        from stateward.api.web.dag import plan_of

        found = plan_of(runtime.store.load_run(state.run_id).memo)
        assert found is not None
        plan, states = found
        assert len(items) == len(plan.work_items) > 1
        assert dict(items) == {k: v.value for k, v in states.items()}
        assert 'class="edge"' in page and "<svg" in page
        assert len(set(dict(items).values())) >= 2  # not every item in one state
    finally:
        runtime.close()


def test_the_inbox_list_shows_agent_goal_age_and_short_arguments_in_full(inbox: Inbox) -> None:
    invoice = "accounts-payable-" + "x" * 140 + "@example.com"  # longer than the old 120-character cut
    run = inbox.waiting_run(tenant="acme", invoice=invoice)
    token, _ = inbox.key("acme", "approver")
    client, _ = signed_in(inbox, token)
    page = client.get("/inbox").text
    assert f"&#34;{invoice}&#34;" in page or f'"{invoice}"' in page
    assert "not shown" not in page
    assert "payer" in page and 'data-testid="goal"' in page and "goal</span>" in page
    assert " ago</time>" in page and run in page
    assert re.search(r"\d{2}:\d{2}:\d{2}\.\d{6}", page) is None  # no raw ISO with microseconds shown


def test_a_request_page_explains_who_asks_what_it_saw_and_what_each_answer_does(tmp_path: Path) -> None:
    runtime = Runtime(SQLiteStore(tmp_path / "plan.db"))
    try:
        state = runtime.start(build_agent(), goal().objective, tenant="acme")
        assert state.pending is not None
        raw = runtime.store.read_events(state.run_id)
        assert any("$payload" in json.dumps(e.payload) for e in raw if e.type is EventType.TOOL_ATTEMPTED)
        inbox = Inbox(runtime, ApiSettings())
        token, _ = inbox.key("acme", "approver")
        client, _ = signed_in(inbox, token)
        page = client.get(f"/inbox/runs/{state.run_id}/requests/{state.pending.request_id}").text
        assert "payment-migration" in page and goal().objective in page
        assert "during plan item <code>W18</code>" in page
        evidence = page.split('data-testid="evidence"')[1].split("</section>")[0]
        assert evidence.count('data-testid="observation"') >= 1
        assert "$payload" not in evidence  # offloaded results are shown resolved
        assert 'data-testid="consequences"' in page and "The run resumes" in page
        assert 'data-testid="answerers"' in page and "tenant acme" in page
    finally:
        runtime.close()


def test_the_audit_names_who_answered_with_which_role_and_what(inbox: Inbox) -> None:
    run = inbox.waiting_run(tenant="acme")
    token, key_id = inbox.key("acme", "approver", "viewer", name="alice")
    client, csrf = signed_in(inbox, token)
    request = client.get(f"/inbox/runs/{run}/requests/approval_001").text
    digest = re.search(r'name="digest" value="([^"]+)"', request)
    assert digest is not None
    client.post(
        f"/inbox/runs/{run}/requests/approval_001/answer",
        data={"verdict": "reject", "csrf_token": csrf, "digest": digest.group(1), "comment": "<b>not this one</b>"},
    )
    page = client.get(f"/runs/{run}").text
    audit = page.split('data-testid="audit"')[1].split("</section>")[0]
    assert audit.count('data-testid="answer"') == 1
    assert "rejected" in audit and f"alice [{key_id}]" in audit and "approver" in audit
    assert "&lt;b&gt;not this one&lt;/b&gt;" in audit and "<b>" not in audit


def test_bad_filters_and_cursors_are_named_refusals_and_markup_in_a_goal_stays_text(inbox: Inbox) -> None:
    state = inbox.runtime.submit(
        inbox.runtime.agents.create("payer", {}), "<script>alert(1)</script>\x1b[31m\u202e", tenant="acme"
    )
    token, _ = inbox.key("acme", "viewer")
    client, _ = signed_in(inbox, token)
    bogus = client.get("/runs", params={"status": "BOGUS"})
    assert bogus.status_code in (400, 422) and "INVALID_FILTER" in bogus.text
    garbage = client.get("/runs", params={"cursor": "not-a-cursor"})
    assert garbage.status_code in (400, 422) and "INVALID_CURSOR" in garbage.text
    page = client.get(f"/runs/{state.run_id}").text
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "\\x1b[31m" in page and "\\u202e" in page and "\u202e" not in page


def long_run(runtime: Runtime, tenant: str, events: int) -> str:
    """A run of ``events`` events written through the store's API, each payload carrying markup."""
    state = RunState(run_id="run_long", tenant=tenant, agent=AgentRef(name="payer"), goal="a long run")
    runtime.store.create_run(state, [NewEvent(type=EventType.RUN_STARTED)])
    seq = 1
    while seq < events:
        batch = [
            NewEvent(type=EventType.TOOL_ATTEMPTED, payload={"tool": "pay", "note": f"<b>n{seq + i + 1}</b>"})
            for i in range(min(10, events - seq))
        ]
        seq = runtime.store.commit_step(state.run_id, seq, StepWrite(state=state, events=batch))
    return state.run_id


def shown_events(page: str) -> tuple[int, int]:
    """(the timeline's first event number, how many rows it shows)."""
    found = re.search(r'<ol class="timeline" start="(\d+)">', page)
    assert found is not None
    return int(found.group(1)), page.count('data-testid="event"')


def test_the_timeline_shows_the_newest_page_and_pages_back_through_older_events(inbox: Inbox) -> None:
    run = long_run(inbox.runtime, "acme", 130)
    token, _ = inbox.key("acme", "viewer")
    client, _ = signed_in(inbox, token)
    newest = client.get(f"/runs/{run}").text
    assert shown_events(newest) == (81, TIMELINE_EVENTS)
    assert f'href="/runs/{run}?before=81" data-testid="older"' in newest and 'data-testid="newer"' not in newest
    assert "&lt;b&gt;n130&lt;/b&gt;" in newest and "<b>n" not in newest  # payload markup stays text
    older = client.get(f"/runs/{run}", params={"before": 81}).text
    assert shown_events(older) == (31, TIMELINE_EVENTS) and "n80&lt;" in older and "n81&lt;" not in older
    assert 'data-testid="newer"' in older and f"/runs/{run}/live?before=81" in older  # live keeps the page
    oldest = client.get(f"/runs/{run}", params={"before": 31}).text
    assert shown_events(oldest) == (1, 30) and 'data-testid="older"' not in oldest
    assert shown_events(client.get(f"/runs/{run}", params={"before": 10**9}).text) == (81, TIMELINE_EVENTS)
    for bad in ("0", "-1", "abc", str(2**63)):
        assert client.get(f"/runs/{run}", params={"before": bad}).status_code in (400, 422), bad
    other, _ = signed_in(inbox, inbox.key("other", "viewer")[0])
    assert other.get(f"/runs/{run}", params={"before": 81}).status_code == 404


def test_runs_search_goal_text_and_filter_by_version_in_the_tenant_only(inbox: Inbox) -> None:
    runtime = inbox.runtime
    mine = [
        runtime.submit(runtime.agents.create("payer", {}), f"pay the <b>quarterly</b> invoice {i}", tenant="acme")
        for i in range(3)
    ]
    other = runtime.submit(runtime.agents.create("payer", {}), "write the report", tenant="acme")
    theirs = runtime.submit(runtime.agents.create("payer", {}), "pay the <b>quarterly</b> invoice", tenant="globex")
    token, _ = inbox.key("acme", "viewer")
    client, _ = signed_in(inbox, token)

    def listed(**params: str) -> list[str]:
        page = client.get("/runs", params=params)
        assert page.status_code == 200, page.text[:300]
        return re.findall(r'data-testid="run-row" data-run-id="([^"]+)"', page.text)

    assert sorted(listed(q="QUARTERLY")) == sorted(s.run_id for s in mine)  # goal text, case ignored
    assert theirs.run_id not in listed(q="quarterly") and theirs.run_id not in listed(q=theirs.run_id)
    assert listed(q=other.run_id) == [other.run_id] and other.run_id in listed(q=other.run_id[:-4])  # id prefix
    assert listed(q="report") == [other.run_id]
    assert listed(q="%") == [] and listed(q="_the") == []  # wildcards match themselves
    version = mine[0].agent.version or ""
    assert set(listed(version=version)) >= {s.run_id for s in mine} and listed(version="no-such") == []
    page = client.get("/runs", params={"q": "<script>alert(1)</script>"}).text
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<b>quarterly" not in client.get("/runs", params={"q": "quarterly"}).text  # goals render inert
    assert client.get("/runs", params={"q": "x" * 201}).status_code in (400, 422)


def test_runs_pages_keep_their_search_and_filters(inbox: Inbox) -> None:
    from stateward.store.paging import DEFAULT_PAGE_SIZE

    runtime = inbox.runtime
    for i in range(DEFAULT_PAGE_SIZE + 5):
        runtime.submit(runtime.agents.create("payer", {}), f"needle {i}", tenant="acme")
    runtime.submit(runtime.agents.create("payer", {}), "hay", tenant="acme")
    token, _ = inbox.key("acme", "viewer")
    client, _ = signed_in(inbox, token)
    first = client.get("/runs", params={"q": "needle", "status": "RUNNING"}).text
    found = re.search(r'data-testid="next-page" href="([^"]+)"', first)
    assert found is not None
    link = found.group(1).replace("&amp;", "&")
    assert "q=needle" in link and "status=RUNNING" in link
    second = client.get(link).text
    rows = re.findall(r'data-testid="goal">([^<]*)<', first + second)
    assert len(rows) == DEFAULT_PAGE_SIZE + 5 and all(r.startswith("needle") for r in rows)
    assert 'data-testid="next-page"' not in second
