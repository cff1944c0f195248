"""The HTTP service: FastAPI routes over one Runtime, every route scoped to the caller's tenant.

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

from fastapi import APIRouter, Depends, FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException as StarletteHTTPException

from stateward.api.errors import error_body, status_of
from stateward.api.identity import AuthError, Principal, Role, authenticate, require
from stateward.api.limits import BodyLimit
from stateward.api.schemas import (
    AnswerOutcome,
    ApproveOrReject,
    ErrorBody,
    EventPage,
    Health,
    Inbox,
    InboxItem,
    Reply,
    RunList,
    RunSummary,
    StartRun,
)
from stateward.api.stream import StreamLimits, event_stream
from stateward.core.errors import ErrorCode, RequestRefusedError, RunError, RunNotFoundError, StatewardError, UserError
from stateward.core.state import RequestKind, RunState
from stateward.runtime.continuation import AnswerResult
from stateward.runtime.runtime import Runtime
from stateward.runtime.summary import run_summary
from stateward.store.keys import KeyStore, StoredResponse
from stateward.store.paging import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE

MAX_IDEMPOTENCY_KEY_CHARS = 200
_ERRORS: dict[int | str, dict[str, Any]] = {code: {"model": ErrorBody} for code in (401, 403, 404, 409, 413, 422)}


_bearer = HTTPBearer(auto_error=False, description="An API key from `stateward keys create`.")


def principal(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> Principal:
    """The caller, from the Authorization header only."""
    header = None if credentials is None else f"{credentials.scheme} {credentials.credentials}"
    keys: KeyStore = request.app.state.keys
    return authenticate(keys, header)


Caller = Annotated[Principal, Depends(principal)]
IdempotencyKey = Annotated[
    str | None,
    Header(min_length=1, max_length=MAX_IDEMPOTENCY_KEY_CHARS, description="A replay returns the first outcome."),
]


@dataclass(frozen=True)
class ApiSettings:
    """The service's bounds: request body size and how long one event stream lives."""

    max_body_bytes: int = 64 * 1024
    stream: StreamLimits = field(default_factory=StreamLimits)


def _utcnow() -> datetime:
    return datetime.now(UTC)


def key_store(runtime: Runtime) -> KeyStore:
    """The runtime's store as a key store (both stores are, from schema 4)."""
    store = runtime.store
    if not isinstance(store, KeyStore):
        raise UserError(f"{type(store).__name__} keeps no API keys", code=ErrorCode.STORE_UNSUPPORTED)
    return store


def visible_run(runtime: Runtime, run_id: str, tenant: str) -> RunState:
    """The run if it is the tenant's; otherwise the very error an unknown id gets."""
    state = runtime.get(run_id)
    if state.tenant != tenant:
        raise RunNotFoundError(f"no run {run_id!r}", details={"run_id": run_id})
    return state


def may_answer(principal: Principal, approver_role: str | None) -> bool:
    """An approver answers requests needing no role or a role the key holds; admin answers any."""
    if Role.ADMIN.value in principal.roles:
        return True
    return principal.has(Role.APPROVER) and (approver_role is None or approver_role in principal.roles)


def create_app(
    runtime: Runtime, settings: ApiSettings | None = None, *, clock: Callable[[], datetime] = _utcnow
) -> FastAPI:
    """The service over ``runtime`` (its store holds runs and keys): routes under ``/v1``, ``/healthz``, ``/readyz``."""
    settings = settings or ApiSettings()
    keys = key_store(runtime)
    app = FastAPI(title="stateward", version="1", summary="The model proposes, the runtime decides.")
    app.state.keys = keys
    _error_handlers(app)
    _health_routes(app, runtime)
    v1 = APIRouter(prefix="/v1", responses=_ERRORS)
    _run_routes(v1, runtime, settings, clock)
    _request_routes(v1, runtime, settings, clock)
    _control_routes(v1, runtime, settings, clock)
    app.include_router(v1)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    return app


def _fingerprint(who: Principal, *parts: str | None) -> str:
    return hashlib.sha256(json.dumps([who.key_id, *parts]).encode()).hexdigest()


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
        headers = {"WWW-Authenticate": "Bearer"} if exc.code == "UNAUTHENTICATED" else None
        return JSONResponse(error_body(exc.code, exc.message), status_code=status_of(exc), headers=headers)

    @app.exception_handler(RequestValidationError)
    def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(part) for part in first.get("loc", ()))
        message = f"{where}: {first.get('msg', 'invalid request')}"[:300]
        return JSONResponse(error_body("INVALID_REQUEST", message), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: ErrorCode.NOT_FOUND, 405: ErrorCode.METHOD_NOT_ALLOWED}.get(exc.status_code, ErrorCode.HTTP_ERROR)
        return JSONResponse(error_body(code, str(exc.detail)), status_code=exc.status_code)


