"""The run console in a real browser: the payment-migration plan run's page with its DAG and item states,
the runs list, keyboard-reachable labelled controls, no console errors or CSP violations. The screenshots
it takes are the operator page's images (docs/images/)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.browser.conftest import Deployment

from stateward.api.web.dag import plan_of
from stateward_demos.payment.agent import build_agent, goal

pytestmark = [pytest.mark.browser, pytest.mark.slow]

IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"


def errors(deployment: Deployment) -> list[str]:
    return [m for m in deployment.console if m.startswith(("error", "pageerror"))]


def test_an_operator_sees_the_plan_runs_dag_with_its_items_states(deployment: Deployment) -> None:
    state = deployment.runtime.start(build_agent(), goal().objective, tenant="acme")
    found = plan_of(deployment.runtime.store.load_run(state.run_id).memo)
    assert found is not None
    plan, states = found
    token, _ = deployment.key("acme", "viewer", "operator", "approver", name="olga")
    page = deployment.page()
    page.set_viewport_size({"width": 1280, "height": 900})
    deployment.sign_in(page, token)
    page.screenshot(path=str(IMAGES / "inbox.png"), full_page=True)

    page.goto(f"{deployment.base}/runs")
    row = page.locator(f"[data-testid=run-row][data-run-id={state.run_id}]")
    assert row.count() == 1
    page.screenshot(path=str(IMAGES / "runs.png"), full_page=True)
    row.locator("a").click()
    page.wait_for_url(f"{deployment.base}/runs/{state.run_id}")

    items = page.locator("[data-testid=dag-item]")
    assert items.count() == len(plan.work_items)
    shown = {
        items.nth(i).get_attribute("data-item"): items.nth(i).get_attribute("data-state") for i in range(items.count())
    }
    assert shown == {wid: s.value for wid, s in states.items()}
    assert page.locator("svg[data-testid=dag] path.edge").count() == sum(
        len(set(w.dependencies)) for w in plan.work_items
    )
    assert page.get_by_test_id("run-status").inner_text() == state.status.value
    assert page.locator("[data-testid=gauge]").count() == 5
    page.wait_for_timeout(800)  # the live section reloads at least once (htmx, every 0.3 s)
    assert page.locator("[data-testid=dag-item]").count() == len(plan.work_items)
    page.screenshot(path=str(IMAGES / "console-run.png"))  # the top: status, request, DAG

    # Every control is reachable from the keyboard and says what it does.
    buttons = page.locator("[data-testid=controls] button")
    assert buttons.count() >= 1
    for i in range(buttons.count()):
        assert buttons.nth(i).get_attribute("aria-label")
    reached = set()
    for _ in range(40):
        page.keyboard.press("Tab")
        reached.add(page.evaluate("document.activeElement && document.activeElement.textContent.trim()"))
    assert "Cancel run" in reached

    # The pending approval's page explains it: the item waiting, what the decision saw, what answers do.
    page.get_by_test_id("pending-link").click()
    assert "W18" in page.get_by_test_id("asked-by").inner_text()
    assert page.locator("[data-testid=observation]").count() >= 1
    assert "$payload" not in page.get_by_test_id("evidence").inner_text()
    page.screenshot(path=str(IMAGES / "request.png"))
    assert errors(deployment) == []


def test_an_operator_picks_an_earlier_plan_version_and_the_live_reload_keeps_it(deployment: Deployment) -> None:
    state = deployment.runtime.start(build_agent(), goal().objective, tenant="acme")
    token, _ = deployment.key("acme", "viewer", name="vic")
    page = deployment.page()
    deployment.sign_in(page, token)
    page.goto(f"{deployment.base}/runs/{state.run_id}")
    assert page.get_by_test_id("plan-version-shown").inner_text() == "v2"
    page.locator("[data-testid=plan-version][data-version='1']").click()
    page.wait_for_url(f"{deployment.base}/runs/{state.run_id}?plan_version=1")
    page.wait_for_timeout(800)  # the live section reloads at least once
    assert page.get_by_test_id("plan-version-shown").inner_text() == "v1"
    assert page.locator("[data-item=W18]").get_attribute("data-state") == "PENDING"
    assert page.locator("[data-item=W01]").get_attribute("data-state") == "SUCCEEDED"
    assert errors(deployment) == []


HOSTILE_GOAL = 'pay the quarterly invoice <img src="x" onerror="window.__pwned = 1"><script>window.__pwned = 2</script>'


def test_the_runs_list_searches_goal_text_and_filters_by_version_within_the_tenant(deployment: Deployment) -> None:
    runtime = deployment.runtime
    mine = [runtime.submit(runtime.agents.create("payer", {}), HOSTILE_GOAL, tenant="acme") for _ in range(2)]
    other = runtime.submit(runtime.agents.create("payer", {}), "write the report", tenant="acme")
    theirs = runtime.submit(runtime.agents.create("payer", {}), HOSTILE_GOAL, tenant="globex")
    token, _ = deployment.key("acme", "viewer", name="vera")
    page = deployment.page()
    deployment.sign_in(page, token)
    page.goto(f"{deployment.base}/runs")

    def shown() -> set[str]:
        rows = page.locator("[data-testid=run-row]")
        return {str(rows.nth(i).get_attribute("data-run-id")) for i in range(rows.count())}

    assert {s.run_id for s in (*mine, other)} <= shown() and theirs.run_id not in shown()
    page.get_by_label("Search").fill("QUARTERLY")  # a labelled field, submitted from the keyboard
    page.get_by_label("Search").press("Enter")
    page.wait_for_url("**/runs?*q=QUARTERLY*")
    assert shown() == {s.run_id for s in mine}  # goal text, case ignored; another tenant's run never listed
    goals = page.locator("[data-testid=run-row] [data-testid=goal]")
    assert "<img" in goals.first.inner_text()  # the markup is shown as text
    assert page.evaluate("window.__pwned") is None and page.locator("[data-testid=runs] img").count() == 0
    page.get_by_label("Search").fill(theirs.run_id)
    page.get_by_label("Search").press("Enter")
    page.wait_for_load_state()
    assert shown() == set() and page.get_by_test_id("no-match").count() == 1
    page.get_by_label("Search").fill("")
    page.get_by_label("Version").fill(mine[0].agent.version or "none")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url("**/runs?*version=*")
    assert {s.run_id for s in (*mine, other)} <= shown()
    page.get_by_label("Version").fill("no-such-version")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url("**/runs?*version=no-such-version*")
    assert shown() == set()
    assert errors(deployment) == []


def test_the_inbox_filters_by_kind_and_agent_within_the_tenant(deployment: Deployment) -> None:
    paying = deployment.waiting_run("payer", invoice="INV-1")
    asking = deployment.waiting_run("asker")
    theirs = deployment.waiting_run("payer", tenant="globex", invoice="INV-2")
    token, _ = deployment.key("acme", "approver", name="ann")
    page = deployment.page()
    deployment.sign_in(page, token)

    def shown() -> set[str]:
        text = page.get_by_test_id("inbox").inner_text()
        return {run for run in (paying, asking, theirs) if run in text}

    assert shown() == {paying, asking}
    page.get_by_label("Kind").select_option("input")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url("**/inbox?*kind=input*")
    assert shown() == {asking}
    assert page.evaluate("window.__pwned") is None  # the asker's question carries markup: inert
    page.get_by_label("Kind").select_option("")
    page.get_by_label("Agent").fill("payer")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url("**/inbox?*agent=payer*")
    assert shown() == {paying}  # the other tenant's payer run is never listed
    assert errors(deployment) == []
