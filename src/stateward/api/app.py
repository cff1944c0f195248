"""The HTTP service: FastAPI routes over one run backend (a Runtime on a store, or Temporal), every route scoped
to the caller's tenant.

Who the caller is comes only from ``Authorization: Bearer <key>`` (see ``identity.py``); answers,
pauses, resumes and cancels record that principal. Another tenant's ids answer 404 exactly as unknown
ones do. Answers record and return at once (``drive=False``): workers drive the run.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from stateward.api.answers import Asked, answerable_role, may_answer, record_answer, visible_run
from stateward.api.answers import key_store as key_store  # re-exported: the CLI and tests import it from here
from stateward.api.backend import RunBackend
from stateward.api.caller import Caller
from stateward.api.docs_route import PREFIX as DOCS_PREFIX
from stateward.api.docs_route import docs_route
from stateward.api.errors import error_body, status_of
from stateward.api.heap import frozen_startup_heap
from stateward.api.identity import Principal, Role, require
from stateward.api.input_guard import MAX_SQL_INTEGER, InputGuard
from stateward.api.limits import BodyLimit
from stateward.api.metrics_route import metrics_route
from stateward.api.oidc import OidcSettings, OidcVerifier
from stateward.api.readiness import DEFAULT_INTERVAL_S as DEFAULT_READY_CHECK_S
from stateward.api.readiness import Readiness
from stateward.api.schemas import (
    AnswerOutcome,
    ApproveOrReject,
    ErrorBody,
    EventPage,
    ForkRun,
    Health,
    Inbox,
    InboxItem,
    Reply,
    RunList,
    RunSummary,
    StartRun,
)
from stateward.api.stream import StreamLimits
from stateward.api.stream_hub import StreamHub
from stateward.api.web.console import CONSOLE, mount_console
from stateward.api.web.headers import SecurityHeaders
from stateward.api.web.pages import PREFIX as INBOX_PREFIX
from stateward.api.web.pages import mount_inbox
from stateward.api.web.session import Sessions, SessionSettings
from stateward.api.webhook_routes import webhook_routes, webhook_store
from stateward.api.webhook_targets import TargetPolicy
from stateward.core.errors import ErrorCode, RunError, StatewardError, UserError
from stateward.core.state import NOBODY_ANSWERS, RequestKind, RunState
from stateward.core.status import RunStatus
from stateward.runtime.agent_params import refuse_operator_params
from stateward.runtime.summary import run_summary
from stateward.store.base import Store
from stateward.store.keys import KeyStore, StoredResponse
from stateward.store.paging import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, MAX_SEARCH_CHARS, SEARCH_WINDOW

MAX_IDEMPOTENCY_KEY_CHARS = 200
_ERRORS: dict[int | str, dict[str, Any]] = {code: {"model": ErrorBody} for code in (400, 401, 403, 404, 409, 413, 422)}


Cursor = Annotated[
    str | None,
    Query(
        max_length=2048,
        pattern=r"^[A-Za-z0-9_-]+$",
        description="The ``next_cursor`` of the page before; any other token is INVALID_CURSOR (422).",
    ),
]
IdempotencyKey = Annotated[
    str | None,
    Header(min_length=1, max_length=MAX_IDEMPOTENCY_KEY_CHARS, description="A replay returns the first outcome."),
]


@dataclass(frozen=True)
class ApiSettings:
    """The service's bounds (request body size, how long one event stream lives) and its browser sessions.

    ``inbox_poll_s`` is how often an open run page reloads its timeline; ``oidc`` names an issuer whose
    bearer JWTs are accepted besides API keys.
    """

    max_body_bytes: int = 64 * 1024
    stream: StreamLimits = field(default_factory=StreamLimits)
    sessions: SessionSettings = field(default_factory=SessionSettings)
    inbox_poll_s: float = 1.0
    oidc: OidcSettings | None = None  # accept an issuer's JWTs besides API keys
    metrics_token: str | None = None  # required as a bearer token on /metrics when set (see metrics_route)
    webhook_targets: TargetPolicy = field(default_factory=TargetPolicy)  # where webhooks may go
    ready_check_s: float = DEFAULT_READY_CHECK_S  # /readyz runs the store's integrity check at most this often
    docs: bool = False  # serve /docs (Swagger UI, local assets, strict CSP); off unless the operator asks
    freeze_startup_heap: bool = True  # see api/heap.py: full collections then skip the service's own heap


def _utcnow() -> datetime:
    return datetime.now(UTC)


def create_app(
    runtime: RunBackend,
    settings: ApiSettings | None = None,
    *,
    service_store: Store | None = None,
    clock: Callable[[], datetime] = _utcnow,
    metrics: Callable[[], tuple[bytes, str]] | None = None,
) -> FastAPI:
    """The service over ``runtime``: routes under ``/v1``, the inbox under ``/inbox``, ``/healthz``, ``/readyz``,
    and ``/metrics`` when ``metrics`` (the Prometheus text) is given. API keys, signed-out sessions and webhooks
    live in ``service_store`` (by default the runtime's own store; a Temporal backend has none, see backend.py)."""
    settings = settings or ApiSettings()
    service = runtime.store if service_store is None else service_store
    keys = key_store(service)
    app = FastAPI(
        title="stateward",
        version="1",
        summary="The model proposes, the runtime decides.",
        docs_url=None,  # FastAPI's pages load CDN scripts: /docs only when asked for, from local files
        redoc_url=None,
        lifespan=frozen_startup_heap if settings.freeze_startup_heap else None,
    )
    app.state.keys = keys
    app.state.oidc = None if settings.oidc is None else OidcVerifier(settings.oidc)
    _error_handlers(app)
    _health_routes(app, [runtime.store] if service_store is None else [runtime.store, service], settings.ready_check_s)
    if metrics is not None:
        metrics_route(app, metrics, token=settings.metrics_token)
    v1 = APIRouter(prefix="/v1", responses=_ERRORS)
    _run_routes(v1, runtime)
    _run_read_routes(v1, runtime)
    _event_routes(v1, runtime, settings)
    _request_routes(v1, runtime, keys, clock)
    _control_routes(v1, runtime)
    webhook_routes(v1, webhook_store(service), settings.webhook_targets)
    app.include_router(v1)
    pages = mount_inbox(app, runtime, Sessions(settings.sessions, keys), poll_s=settings.inbox_poll_s)
    mount_console(app, pages)
    if settings.docs:
        docs_route(app)
    app.add_middleware(SecurityHeaders, prefix=(INBOX_PREFIX, DOCS_PREFIX, CONSOLE))
    app.add_middleware(InputGuard)  # inside BodyLimit: what it reads is bounded
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    return app


def _json(model: BaseModel) -> Response:
    """A response model serialised once: the route built and validated it already."""
    return Response(model.model_dump_json(), media_type="application/json")


def _fingerprint(who: Principal, *parts: str | None) -> str:
    return hashlib.sha256(json.dumps([who.scope, *parts]).encode()).hexdigest()


def _scoped(who: Principal, idempotency_key: str) -> str:
    """The key as kept: each principal's keys are its own (two callers' ``k-1`` never meet)."""
    return f"{who.scope} {idempotency_key}"


def _replayed(kept: StoredResponse, fingerprint: str) -> Response:
    if kept.fingerprint != fingerprint:
        raise RunError(
            "this Idempotency-Key was used for a different request; use a new key",
            code=ErrorCode.IDEMPOTENCY_KEY_REUSED,
        )
    return Response(kept.body, status_code=kept.status_code, media_type="application/json")


def _error_handlers(app: FastAPI) -> None:
    """Named errors as JSON bodies with their HTTP statuses."""

    @app.exception_handler(StatewardError)
    def _named(_: Request, exc: StatewardError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if exc.code == ErrorCode.UNAUTHENTICATED else None
        status = status_of(exc)
        # A store's own words can name its host, port and database: callers get the code alone.
        message = "the store cannot serve this request now" if status >= 500 else exc.message
        return JSONResponse(error_body(exc.code, message), status_code=status, headers=headers)

    @app.exception_handler(RequestValidationError)
    def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(part) for part in first.get("loc", ()))
        message = f"{where}: {first.get('msg', 'invalid request')}"[:300]
        return JSONResponse(error_body(ErrorCode.INVALID_REQUEST, message), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: ErrorCode.NOT_FOUND, 405: ErrorCode.METHOD_NOT_ALLOWED}.get(exc.status_code, ErrorCode.HTTP_ERROR)
        headers = dict(exc.headers or {})
        if exc.status_code == 405:  # every method some route of this path answers, not the first route's alone
            headers["Allow"] = allowed_methods(app, request)
        return JSONResponse(error_body(code, str(exc.detail)), status_code=exc.status_code, headers=headers)


def allowed_methods(app: FastAPI, request: Request) -> str:
    """The ``Allow`` header of a 405: each method some route of the request's path answers (the router's
    own header names the first route's alone; ``/v1/runs`` has two)."""
    found = []
    for method in _METHODS:
        scope = {**request.scope, "method": method}
        if any(route.matches(scope)[0] is Match.FULL for route in app.router.routes):
            found.append(method)
    return ", ".join(found)


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


def _health_routes(app: FastAPI, stores: list[Store], ready_check_s: float) -> None:
    """Liveness and readiness (of every store the service reads), without a key."""

    @app.get("/healthz", response_model=Health, tags=["health"])
    def healthz() -> Health:
        """The process is up."""
        return Health(status="ok")

    checks = [Readiness(store, interval_s=ready_check_s) for store in stores]

    @app.get("/readyz", response_model=Health, tags=["health"], responses={503: {"model": ErrorBody}})
    def readyz() -> Response:
        """The store passes its integrity check (at most once per interval) and answers; 503
        STORE_CORRUPT or STORE_UNAVAILABLE otherwise."""
        problem = next((found for check in checks if (found := check.problem()) is not None), None)
        if problem is not None:
            return JSONResponse(error_body(*problem), status_code=503)
        return JSONResponse(Health(status="ready").model_dump())


def _summary(runtime: RunBackend, state: RunState) -> RunSummary:
    return RunSummary.model_validate(run_summary(runtime.store, state))


def _run_routes(v1: APIRouter, runtime: RunBackend) -> None:
    """Start and fork runs."""

    # -- runs ----------------------------------------------------------------------------------
    @v1.post("/runs", response_model=RunSummary, status_code=201, tags=["runs"])
    def start_run(body: StartRun, who: Caller) -> RunSummary:
        """Start a registered agent by name; returns at once (a worker drives it) unless ``drive``."""
        require(who, Role.SUBMITTER)
        refuse_operator_params(body.params)
        agent = runtime.agents.create(body.agent, body.params)
        state = runtime.submit(agent, body.goal, tenant=who.tenant)
        if body.drive:
            state = runtime.drive(state.run_id)
        return _summary(runtime, state)

    @v1.post("/runs/{run_id}/fork", response_model=RunSummary, status_code=201, tags=["runs"])
    def fork_run(run_id: str, body: ForkRun, who: Caller) -> RunSummary:
        """A new run of the caller's tenant whose history up to event ``at`` is this run's: journalled side
        effects replayed, usage carried, grants and later answers not; another tenant's run is a 404."""
        require(who, Role.SUBMITTER)
        refuse_operator_params(body.params)
        state = runtime.fork(
            run_id,
            at=body.at,
            by=who.subject,
            tenant=who.tenant,
            agent_version=body.agent_version,
            params=body.params or None,
            drive=body.drive,
        )
        return _summary(runtime, state)


def _run_read_routes(v1: APIRouter, runtime: RunBackend) -> None:
    """List and show runs (the caller's tenant's only)."""

    @v1.get("/runs", response_model=RunList, tags=["runs"])
    def list_runs(
        who: Caller,
        status: Annotated[
            str | None,
            Query(json_schema_extra={"enum": [s.value for s in RunStatus]}, description="INVALID_FILTER otherwise"),
        ] = None,
        agent: Annotated[str | None, Query(max_length=128)] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE)] = DEFAULT_PAGE_SIZE,
        cursor: Cursor = None,
        version: Annotated[str | None, Query(max_length=64, description="runs of this agent version")] = None,
        q: Annotated[
            str | None,
            Query(
                max_length=MAX_SEARCH_CHARS,
                description="runs whose id starts with it or whose goal holds it (ASCII case ignored); a page reads"
                f" at most {SEARCH_WINDOW:,} runs, so it may be short while next_cursor leads on",
            ),
        ] = None,
    ) -> RunList:
        """The caller's tenant's runs, newest first, a page at a time."""
        require(who, Role.VIEWER)
        page = runtime.list_runs(
            status=status, tenant=who.tenant, agent=agent, limit=limit, cursor=cursor, version=version, search=q
        )
        return RunList(runs=page.items, next_cursor=page.next_cursor)

    @v1.get("/runs/{run_id}", response_model=RunSummary, tags=["runs"])
    def show_run(run_id: str, who: Caller) -> RunSummary:
        """One run, as ``stateward runs show --json``."""
        require(who, Role.VIEWER)
        return _summary(runtime, visible_run(runtime, run_id, who.tenant))