def _health_routes(app: FastAPI, runtime: Runtime) -> None:
    """Liveness and readiness, without a key."""

    @app.get("/healthz", response_model=Health, tags=["health"])
    def healthz() -> Health:
        """The process is up."""
        return Health(status="ok")

    @app.get("/readyz", response_model=Health, tags=["health"], responses={503: {"model": ErrorBody}})
    def readyz() -> Response:
        """The store answers (a listing of one run); 503 STORE_UNAVAILABLE otherwise."""
        try:
            runtime.list_runs(limit=1)
        except Exception as exc:  # any failure of the store means "not ready", never a 500
            message = f"the store does not answer: {type(exc).__name__}"
            return JSONResponse(error_body("STORE_UNAVAILABLE", message), status_code=503)
        return JSONResponse(Health(status="ready").model_dump())


def _summary(runtime: Runtime, state: RunState) -> RunSummary:
    return RunSummary.model_validate(run_summary(runtime.store, state))


def _run_routes(v1: APIRouter, runtime: Runtime, settings: ApiSettings, clock: Callable[[], datetime]) -> None:
    """Start, list and show runs; their events, paged and streamed."""

    # -- runs ----------------------------------------------------------------------------------
    @v1.post("/runs", response_model=RunSummary, status_code=201, tags=["runs"])
    def start_run(body: StartRun, who: Caller) -> RunSummary:
        """Start a registered agent by name; returns at once (a worker drives it) unless ``drive``."""
        require(who, Role.SUBMITTER)
        agent = runtime.agents.create(body.agent, body.params)
        state = runtime.submit(agent, body.goal, tenant=who.tenant)
        if body.drive:
            state = runtime.drive(state.run_id)
        return _summary(runtime, state)

    @v1.get("/runs", response_model=RunList, tags=["runs"])
    def list_runs(
        who: Caller,
        status: str | None = None,
        agent: Annotated[str | None, Query(max_length=128)] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE)] = DEFAULT_PAGE_SIZE,
        cursor: Annotated[str | None, Query(max_length=2048)] = None,
    ) -> RunList:
        """The caller's tenant's runs, newest first, a page at a time."""
        require(who, Role.VIEWER)
        page = runtime.list_runs(status=status, tenant=who.tenant, agent=agent, limit=limit, cursor=cursor)
        return RunList(runs=page.items, next_cursor=page.next_cursor)

    @v1.get("/runs/{run_id}", response_model=RunSummary, tags=["runs"])
    def show_run(run_id: str, who: Caller) -> RunSummary:
        """One run, as ``stateward runs show --json``."""
        require(who, Role.VIEWER)
        return _summary(runtime, visible_run(runtime, run_id, who.tenant))

    @v1.get("/runs/{run_id}/events", response_model=EventPage, tags=["runs"])
    def run_events(
        run_id: str,
        who: Caller,
        after: Annotated[int, Query(ge=0)] = 0,
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
        responses={200: {"content": {"text/event-stream": {}}, "description": "Server-Sent Events"}},
    )
    def stream_events(
        run_id: str,
        who: Caller,
        after: Annotated[int, Query(ge=0)] = 0,
        last_event_id: Annotated[str | None, Header(max_length=20)] = None,
    ) -> StreamingResponse:
        """The run's events as SSE from ``Last-Event-ID`` (else ``after``); ends when terminal or idle."""
        require(who, Role.VIEWER)
        start = after
        if last_event_id is not None:
            if not last_event_id.strip().isdigit():
                raise UserError("Last-Event-ID must be an event number", code=ErrorCode.INVALID_CURSOR)
            start = int(last_event_id)
        visible_run(runtime, run_id, who.tenant)
        frames = event_stream(runtime, run_id, who.tenant, start, settings.stream)
        return StreamingResponse(frames, media_type="text/event-stream", headers={"Cache-Control": "no-store"})


