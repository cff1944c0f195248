"""The approval inbox, server-rendered: sign in with a key, the open requests a caller may answer, one
request with the exact action it guards, approve or reject, and a run's timeline.

Every page is Jinja2 with autoescaping; everything a run, a tool or a model wrote passes through
:func:`~stateward.core.inert.inert` as well, so control characters and bidirectional overrides show as
visible escapes and markup shows as text. The only script is the vendored htmx (``static/``), which
reloads a live run's timeline; pages work without it. Every form carries the session's CSRF token.
Answers go through the same code as ``POST /v1/.../approve`` and record the signed-in key's principal.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote, urlencode

import jinja2
from fastapi import APIRouter, FastAPI, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from stateward.api.answers import Asked, answerable_role, may_answer, record_answer, visible_run
from stateward.api.backend import RunBackend
from stateward.api.errors import status_of
from stateward.api.identity import AuthError, Principal, Role, authenticate, require
from stateward.api.web.explain import explain
from stateward.api.web.readable import event_line
from stateward.api.web.session import Session, Sessions, csrf_ok, new_session
from stateward.api.web.timeline import inert_lines, timeline_rows
from stateward.api.web.times import ago, stamp
from stateward.core.errors import ErrorCode, RequestRefusedError, StatewardError
from stateward.core.inert import inert
from stateward.core.state import NOBODY_ANSWERS, RequestKind
from stateward.store.paging import DEFAULT_PAGE_SIZE, RequestRow

PREFIX = "/inbox"
CONSOLE_PREFIX = "/runs"  # the run console (console.py) shares this sign-in
RECENT_EVENTS = 20
TIMELINE_EVENTS = 200
MAX_COMMENT_CHARS = 8000
_VERDICTS = {"approve": "approved", "reject": "rejected", "reply": "replied"}


def _args_json(value: Any, indent: int | None = None) -> str:
    return json.dumps(value, ensure_ascii=False, indent=indent, sort_keys=True, default=str)


def arg_pairs(args: dict[str, Any], short: int = 200) -> list[tuple[str, str]]:
    """Each top-level argument as (name, JSON value), made inert: a value up to ``short`` characters in
    full (an email's recipient is never cut), a longer one cut with a visible note of what is left out."""
    return [(inert(str(k), 80), inert(_args_json(v), short)) for k, v in sorted(args.items())]


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(_package_dir() / "templates")),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["inert"] = inert
    env.filters["inert_lines"] = inert_lines
    env.filters["timeline_rows"] = timeline_rows
    env.filters["args_json"] = _args_json
    env.filters["arg_pairs"] = arg_pairs
    env.filters["ago"] = ago
    env.filters["event_line"] = event_line
    env.filters["stamp"] = stamp
    return env


def _package_dir() -> Path:
    return Path(str(resources.files("stateward.api.web")))


class InboxPages:
    """Renders the inbox's pages over one Runtime; one instance per app."""

    def __init__(self, runtime: RunBackend, sessions: Sessions, *, poll_s: float = 1.0):
        self.runtime = runtime
        self.sessions = sessions
        self.poll_s = poll_s
        self.env = _environment()

    def render(
        self, template: str, *, who: Principal | None, session: Session | None, status: int = 200, **context: Any
    ) -> HTMLResponse:
        html = self.env.get_template(template).render(
            prefix=PREFIX, who=who, csrf=None if session is None else session.csrf, poll_s=self.poll_s, **context
        )
        return HTMLResponse(html, status_code=status, headers={"Cache-Control": "no-store"})

    def error(self, exc: StatewardError, who: Principal | None, session: Session | None) -> HTMLResponse:
        status = status_of(exc)
        title = {401: "Not signed in", 403: "Not allowed", 404: "Not found"}.get(status, "Refused")
        return self.render(
            "error.html", who=who, session=session, status=status, code=exc.code, message=exc.message, title=title
        )

    def sign_in_page(self, request: Request, failed: str | None = None, status: int = 200) -> HTMLResponse:
        """The sign-in form on the browser's session if it has one (signed in or not: showing the form, or
        a refused sign-in, never signs anyone out), else on a new anonymous session (its CSRF token)."""
        kept = self.sessions.read(request)
        if kept is not None and kept.key_id is not None and self.sessions.principal(kept) is None:
            kept = None  # its key was revoked: start over
        session = kept or new_session(None)
        response = self.render(
            "login.html", who=None, session=session, status=status, failed=failed, next_url=_safe_next(request)
        )
        if kept is None:
            self.sessions.issue(response, None, session)
        return response

    def viewer_page(self, request: Request, build: Callable[[Principal], tuple[str, dict[str, Any]]]) -> Response:
        """A page for a signed-in viewer: ``build`` names its template and context; a visitor without a
        session goes to sign in, and a refusal renders as the error page."""
        session = self.sessions.read(request)
        who = self.sessions.principal(session)
        if who is None:
            return _to_sign_in(request)
        try:
            require(who, Role.VIEWER)
            template, context = build(who)
        except StatewardError as exc:
            return self.error(exc, who, session)
        return self.render(template, who=who, session=session, **context)

    def timeline_context(self, run_id: str, who: Principal, events: int) -> dict[str, Any]:
        run = visible_run(self.runtime, run_id, who.tenant)
        last = self.runtime.store.last_seq(run_id)
        after = max(0, last - events)
        shown = self.runtime.events(run_id, after, limit=events, tenant=who.tenant)
        return {"run": run, "events": shown, "first_shown": after + 1}