def _event_routes(v1: APIRouter, runtime: RunBackend, settings: ApiSettings) -> None:
    """A run's events, paged and streamed (SSE, capped per key and in all: ``ApiSettings.stream``)."""
    streams = StreamHub(runtime, settings.stream)

    @v1.get("/runs/{run_id}/events", response_model=EventPage, tags=["runs"])
    def run_events(
        run_id: str,
        who: Caller,
        after: Annotated[int, Query(ge=0, le=MAX_SQL_INTEGER)] = 0,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE)] = DEFAULT_PAGE_SIZE,
    ) -> EventPage:
        """The run's events numbered above ``after``."""
        require(who, Role.VIEWER)
        events = runtime.events(run_id, after, limit=limit, tenant=who.tenant)
        return EventPage(events=events, next_after=events[-1].seq if events else after)

    @v1.get(
        "/runs/{run_id}/events/stream",
        tags=["runs"],
        response_class=StreamingResponse,
        responses={
            200: {"content": {"text/event-stream": {}}, "description": "Server-Sent Events"},
            429: {"model": ErrorBody, "description": "STREAM_LIMIT / STREAM_LIMIT_PER_KEY; see Retry-After"},
        },
    )
    def stream_events(
        run_id: str,
        who: Caller,
        after: Annotated[int, Query(ge=0, le=MAX_SQL_INTEGER)] = 0,
        last_event_id: Annotated[str | None, Header(max_length=20, pattern=r"^\s*[0-9]{1,19}\s*$")] = None,
    ) -> Response:
        """The run's events as SSE from ``Last-Event-ID`` (else ``after``); ends when terminal or idle.

        429 past the per-key or the global cap on open streams (``ApiSettings.stream``)."""
        require(who, Role.VIEWER)
        start = after
        if last_event_id is not None:
            if not last_event_id.strip().isdigit():
                raise UserError("Last-Event-ID must be an event number", code=ErrorCode.INVALID_CURSOR)
            start = int(last_event_id)
        visible_run(runtime, run_id, who.tenant)
        return streams.response(run_id, who, start)


