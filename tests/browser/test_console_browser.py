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