def _safe_next(request: Request) -> str:
    """Where to go after signing in: a path inside the inbox, never another site."""
    return _inside(request.query_params.get("next") or PREFIX)


def _inside(target: str) -> str:
    """``target`` if it is a path of the inbox, else the inbox itself (no open redirect)."""
    ok = any(target == p or target.startswith((f"{p}/", f"{p}?")) for p in (PREFIX, CONSOLE_PREFIX))
    return target if ok and "\\" not in target and "//" not in target else PREFIX


def _to_sign_in(request: Request) -> RedirectResponse:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"{PREFIX}/login?next={quote(target, safe='')}", status_code=303)


def mount_inbox(app: FastAPI, runtime: RunBackend, sessions: Sessions, *, poll_s: float = 1.0) -> InboxPages:
    """Add the inbox's pages under ``/inbox`` and its static files under ``/inbox/static``; the renderer
    is returned for the run console to share."""
    pages = InboxPages(runtime, sessions, poll_s=poll_s)
    router = APIRouter(prefix=PREFIX, include_in_schema=False)
    _session_routes(router, pages)
    _read_routes(router, pages)
    _request_route(router, pages)
    _answer_route(router, pages)
    app.include_router(router)
    app.mount(f"{PREFIX}/static", StaticFiles(directory=str(_package_dir() / "static")), name="inbox-static")
    return pages


def _session_routes(router: APIRouter, pages: InboxPages) -> None:
    sessions = pages.sessions

    @router.get("/login")
    def login_form(request: Request) -> Response:
        return pages.sign_in_page(request)

    @router.post("/login")
    def login(
        request: Request,
        api_key: Annotated[str, Form(max_length=200)] = "",
        csrf_token: Annotated[str | None, Form(max_length=200)] = None,
        next: Annotated[str, Form(max_length=2048)] = PREFIX,
    ) -> Response:
        if not csrf_ok(sessions.read(request), csrf_token):
            return pages.sign_in_page(request, "The form expired; sign in again.", status=403)
        try:
            who = authenticate(sessions.keys, f"Bearer {api_key.strip()}")
        except AuthError:
            return pages.sign_in_page(request, "That key is unknown, malformed or revoked.", status=401)
        target = _inside(next)
        response = RedirectResponse(target, status_code=303)
        sessions.issue(response, who.key_id)  # a new token: nothing planted before sign-in carries over
        return response

    @router.post("/logout")
    def logout(request: Request, csrf_token: Annotated[str | None, Form(max_length=200)] = None) -> Response:
        session = sessions.read(request)
        if not csrf_ok(session, csrf_token):
            return pages.error(csrf_refused(), sessions.principal(session), session)
        if session is not None and session.key_id is not None:
            sessions.revoke(session)  # in the store: a copy of this cookie is signed out too
        response = RedirectResponse(f"{PREFIX}/login", status_code=303)
        sessions.clear(response)
        return response


def _inbox_context(
    runtime: RunBackend, who: Principal, cursor: str | None, role: str | None, kind: str | None, agent: str | None
) -> dict[str, Any]:
    """One page of the requests ``who`` may answer, with their runs (agent and goal) and the filters shown
    (an empty choice of the filter form is every role, kind and agent)."""
    page = runtime.list_requests(
        tenant=who.tenant, limit=DEFAULT_PAGE_SIZE, cursor=cursor, role=role, kind=kind, agent=agent
    )
    shown = {"role": role or "", "kind": kind or "", "agent": agent or ""}
    rows = [
        row
        for row in page.items
        if row.request.kind not in NOBODY_ANSWERS and may_answer(who, row.request.approver_role)
    ]
    runs = {row.run_id: _run_head(runtime, row) for row in rows}
    return {
        "rows": rows,
        "runs": runs,
        "next_cursor": page.next_cursor,
        "may_answer_any": who.has(Role.APPROVER),
        "role": role,
        "kind": shown["kind"],
        "agent": shown["agent"],
        "kinds": [k.value for k in RequestKind if k not in NOBODY_ANSWERS],
        "next_query": urlencode({**{k: v for k, v in shown.items() if v}, "cursor": page.next_cursor or ""}),
    }


def _run_head(runtime: RunBackend, row: RequestRow) -> dict[str, str | None]:
    """The agent, version and goal an inbox row shows: from the row where the listing holds them (Temporal: no
    query of a workflow whose worker may be down), else one read of the run."""
    if row.agent is not None:
        return {"agent": row.agent, "version": row.agent_version, "goal": row.goal or ""}
    state = runtime.store.load_run(row.run_id)
    return {"agent": state.agent.name, "version": state.agent.version, "goal": state.goal}