def _request_routes(v1: APIRouter, runtime: RunBackend, keys: KeyStore, clock: Callable[[], datetime]) -> None:
    """The inbox and the answers to it."""

    # -- the inbox and answers -----------------------------------------------------------------
    @v1.get("/inbox", response_model=Inbox, tags=["requests"])
    def inbox(
        who: Caller,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE)] = DEFAULT_PAGE_SIZE,
        cursor: Cursor = None,
        role: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
        kind: Annotated[
            str | None,
            Query(json_schema_extra={"enum": [k.value for k in RequestKind]}, description="INVALID_FILTER otherwise"),
        ] = None,
        agent: Annotated[str | None, Query(min_length=1, max_length=128)] = None,
    ) -> Response:
        """Open requests of the caller's tenant that the caller may answer, each with its exact guarded action;
        ``role``: only those that approver role answers (a tool's own role, else its agent's); ``kind``: only
        requests of that kind; ``agent``: only those of that agent's runs (each filter in the store's query)."""
        require(who, Role.APPROVER)
        page = runtime.list_requests(tenant=who.tenant, limit=limit, cursor=cursor, role=role, kind=kind, agent=agent)
        items = [
            InboxItem(run_id=row.run_id, tenant=row.tenant, request=row.request, chain=runtime.request_chain(row))
            for row in page.items
            if row.request.kind not in NOBODY_ANSWERS and may_answer(who, row.request.approver_role)
        ]
        # Built and checked above: serialised once (FastAPI would dump and re-validate the page again).
        return _json(Inbox(items=items, next_cursor=page.next_cursor))

    @v1.post("/runs/{run_id}/requests/{request_id}/approve", response_model=AnswerOutcome, tags=["requests"])
    def approve(
        run_id: str, request_id: str, body: ApproveOrReject, who: Caller, idempotency_key: IdempotencyKey = None
    ) -> Response:
        """Approve exactly the action the request guards; the run goes on in a worker."""
        return _answer(
            runtime, keys, clock, Asked(run_id, request_id, "approved", who, body.comment, body.digest), idempotency_key
        )

    @v1.post("/runs/{run_id}/requests/{request_id}/reject", response_model=AnswerOutcome, tags=["requests"])
    def reject(
        run_id: str, request_id: str, body: ApproveOrReject, who: Caller, idempotency_key: IdempotencyKey = None
    ) -> Response:
        """Reject; the controller sees the refusal (with the comment) and decides again."""
        return _answer(
            runtime, keys, clock, Asked(run_id, request_id, "rejected", who, body.comment, body.digest), idempotency_key
        )

    @v1.post("/runs/{run_id}/requests/{request_id}/reply", response_model=AnswerOutcome, tags=["requests"])
    def reply(
        run_id: str, request_id: str, body: Reply, who: Caller, idempotency_key: IdempotencyKey = None
    ) -> Response:
        """Answer a question with text."""
        return _answer(
            runtime, keys, clock, Asked(run_id, request_id, "replied", who, body.text, None), idempotency_key
        )


