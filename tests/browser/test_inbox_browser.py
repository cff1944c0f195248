"""The inbox in a real browser: sign in, see the exact action, approve or reject, watch the run end;
forged forms are refused; a model's markup and escape sequences stay text."""

from __future__ import annotations

import re

import pytest
from tests.api.agents_for_api import PAID
from tests.browser.conftest import Deployment

from stateward.core.events import EventType

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def answered(deployment: Deployment, run_id: str) -> list[dict[str, object]]:
    return [e.payload for e in deployment.runtime.events(run_id) if e.type is EventType.REQUEST_ANSWERED]


def csp_violations(deployment: Deployment) -> list[str]:
    return [m for m in deployment.console if m.startswith(("error", "pageerror"))]


def test_an_approver_signs_in_sees_the_exact_action_approves_and_watches_the_run_complete(
    deployment: Deployment,
) -> None:
    token, key_id = deployment.key("acme", "approver", name="alice")
    run = deployment.waiting_run(invoice="INV-42", amount_cents=125_000)
    other_tenant = deployment.waiting_run(tenant="globex", invoice="INV-99")
    page = deployment.page()
    deployment.sign_in(page, token)

    # The session cookie is signed, HttpOnly, Secure, SameSite and never the key.
    [cookie] = page.context.cookies()
    assert cookie["name"] == "__Host-stateward"
    assert (cookie["httpOnly"], cookie["secure"], cookie["sameSite"]) == (True, True, "Lax")
    assert token.split(".", 1)[1] not in cookie["value"] and token not in cookie["value"]

    rows = page.locator("[data-testid=inbox-row]")
    assert rows.count() == 1  # only the caller's tenant
    assert run in rows.first.inner_text() and other_tenant not in page.content()
    rows.first.locator("a", has_text="approval_001").click()

    state = deployment.runtime.get(run)
    assert state.pending is not None and state.pending.guarded_action is not None
    action = state.pending.guarded_action
    assert page.get_by_test_id("action-tool").inner_text() == "pay"
    assert '"invoice": "INV-42"' in page.get_by_test_id("action-args").inner_text()
    assert '"amount_cents": 125000' in page.get_by_test_id("action-args").inner_text()
    assert page.get_by_test_id("action-digest").inner_text() == action.digest
    assert page.get_by_test_id("action-plan-version").inner_text() == "none"
    assert page.get_by_test_id("expires").inner_text() == "never"
    assert page.locator("[data-testid=event][data-type=pending_recorded]").count() == 1

    page.fill("#comment", "matches the PO")
    page.get_by_test_id("approve").click()
    page.wait_for_url(re.compile(rf"/inbox/runs/{run}\?answered=approval_001"))
    assert "approved" in page.get_by_test_id("confirmation").inner_text()
    # The run page polls (htmx) until the worker has run the approved call and the run ended.
    page.get_by_test_id("run-status").filter(has_text="COMPLETED").wait_for(timeout=20_000)
    assert page.locator("[data-testid=event][data-type=tool_attempted]").count() >= 1

    [answer] = answered(deployment, run)
    assert (answer["by"], answer["verdict"], answer["text"]) == (f"alice [{key_id}]", "approved", "matches the PO")
    assert PAID.count("INV-42") == 1
    assert deployment.runtime.get(run).usage.approvals_consumed == 1
    assert csp_violations(deployment) == []


def test_a_rejection_from_the_inbox_ends_the_payment_unpaid(deployment: Deployment) -> None:
    token, key_id = deployment.key("acme", "approver", name="rita")
    run = deployment.waiting_run(invoice="INV-13")
    page = deployment.page()
    deployment.sign_in(page, token)
    page.goto(f"{deployment.base}/inbox/runs/{run}/requests/approval_001")
    page.fill("#comment", "wrong supplier")
    page.get_by_test_id("reject").click()
    page.get_by_test_id("run-status").filter(has_text="FAILED").wait_for(timeout=20_000)
    [answer] = answered(deployment, run)
    assert (answer["by"], answer["verdict"], answer["text"]) == (f"rita [{key_id}]", "rejected", "wrong supplier")
    assert "INV-13" not in PAID
    # The request page now says how it was answered and offers no form.
    page.goto(f"{deployment.base}/inbox/runs/{run}/requests/approval_001")
    assert "rejected" in page.get_by_test_id("answered").inner_text()
    assert page.get_by_test_id("approve").count() == 0