def _read_routes(router: APIRouter, pages: InboxPages) -> None:
    runtime, sessions = pages.runtime, pages.sessions

    @router.get("")
    def inbox(
        request: Request,
        cursor: Annotated[str | None, Query(max_length=2048)] = None,
        role: Annotated[str | None, Query(max_length=200)] = None,
        kind: Annotated[str | None, Query(max_length=32)] = None,
        agent: Annotated[str | None, Query(max_length=128)] = None,
    ) -> Response:
        def build(who: Principal) -> tuple[str, dict[str, Any]]:
            return "inbox.html", _inbox_context(runtime, who, cursor, role or None, kind or None, agent or None)

        return pages.viewer_page(request, build)

    @router.get("/runs/{run_id}")
    def run_page(
        request: Request,
        run_id: str,
        answered: Annotated[str | None, Query(max_length=200)] = None,
        verdict: Annotated[str | None, Query(max_length=16)] = None,
    ) -> Response:
        def build(who: Principal) -> tuple[str, dict[str, Any]]:
            context = pages.timeline_context(run_id, who, TIMELINE_EVENTS)
            mine = None
            if answered and verdict in _VERDICTS.values():
                record = runtime.store.get_request(run_id, answered)
                if record is not None and record.answer is not None:
                    mine = record  # the confirmation names the recorded answer, never the query's words
            return "run.html", {"confirmed": mine, **context}

        return pages.viewer_page(request, build)

    @router.get("/runs/{run_id}/timeline")
    def timeline(request: Request, run_id: str) -> Response:
        """The timeline section alone, for htmx to swap in while the run is live."""
        session = sessions.read(request)
        who = sessions.principal(session)
        if who is None:
            return Response(status_code=401)
        try:
            require(who, Role.VIEWER)
            context = pages.timeline_context(run_id, who, TIMELINE_EVENTS)
        except StatewardError as exc:
            return Response(status_code=status_of(exc))
        return pages.render("_timeline.html", who=who, session=session, **context)


def _request_route(router: APIRouter, pages: InboxPages) -> None:
    runtime = pages.runtime

    @router.get("/runs/{run_id}/requests/{request_id}")
    def request_page(request: Request, run_id: str, request_id: str) -> Response:
        def build(who: Principal) -> tuple[str, dict[str, Any]]:
            context = pages.timeline_context(run_id, who, RECENT_EVENTS)
            record = runtime.store.get_request(run_id, request_id)
            if record is None:
                raise _unknown_request(run_id, request_id)
            req = record.request
            return "request.html", {
                "why": explain(runtime, context["run"], req, who.tenant),
                "record": record,
                "req": req,
                "action": req.guarded_action,
                "may_answer": may_answer(who, req.approver_role) and req.kind not in NOBODY_ANSWERS,
                **context,
            }

        return pages.viewer_page(request, build)


def _answer_route(router: APIRouter, pages: InboxPages) -> None:
    runtime, sessions = pages.runtime, pages.sessions

    @router.post("/runs/{run_id}/requests/{request_id}/answer")
    def answer(
        request: Request,
        run_id: str,
        request_id: str,
        verdict: Annotated[str, Form(max_length=16)] = "",
        comment: Annotated[str, Form(max_length=MAX_COMMENT_CHARS)] = "",
        digest: Annotated[str | None, Form(max_length=128)] = None,
        option: Annotated[str | None, Form(max_length=200)] = None,
        csrf_token: Annotated[str | None, Form(max_length=200)] = None,
    ) -> Response:
        session = sessions.read(request)
        who = sessions.principal(session)
        if who is None:
            return _to_sign_in(request)
        try:
            if not csrf_ok(session, csrf_token):
                raise csrf_refused()
            if verdict not in _VERDICTS:
                raise RequestRefusedError("the verdict must be approve, reject or reply", code=ErrorCode.UNKNOWN_OPTION)
            text = option if verdict == "reply" and option else comment.strip() or None
            asked = Asked(
                run_id, request_id, _VERDICTS[verdict], who, text, None if verdict == "reply" else digest or None
            )
            record_answer(runtime, asked, answerable_role(runtime, asked))
        except StatewardError as exc:
            return pages.error(exc, who, session)
        done = urlencode({"answered": request_id, "verdict": _VERDICTS[verdict]})
        return RedirectResponse(f"{PREFIX}/runs/{quote(run_id, safe='')}?{done}", status_code=303)


def csrf_refused() -> AuthError:
    return AuthError("the form's CSRF token is missing or does not match this session", code=ErrorCode.CSRF_REJECTED)


def _unknown_request(run_id: str, request_id: str) -> RequestRefusedError:
    return RequestRefusedError(
        f"run {run_id} has no request {request_id!r}",
        code=ErrorCode.UNKNOWN_REQUEST,
        details={"run_id": run_id, "request_id": request_id},
    )


__all__ = ["CONSOLE_PREFIX", "PREFIX", "InboxPages", "csrf_refused", "mount_inbox"]