def _answer(
    runtime: RunBackend, keys: KeyStore, clock: Callable[[], datetime], a: Asked, idempotency_key: str | None
) -> Response:
    """Answer once; with an ``Idempotency-Key`` a replay returns the first outcome."""
    role = answerable_role(runtime, a)
    fingerprint = _fingerprint(a.who, a.run_id, a.request_id, a.verdict, a.text, a.digest)
    if idempotency_key is not None:
        idempotency_key = _scoped(a.who, idempotency_key)
        kept = keys.recall_response(a.who.tenant, idempotency_key)
        if kept is not None:
            return _replayed(kept, fingerprint)
    body = record_answer(runtime, a, role).model_dump_json()
    if idempotency_key is None:
        return Response(body, media_type="application/json")
    stored = StoredResponse(
        tenant=a.who.tenant,
        idempotency_key=idempotency_key,
        fingerprint=fingerprint,
        status_code=200,
        body=body,
        created_at=clock(),
    )
    return _replayed(keys.remember_response(stored), fingerprint)


def _control_routes(v1: APIRouter, runtime: RunBackend) -> None:
    """Pause, resume and cancel, for operators."""

    # -- pause / resume / cancel ---------------------------------------------------------------
    @v1.post("/runs/{run_id}/pause", response_model=RunSummary, tags=["control"])
    def pause(run_id: str, who: Caller) -> RunSummary:
        """Ask the run to pause at its holder's next step boundary, recorded as the caller's."""
        require(who, Role.OPERATOR)
        visible_run(runtime, run_id, who.tenant)
        return _summary(runtime, runtime.pause(run_id, by=who.subject, roles=who.roles))

    @v1.post("/runs/{run_id}/resume", response_model=RunSummary, tags=["control"])
    def resume(run_id: str, who: Caller) -> RunSummary:
        """Resume a PAUSED run, recorded as the caller's."""
        require(who, Role.OPERATOR)
        visible_run(runtime, run_id, who.tenant)
        return _summary(runtime, runtime.resume(run_id, by=who.subject, tenant=who.tenant, roles=frozenset(who.roles)))

    @v1.post("/runs/{run_id}/cancel", response_model=RunSummary, tags=["control"])
    def cancel(run_id: str, who: Caller) -> RunSummary:
        """Cancel any non-terminal run, recorded as the caller's; its open requests close."""
        require(who, Role.OPERATOR)
        visible_run(runtime, run_id, who.tenant)
        return _summary(runtime, runtime.cancel(run_id, by=who.subject, roles=who.roles))
