"""The inbox's pages without a browser: sessions, CSRF, headers, tenancy and roles, escaping."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from tests.api.agents_for_api import agents

from stateward.api import ApiSettings, create_app, mint_key
from stateward.api.app import key_store
from stateward.api.web.headers import CONTENT_SECURITY_POLICY
from stateward.api.web.session import SessionSettings
from stateward.core.events import EventType
from stateward.runtime.runtime import Runtime
from stateward.store.sqlite import SQLiteStore


class Inbox:
    def __init__(self, runtime: Runtime, app_settings: ApiSettings):
        self.runtime = runtime
        self.app = create_app(runtime, app_settings)

    def browser(self) -> TestClient:
        return TestClient(self.app, base_url="https://testserver", follow_redirects=True)

    def key(self, tenant: str, *roles: str, name: str = "alice") -> tuple[str, str]:
        record, token = mint_key(key_store(self.runtime), tenant=tenant, name=name, roles=roles, now=datetime.now(UTC))
        return token, record.key_id

    def waiting_run(self, agent: str = "payer", tenant: str = "acme", **params: object) -> str:
        state = self.runtime.submit(self.runtime.agents.create(agent, dict(params)), "goal", tenant=tenant)
        return self.runtime.drive(state.run_id).run_id


@pytest.fixture
def inbox(tmp_path: Path) -> Iterator[Inbox]:
    runtime = Runtime(SQLiteStore(tmp_path / "inbox.db"), agents=agents)
    yield Inbox(runtime, ApiSettings())
    runtime.close()


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert found is not None
    return found.group(1)


def signed_in(inbox: Inbox, token: str) -> tuple[TestClient, str]:
    client = inbox.browser()
    form = client.get("/inbox/login")
    page = client.post("/inbox/login", data={"api_key": token, "csrf_token": csrf_of(form.text), "next": "/inbox"})
    assert page.status_code == 200 and str(page.url).endswith("/inbox"), page.text
    return client, csrf_of(page.text)


def answer_url(run: str) -> str:
    return f"/inbox/runs/{run}/requests/approval_001/answer"


def test_pages_need_a_session_and_carry_the_security_headers(inbox: Inbox) -> None:
    client = inbox.browser()
    page = client.get("/inbox/runs/run_x", follow_redirects=False)
    assert (page.status_code, page.headers["location"]) == (303, "/inbox/login?next=%2Finbox%2Fruns%2Frun_x")
    login = client.get("/inbox/login")
    assert login.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert "script-src 'self'" in CONTENT_SECURITY_POLICY and "unsafe" not in CONTENT_SECURITY_POLICY
    assert login.headers["x-frame-options"] == "DENY" and login.headers["x-content-type-options"] == "nosniff"
    assert re.findall(r"<script(?![^>]*\bsrc=)", login.text) == []  # no inline script
    assert re.search(r"\son[a-z]+\s*=", login.text) is None and "style=" not in login.text  # no handler, no style
    cookie = login.headers["set-cookie"]
    for attribute in ("__Host-stateward=", "HttpOnly", "Secure", "SameSite=lax", "Path=/"):
        assert attribute in cookie
    assert client.get("/inbox/static/htmx.min.js").headers["content-type"].startswith("text/javascript")
    # The JSON API's documentation pages are not under the inbox's policy.
    assert "content-security-policy" not in client.get("/healthz").headers


def test_sign_in_refuses_a_bad_key_or_a_missing_token_and_never_stores_the_key(inbox: Inbox) -> None:
    token, _ = inbox.key("acme", "approver")
    client = inbox.browser()
    client.get("/inbox/login")
    no_token = client.post("/inbox/login", data={"api_key": token})
    assert no_token.status_code == 403 and "/inbox/login" in str(no_token.url)
    wrong = client.post("/inbox/login", data={"api_key": token[:-2] + "xx", "csrf_token": csrf_of(no_token.text)})
    assert wrong.status_code == 401 and "unknown, malformed or revoked" in wrong.text
    client, _ = signed_in(inbox, token)
    cookie = client.cookies.get("__Host-stateward") or ""
    assert token not in cookie and token.split(".", 1)[1] not in cookie
    # Off-site "next" targets are ignored (no open redirect).
    form = client.get("/inbox/login", params={"next": "//evil.example/inbox"})
    assert 'value="/inbox"' in form.text


def test_a_tampered_cookie_and_a_revoked_key_are_signed_out(inbox: Inbox) -> None:
    token, key_id = inbox.key("acme", "approver")
    client, _ = signed_in(inbox, token)
    assert client.get("/inbox", follow_redirects=False).status_code == 200
    good = client.cookies.get("__Host-stateward") or ""
    client.cookies.clear()
    client.cookies.set("__Host-stateward", good[:-3] + ("A" if good[-3] != "A" else "B") + good[-2:])
    assert client.get("/inbox", follow_redirects=False).status_code == 303
    client.cookies.clear()
    client.cookies.set("__Host-stateward", good)
    assert client.get("/inbox", follow_redirects=False).status_code == 200
    key_store(inbox.runtime).revoke_api_key(key_id, datetime.now(UTC))
    assert client.get("/inbox", follow_redirects=False).status_code == 303


def test_an_answer_needs_the_sessions_csrf_token_and_records_the_keys_principal(inbox: Inbox) -> None:
    token, key_id = inbox.key("acme", "approver", name="alice")
    run = inbox.waiting_run()
    client, csrf = signed_in(inbox, token)
    for forged in ({}, {"csrf_token": "x" * 43}):
        refused = client.post(answer_url(run), data={"verdict": "approve", **forged})
        assert refused.status_code == 403 and "CSRF_REJECTED" in refused.text
    _, other_csrf = signed_in(inbox, inbox.key("acme", "approver", name="eve")[0])
    crossed = client.post(answer_url(run), data={"verdict": "approve", "csrf_token": other_csrf})
    assert crossed.status_code == 403
    assert [e for e in inbox.runtime.events(run) if e.type is EventType.REQUEST_ANSWERED] == []
    digest = inbox.runtime.get(run).pending.guarded_action.digest  # type: ignore[union-attr]
    wrong = client.post(answer_url(run), data={"verdict": "approve", "csrf_token": csrf, "digest": "0" * 64})
    assert wrong.status_code == 409 and "ACTION_DIGEST_MISMATCH" in wrong.text
    done = client.post(
        answer_url(run), data={"verdict": "approve", "csrf_token": csrf, "digest": digest, "comment": " ok "}
    )
    assert done.status_code == 200 and done.url.path == f"/inbox/runs/{run}"
    assert 'data-testid="confirmation"' in done.text and "<strong>approved</strong>" in done.text
    [event] = [e.payload for e in inbox.runtime.events(run) if e.type is EventType.REQUEST_ANSWERED]
    assert (event["by"], event["text"], event["roles"]) == (f"alice [{key_id}]", "ok", ["approver"])


def test_another_tenants_run_is_not_found_exactly_as_an_unknown_one(inbox: Inbox) -> None:
    theirs = inbox.waiting_run(tenant="globex")
    client, csrf = signed_in(inbox, inbox.key("acme", "admin")[0])
    for path in ("/inbox/runs/{run}", "/inbox/runs/{run}/requests/approval_001", "/inbox/runs/{run}/timeline"):
        foreign = client.get(path.format(run=theirs))
        unknown = client.get(path.format(run="run_doesnotexist00"))
        assert foreign.status_code == unknown.status_code == 404
        assert foreign.text.replace(theirs, "ID") == unknown.text.replace("run_doesnotexist00", "ID")
    posted = client.post(answer_url(theirs), data={"verdict": "approve", "csrf_token": csrf})
    assert posted.status_code == 404 and "RUN_NOT_FOUND" in posted.text
    assert inbox.runtime.get(theirs).status.value == "WAITING_FOR_USER"
    assert theirs not in client.get("/inbox").text


def test_the_inbox_lists_what_the_callers_roles_may_answer(inbox: Inbox) -> None:
    plain = inbox.waiting_run(invoice="INV-1")
    finance = inbox.waiting_run(invoice="INV-2", approver_role="finance")
    viewer, _ = signed_in(inbox, inbox.key("acme", "viewer")[0])
    listed = viewer.get("/inbox").text
    assert plain not in listed and finance not in listed and "holds no approver role" in listed
    approver, csrf = signed_in(inbox, inbox.key("acme", "approver")[0])
    listed = approver.get("/inbox").text
    assert plain in listed and finance not in listed
    page = approver.get(f"/inbox/runs/{finance}/requests/approval_001").text
    assert 'data-testid="not-yours"' in page and 'data-testid="approve"' not in page
    refused = approver.post(answer_url(finance), data={"verdict": "approve", "csrf_token": csrf})
    assert refused.status_code == 403 and "ROLE_NOT_ALLOWED" in refused.text
    both, _ = signed_in(inbox, inbox.key("acme", "approver", "finance")[0])
    listed = both.get("/inbox").text
    assert plain in listed and finance in listed


def test_the_inbox_filters_by_kind_agent_and_role_within_the_tenant(inbox: Inbox) -> None:
    paying = inbox.waiting_run(invoice="INV-1")
    finance = inbox.waiting_run(invoice="INV-2", approver_role="finance")
    asking = inbox.waiting_run(agent="asker")
    theirs = inbox.waiting_run(tenant="globex", invoice="INV-3")
    client, _ = signed_in(inbox, inbox.key("acme", "approver", "finance")[0])

    def listed(**params: str) -> set[str]:
        page = client.get("/inbox", params=params)
        assert page.status_code == 200, page.text[:300]
        return {run for run in (paying, finance, asking, theirs) if run in page.text}

    assert listed() == {paying, finance, asking}
    assert listed(kind="input") == {asking}  # the asker's question is an input request
    assert listed(kind="approval") == {paying, finance}
    assert listed(agent="payer") == {paying, finance} and listed(agent="asker") == {asking}
    assert listed(agent="payer", role="finance") == {finance}
    assert listed(kind="input", agent="payer") == set() and listed(agent="nobody") == set()
    assert theirs not in client.get("/inbox", params={"agent": "payer", "kind": "approval"}).text
    bogus = client.get("/inbox", params={"kind": "bogus"})
    assert bogus.status_code in (400, 422) and "INVALID_FILTER" in bogus.text
    marked = client.get("/inbox", params={"agent": '"><script>alert(1)</script>'}).text
    assert "<script>alert" not in marked and "&lt;script&gt;alert(1)&lt;/script&gt;" in marked


def test_model_text_is_escaped_and_made_inert_in_the_html(inbox: Inbox) -> None:
    run = inbox.waiting_run(agent="asker")
    client, _ = signed_in(inbox, inbox.key("acme", "approver")[0])
    html = client.get(f"/inbox/runs/{run}/requests/approval_001").text
    assert "<script>window" not in html and "<img src" not in html
    assert "&lt;script&gt;window.__pwned = 1&lt;/script&gt;" in html
    assert "\x1b" not in html and "\u202e" not in html and "\x07" not in html
    assert "\\x1b[2J" in html and "\\u202e" in html


def test_a_question_can_be_replied_to_with_text_from_the_inbox(inbox: Inbox) -> None:
    run = inbox.waiting_run(agent="asker")
    client, csrf = signed_in(inbox, inbox.key("acme", "approver", name="quinn")[0])
    page = client.get(f"/inbox/runs/{run}/requests/approval_001").text
    assert 'data-testid="reply"' in page
    done = client.post(answer_url(run), data={"verdict": "reply", "comment": "use the EU entity", "csrf_token": csrf})
    assert done.status_code == 200, done.text
    [event] = [e.payload for e in inbox.runtime.events(run) if e.type is EventType.REQUEST_ANSWERED]
    assert (event["verdict"], event["text"]) == ("replied", "use the EU entity")
    payer = inbox.waiting_run()
    wrong = client.post(answer_url(payer), data={"verdict": "reply", "comment": "x", "csrf_token": csrf})
    assert wrong.status_code == 422 and "WRONG_ANSWER_KIND" in wrong.text  # an approval takes no reply


def test_sign_out_is_a_csrf_checked_post_that_signs_out_every_copy_of_the_cookie(inbox: Inbox, tmp_path: Path) -> None:
    token, _ = inbox.key("acme", "approver")
    client, csrf = signed_in(inbox, token)
    copied = client.cookies.get("__Host-stateward") or ""
    assert client.get("/inbox/logout", follow_redirects=False).status_code == 405  # not a link another site sends
    refused = client.post("/inbox/logout", data={"csrf_token": "forged"}, follow_redirects=False)
    assert refused.status_code == 403 and "CSRF_REJECTED" in refused.text
    assert client.get("/inbox", follow_redirects=False).status_code == 200  # still signed in
    out = client.post("/inbox/logout", data={"csrf_token": csrf}, follow_redirects=False)
    assert (out.status_code, out.headers["location"]) == (303, "/inbox/login")
    thief = inbox.browser()
    thief.cookies.set("__Host-stateward", copied)
    assert thief.get("/inbox", follow_redirects=False).status_code == 303  # the copy is signed out
    # Services sharing the secret and the store, one restarted after the sign-out: the copy stays refused,
    # a session never signed out still works.
    settings = ApiSettings(sessions=SessionSettings(secret="s" * 40))
    before = Inbox(inbox.runtime, settings)
    client2, csrf2 = signed_in(before, token)
    copy2 = client2.cookies.get("__Host-stateward") or ""
    assert client2.post("/inbox/logout", data={"csrf_token": csrf2}, follow_redirects=False).status_code == 303
    control, _ = signed_in(before, token)
    kept = control.cookies.get("__Host-stateward") or ""
    runtime = Runtime(SQLiteStore(tmp_path / "inbox.db"), agents=agents)
    try:
        restarted = Inbox(runtime, settings)
        for cookie, status in ((copy2, 303), (kept, 200)):
            browser = restarted.browser()
            browser.cookies.set("__Host-stateward", cookie)
            assert browser.get("/inbox", follow_redirects=False).status_code == status
    finally:
        runtime.close()


def test_another_site_cannot_sign_a_user_out_through_the_sign_in_form(inbox: Inbox) -> None:
    token, _ = inbox.key("acme", "approver")
    client, _ = signed_in(inbox, token)
    shown = client.get("/inbox/login", follow_redirects=False)  # a link or a redirect from another site
    assert "set-cookie" not in shown.headers
    posted = client.post("/inbox/login", data={"api_key": "swk_bogus"}, follow_redirects=False)  # a cross-site form
    assert posted.status_code == 403 and "set-cookie" not in posted.headers
    assert client.get("/inbox", follow_redirects=False).status_code == 200  # still signed in
