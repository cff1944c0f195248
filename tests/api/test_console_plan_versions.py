"""The console's plan DAG at an earlier plan version: ``/runs/{id}?plan_version=N`` draws version N as the
run recorded it (its items, titles and edges from the shipped plan document, each item's state when the
replan replaced it), the current version stays the default, a bad N is a named refusal, and another
tenant's run stays unknown."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import pytest
from tests.api.test_inbox_pages import Inbox, signed_in

from stateward.api import ApiSettings
from stateward.core.events import EventType
from stateward.runtime.runtime import Runtime
from stateward.store.sqlite import SQLiteStore
from stateward_demos.payment.agent import build_agent, goal

ITEM = re.compile(r'data-item="([^"]+)" data-state="([^"]+)">\s*<title>[^:]*: ([^<]*) —')
EDGE = re.compile(r'data-from="([^"]+)" data-to="([^"]+)"')


@pytest.fixture
def replanned(tmp_path: Path) -> Iterator[tuple[Inbox, str]]:
    """The payment case: plan v1, then v2 after the inventory finds a repository unreadable (a replan)."""
    runtime = Runtime(SQLiteStore(tmp_path / "plan.db"))
    state = runtime.start(build_agent(), goal().objective, tenant="acme")
    recorded = [e.payload for e in runtime.events(state.run_id, 0, limit=1000) if e.type is EventType.PLAN_RECORDED]
    assert [p.get("plan_version") for p in recorded] == [1, 2]  # the case did replan
    yield Inbox(runtime, ApiSettings()), state.run_id
    runtime.close()


def drawn(page: str) -> tuple[dict[str, tuple[str, str]], set[tuple[str, str]]]:
    """{item: (state, title)} and the edges of the page's DAG."""
    items = {wid: (st, title) for wid, st, title in ITEM.findall(page)}
    return items, set(EDGE.findall(page))


def shipped_v1() -> dict[str, object]:
    text = resources.files("stateward_demos.payment").joinpath("plan.json").read_text(encoding="utf-8")
    return dict(json.loads(text))


def test_version_1_is_drawn_as_recorded_and_differs_from_the_current_version_2(
    replanned: tuple[Inbox, str],
) -> None:
    inbox, run = replanned
    token, _ = inbox.key("acme", "viewer")
    client, _ = signed_in(inbox, token)
    default = client.get(f"/runs/{run}")
    v2 = client.get(f"/runs/{run}", params={"plan_version": "2"})
    v1 = client.get(f"/runs/{run}", params={"plan_version": "1"})
    assert default.status_code == v1.status_code == v2.status_code == 200
    assert drawn(default.text) == drawn(v2.text)  # the current version is the default
    assert "Plan <code>plan-payment-migration</code> v2" in default.text
    assert "Plan <code>plan-payment-migration</code> v1" in v1.text
    assert 'data-testid="plan-version-note"' in v1.text and 'data-testid="plan-version-note"' not in default.text
    assert f'href="/runs/{run}?plan_version=1"' in default.text  # the page links the recorded versions
    items1, edges1 = drawn(v1.text)
    items2, _ = drawn(v2.text)
    plan = shipped_v1()
    work_items = plan["work_items"]
    assert isinstance(work_items, list)
    assert {w["work_item_id"] for w in work_items} == set(items1)
    assert {(d, w["work_item_id"]) for w in work_items for d in w["dependencies"]} == edges1
    titles1 = {w: t for w, (_, t) in items1.items()}
    titles2 = {w: t for w, (_, t) in items2.items()}
    assert titles1["W12"].startswith("Check coverage against the repository inventory")
    assert titles2["W12"] != titles1["W12"]  # the patch redefined W12
    states1 = {w: s for w, (s, _) in items1.items()}
    states2 = {w: s for w, (s, _) in items2.items()}
    # When v2 replaced it, v1 had only its first items done; the current plan is at its delivery.
    assert states1["W01"] == states1["W03"] == "SUCCEEDED" and states1["W18"] == "PENDING"
    assert sum(s == "SUCCEEDED" for s in states1.values()) < 5
    assert states2["W18"] == "WAITING_FOR_APPROVAL" and states1 != states2
    live = client.get(f"/runs/{run}/live", params={"plan_version": "1"})
    assert live.status_code == 200 and drawn(live.text) == (items1, edges1)
    assert "plan_version=1" in live.text  # the live poll keeps the version asked for


@pytest.mark.parametrize("bad", ["3", "0", "x", "-1", "1.5", "99999", "1e3"])
def test_a_bad_plan_version_is_a_named_refusal(replanned: tuple[Inbox, str], bad: str) -> None:
    inbox, run = replanned
    token, _ = inbox.key("acme", "viewer")
    client, _ = signed_in(inbox, token)
    for route in (f"/runs/{run}", f"/runs/{run}/live"):
        refused = client.get(route, params={"plan_version": bad})
        assert refused.status_code == 422, (route, bad)
    page = client.get(f"/runs/{run}", params={"plan_version": bad})
    assert "UNKNOWN_PLAN_VERSION" in page.text and "<svg" not in page.text
    if bad in ("3", "0", "99999"):  # a number the run never had is named against the current version
        assert "the current plan is version 2" in page.text


def test_a_version_past_the_stores_integers_is_refused_by_the_input_guard(replanned: tuple[Inbox, str]) -> None:
    inbox, run = replanned
    token, _ = inbox.key("acme", "viewer")
    client, _ = signed_in(inbox, token)
    refused = client.get(f"/runs/{run}", params={"plan_version": "9" * 30})
    assert refused.status_code == 422 and "<svg" not in refused.text


def test_a_run_without_a_plan_refuses_a_plan_version(tmp_path: Path) -> None:
    from tests.api.agents_for_api import agents

    runtime = Runtime(SQLiteStore(tmp_path / "np.db"), agents=agents)
    try:
        inbox = Inbox(runtime, ApiSettings())
        run = inbox.waiting_run(tenant="acme")
        token, _ = inbox.key("acme", "viewer")
        client, _ = signed_in(inbox, token)
        assert client.get(f"/runs/{run}").status_code == 200
        refused = client.get(f"/runs/{run}", params={"plan_version": "1"})
        assert refused.status_code == 422 and "UNKNOWN_PLAN_VERSION" in refused.text
    finally:
        runtime.close()


def test_another_tenants_plan_versions_look_unknown(replanned: tuple[Inbox, str]) -> None:
    inbox, run = replanned
    token, _ = inbox.key("other", "viewer", "operator")
    client, _ = signed_in(inbox, token)
    for route in (f"/runs/{run}", f"/runs/{run}/live"):
        for version in ("1", "2", "x"):
            answer = client.get(route, params={"plan_version": version})
            assert answer.status_code == 404, (route, version)
            assert "plan-payment-migration" not in answer.text
