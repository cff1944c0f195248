"""A reconciliation in a real browser: finance sees the Runtime's question and what each answer does, filters the
inbox by role, answers "It happened", and the run goes on to its next step; a comms key may not answer it."""

from __future__ import annotations

import time

import pytest
from tests.api.agents_for_api import CREDITED, NOTIFIED
from tests.browser.conftest import Deployment

from stateward.core.events import EventType

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_finance_answers_it_happened_and_the_run_completes_once(deployment: Deployment) -> None:
    CREDITED.clear()
    NOTIFIED.clear()
    token, key_id = deployment.key("acme", "approver", "finance", name="fin")
    run = deployment.waiting_run(agent="creditor", account="acct-9")
    page = deployment.page()
    deployment.sign_in(page, token)
    page.goto(f"{deployment.base}/inbox/runs/{run}/requests/approval_001")
    page.get_by_test_id("approve").click()  # the credit itself, approved by finance
    deadline = time.monotonic() + 20
    while (pending := deployment.runtime.get(run).pending) is None or pending.request_id != "approval_002":
        assert time.monotonic() < deadline, "the worker did not reach the reconciliation"
        time.sleep(0.05)
    assert pending.kind == "reconciliation"

    page.goto(f"{deployment.base}/inbox?role=finance")
    assert page.locator("[data-testid=inbox-row]", has_text=run).count() == 1
    page.goto(f"{deployment.base}/inbox?role=comms")
    assert page.locator("[data-testid=inbox-row]", has_text=run).count() == 0

    page.goto(f"{deployment.base}/inbox/runs/{run}/requests/approval_002")
    assert "The call whose outcome is unknown" in page.get_by_test_id("action").inner_text()
    assert "admits no action" in page.get_by_test_id("admits").inner_text()
    assert "this call, once" not in page.content()
    assert page.get_by_test_id("model-text").count() == 0  # no model wrote this question
    assert "is unknown" in page.get_by_test_id("question").inner_text()
    effects = page.get_by_test_id("answer-effects").inner_text()
    assert "It happened" in effects and "It did not happen" in effects and "retry" in effects
    assert page.get_by_test_id("approve").inner_text() == "It happened"
    assert page.get_by_test_id("reject").inner_text() == "It did not happen"

    comms_token, _ = deployment.key("acme", "approver", "comms", name="eve")
    other = deployment.page()
    deployment.sign_in(other, comms_token)
    other.goto(f"{deployment.base}/inbox/runs/{run}/requests/approval_002")
    assert other.get_by_test_id("not-yours").count() == 1 and other.get_by_test_id("approve").count() == 0

    page.fill("#comment", "the bank statement shows it")
    page.get_by_test_id("approve").click()
    page.get_by_test_id("run-status").filter(has_text="COMPLETED").wait_for(timeout=20_000)
    answers = [e.payload for e in deployment.runtime.events(run) if e.type is EventType.REQUEST_ANSWERED]
    assert [(a["request_id"], a["by"]) for a in answers] == [
        ("approval_001", f"fin [{key_id}]"),
        ("approval_002", f"fin [{key_id}]"),
    ]
    assert len(CREDITED) == 1 and NOTIFIED == ["credited acct-9"]