def test_forged_forms_are_refused_and_change_nothing(deployment: Deployment) -> None:
    token, _ = deployment.key("acme", "approver")
    run = deployment.waiting_run(invoice="INV-66")
    page = deployment.page()
    deployment.sign_in(page, token)
    url = f"{deployment.base}/inbox/runs/{run}/requests/approval_001"

    # The real form with its CSRF token taken out (as a same-site forgery would lack it).
    page.goto(url)
    page.locator("input[name=csrf_token]").last.evaluate("input => input.remove()")
    page.get_by_test_id("approve").click()
    assert page.get_by_test_id("error").inner_text().startswith("CSRF_REJECTED")

    # The real form with someone else's token.
    page.goto(url)
    page.locator("form[action$=answer] input[name=csrf_token]").evaluate("input => input.value = 'forged'")
    page.get_by_test_id("approve").click()
    assert page.get_by_test_id("error").inner_text().startswith("CSRF_REJECTED")

    # Another site posting the same form: no session cookie travels (SameSite), so nobody is signed in.
    attacker = page.context.new_page()
    attacker.set_content(
        f'<form method="post" action="{url}/answer"><input name="verdict" value="approve">'
        '<button id="go">win a prize</button></form>'
    )
    attacker.click("#go")
    attacker.wait_for_url(re.compile(r"/inbox/login"))

    assert answered(deployment, run) == []
    assert deployment.runtime.get(run).status.value == "WAITING_FOR_USER"
    assert "INV-66" not in PAID


def test_a_models_markup_and_escape_sequences_render_inert_and_labelled(deployment: Deployment) -> None:
    token, _ = deployment.key("acme", "approver")
    run = deployment.waiting_run(agent="asker")
    page = deployment.page()
    deployment.sign_in(page, token)
    page.goto(f"{deployment.base}/inbox/runs/{run}/requests/approval_001")

    question = page.get_by_test_id("question")
    shown = question.inner_text()
    assert '<script>window.__pwned = 1</script><img src="x" onerror="window.__pwned = 2">' in shown
    assert "\\x1b[2J" in shown and "\\x1b]52;c;" in shown and "\\x07" in shown  # escapes shown, not obeyed
    assert "\\u202e0001$ USD" in shown and "\u202e" not in shown and "\x1b" not in shown
    assert question.locator("script, img").count() == 0  # text, not elements
    assert page.evaluate("() => window.__pwned === undefined")
    assert "model's words" in (page.locator("p.label.model").text_content() or "")
    # The same words on the timeline's event payloads stay text too.
    page.goto(f"{deployment.base}/inbox/runs/{run}")
    assert page.locator("[data-testid=events] script, [data-testid=events] img").count() == 0
    assert page.evaluate("() => window.__pwned === undefined")
    assert csp_violations(deployment) == []


def test_another_site_cannot_sign_a_user_out_and_signing_out_ends_every_copy(deployment: Deployment) -> None:
    token, _ = deployment.key("acme", "approver")
    page = deployment.page()
    deployment.sign_in(page, token)
    # Another site links (or redirects) the user to the sign-in form, then posts a bogus sign-in to it.
    attacker = page.context.new_page()
    attacker.set_content(f'<a id="go" href="{deployment.base}/inbox/login">free money</a>')
    attacker.click("#go")
    attacker.wait_for_url(re.compile(r"/inbox/login"))
    attacker.set_content(
        f'<form method="post" action="{deployment.base}/inbox/login"><input name="api_key" value="swk_x">'
        '<button id="go">win a prize</button></form>'
    )
    attacker.click("#go")
    page.goto(f"{deployment.base}/inbox")
    assert page.url == f"{deployment.base}/inbox" and page.get_by_test_id("who").is_visible()  # still signed in
    copied = page.context.cookies()
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url(re.compile(r"/inbox/login"))
    thief = deployment.page()
    thief.context.add_cookies(copied)
    thief.goto(f"{deployment.base}/inbox")
    assert "/inbox/login" in thief.url  # the copied cookie is signed out too