def _request_routes(v1: APIRouter, runtime: Runtime, settings: ApiSettings, clock: Callable[[], datetime]) -> None:
    """The inbox and the answers to it."""

    # -- the inbox and answers -----------------------------------------------------------------
    @v1.get("/inbox", response_model=Inbox, tags=["requests"])
    def inbox(
        who: Caller,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE)] = DEFAULT_PAGE_SIZE,
        cursor: Annotated[str | None, Query(max_length=2048)] = None,
    ) -> Inbox:
        """Open requests of the caller's tenant that the caller may answer, each with its exact guarded action."""
        require(who, Role.APPROVER)
        page = runtime.list_requests(tenant=who.tenant, limit=limit, cursor=cursor)
        items = [
            InboxItem(run_id=row.run_id, tenant=row.tenant, request=row.request)
            for row in page.items
            if row.request.kind is not RequestKind.TIMER and may_answer(who, row.request.approver_role)
        ]
        return Inbox(items=items, next_cursor=page.next_cursor)

    keys = key_store(runtime)

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


@dataclass(frozen=True)
class Asked:
    """One answer as the caller sent it: who is the key's principal, never a field of the body."""

    run_id: str
    request_id: str
    verdict: str
    who: Principal
    text: str | None
    digest: str | None


def _answerable_role(runtime: Runtime, a: Asked) -> str | None:
    """The request's approver role, after checking the run is the caller's and the caller may answer it."""
    require(a.who, Role.APPROVER)
    visible_run(runtime, a.run_id, a.who.tenant)
    record = runtime.store.get_request(a.run_id, a.request_id)
    if record is None:
        raise RequestRefusedError(
            f"run {a.run_id} has no request {a.request_id!r}",
            code=ErrorCode.UNKNOWN_REQUEST,
            details={"run_id": a.run_id, "request_id": a.request_id},
        )
    role = record.request.approver_role
    if not may_answer(a.who, role):
        raise AuthError(f"{a.request_id} needs an answerer with role {role!r}", code=ErrorCode.ROLE_NOT_ALLOWED)
    return role


def _record_answer(runtime: Runtime, a: Asked, role: str | None) -> AnswerOutcome:
    # An admin vouches for any role; everyone else only for the roles their key holds.
    roles = a.who.roles | ({role} if role is not None and Role.ADMIN.value in a.who.roles else set())
    common: dict[str, Any] = {"by": a.who.subject, "tenant": a.who.tenant, "roles": frozenset(roles), "drive": False}
    result: AnswerResult
    if a.verdict == "approved":
        result = runtime.approve(a.run_id, a.request_id, comment=a.text, digest=a.digest, **common)
    elif a.verdict == "rejected":
        result = runtime.reject(a.run_id, a.request_id, comment=a.text, digest=a.digest, **common)
    else:
        result = runtime.reply(a.run_id, a.request_id, text=a.text or "", **common)
    return AnswerOutcome(
        run_id=a.run_id,
        request_id=a.request_id,
        verdict=result.answer.verdict,
        by=result.answer.by,
        at=result.answer.at,
        text=result.answer.text,
        already_answered=result.already_answered,
        status=result.state.status,
    )


def _answer(
    runtime: Runtime, keys: KeyStore, clock: Callable[[], datetime], a: Asked, idempotency_key: str | None
) -> Response:
    """Answer once; with an ``Idempotency-Key`` a replay returns the first outcome."""
    role = _answerable_role(runtime, a)
    fingerprint = _fingerprint(a.who, a.run_id, a.request_id, a.verdict, a.text, a.digest)
    if idempotency_key is not None:
        kept = keys.recall_response(a.who.tenant, idempotency_key)
        if kept is not None:
            return _replayed(kept, fingerprint)
    body = _record_answer(runtime, a, role).model_dump_json()
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


def _control_routes(v1: APIRouter, runtime: Runtime, settings: ApiSettings, clock: Callable[[], datetime]) -> None:
    """Pause, resume and cancel, for operators."""

    # -- pause / resume / cancel ---------------------------------------------------------------
    @v1.post("/runs/{run_id}/pause", response_model=RunSummary, tags=["control"])
    def pause(run_id: str, who: Caller) -> RunSummary:
        """Ask the run to pause at its holder's next step boundary."""
        require(who, Role.OPERATOR)
        visible_run(runtime, run_id, who.tenant)
        return _summary(runtime, runtime.pause(run_id))

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
        return _summary(runtime, runtime.cancel(run_id, by=who.subject))
