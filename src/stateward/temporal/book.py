"""A run's book read from Temporal, in the shape of a Store: every read surface (``runs show``, ``trace``,
``requests list``, the inbox, the console) works unchanged over it.

An open run's book is its workflow's ``book`` query; an ended run's is the workflow's result, readable with no
worker up. Listings are visibility queries over the run's search attributes, their rows read from each
workflow's memo: no workflow is asked. Writes are the workflow's alone: through this book each is refused by
name (STORE_UNSUPPORTED), never half done.
"""

from __future__ import annotations

import base64
import binascii
from datetime import datetime, timedelta
from typing import Any, NoReturn

from temporalio.client import (
    WorkflowExecution,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowQueryFailedError,
)
from temporalio.service import RPCError, RPCStatusCode

from stateward.core.errors import ErrorCode, RunNotFoundError, StoreError, UserError
from stateward.core.events import Event, NewEvent
from stateward.core.journal import BreakerState, SideEffectRecord
from stateward.core.state import PendingRequest, RequestKind, RunState
from stateward.store.paging import (
    DEFAULT_PAGE_SIZE,
    RequestPage,
    RequestRow,
    RunPage,
    decode_cursor,
    encode_cursor,
    page_size,
    run_filters,
    search_term,
)
from stateward.store.records import ArtifactRecord, Checkpoint, Lease, PendingRecord, RunRow, StepWrite
from stateward.temporal import search
from stateward.temporal.connection import Connection, not_found
from stateward.temporal.messages import Book
from stateward.temporal.workflow import WORKFLOW

_OPEN = (WorkflowExecutionStatus.RUNNING,)
# How long a read of an open run waits for a worker to answer (a worker just killed is replaced on its queue
# only after the server's sticky timeout, 10 s by default).
QUERY_TIMEOUT = timedelta(seconds=30)
_Memo = dict[str, Any]  # a listed run's memo, decoded: its row, its open requests


class TemporalBook:
    """The Store protocol over one Temporal namespace: reads answered by workflows and visibility."""

    def __init__(self, connection: Connection, *, query_timeout: timedelta = QUERY_TIMEOUT):
        """``query_timeout``: how long a read of an open run waits for a worker (then STORE_UNAVAILABLE)."""
        self._conn = connection
        self._query_timeout = query_timeout

    # -- one run ----------------------------------------------------------------------------------
    def book(self, run_id: str) -> Book:
        """Everything the run's workflow holds (RUN_NOT_FOUND for no such workflow)."""
        return self._conn.run(self._book(run_id))

    async def _book(self, run_id: str) -> Book:
        handle = self._conn.client.get_workflow_handle(run_id, result_type=Book)
        try:
            described = await handle.describe()
            if described.workflow_type != WORKFLOW:
                raise RunNotFoundError(f"no run {run_id!r}", details={"run_id": run_id})
            if described.status in _OPEN:
                book: Book = await self._asked(handle, described.task_queue or "", self._query_timeout)
            else:
                book = await handle.result()
        except RPCError as exc:
            raise not_found(run_id, exc) from None
        except WorkflowFailureError as exc:  # ended by Temporal itself (terminated, timed out), not by the run
            raise StoreError(
                f"run {run_id}'s workflow ended outside stateward ({exc.cause})"[:500],
                code=ErrorCode.STORE_CORRUPT,
                details={"run_id": run_id},
            ) from None
        return book

    @staticmethod
    async def _asked(handle: WorkflowHandle[Any, Book], queue: str, timeout: timedelta) -> Book:
        """An open run's book, from the worker polling its queue; none there within ``timeout`` is
        STORE_UNAVAILABLE naming the queue (a run of a version no worker builds, or a fleet down)."""
        try:
            book: Book = await handle.query("book", result_type=Book, rpc_timeout=timeout)
        except WorkflowQueryFailedError as exc:  # the worker answering it was lost mid-task: ask again later
            raise StoreError(
                f"run {handle.id}'s worker could not answer now ({exc})"[:500],
                code=ErrorCode.STORE_UNAVAILABLE,
                details={"run_id": handle.id, "task_queue": queue},
            ) from None
        except RPCError as exc:
            if exc.status is RPCStatusCode.FAILED_PRECONDITION:
                # No worker polls the queue now, or the run's last workflow task failed (its worker retries it and
                # logs why): the run is there, only not readable this moment.
                raise StoreError(
                    f"run {handle.id} cannot be read now ({exc.message})"[:500],
                    code=ErrorCode.STORE_UNAVAILABLE,
                    details={"run_id": handle.id, "task_queue": queue},
                ) from None
            if (
                exc.status not in (RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.CANCELLED)
                and "imeout" not in exc.message
            ):
                raise
            raise StoreError(
                f"no worker answered for run {handle.id} on task queue {queue!r} within {timeout.total_seconds():g}s:"
                " start a worker that builds its agent version (an ended run reads without one)",
                code=ErrorCode.STORE_UNAVAILABLE,
                details={"run_id": handle.id, "task_queue": queue},
            ) from None
        return book

    def load_run(self, run_id: str) -> RunState:
        """The run's state as its workflow last committed it: an open run's from its memo (no worker asked, and
        never a step a worker computed but had not yet completed), an ended run's from its result."""
        return self._conn.run(self._state(run_id))

    async def _state(self, run_id: str) -> RunState:
        handle = self._conn.client.get_workflow_handle(run_id, result_type=Book)
        try:
            described = await handle.describe()
        except RPCError as exc:
            raise not_found(run_id, exc) from None
        committed = described.raw_description.workflow_execution_info.memo.fields.get("state")
        if described.workflow_type != WORKFLOW or described.status not in _OPEN or committed is None:
            return (await self._book(run_id)).state  # an ended run, or one from before the memo held its state
        decoded = (await described.data_converter.decode([committed]))[0]
        return RunState.model_validate(decoded)

    def load_run_at(self, run_id: str) -> tuple[RunState, int]:
        """The state and the seq of its last event."""
        book = self.book(run_id)
        return book.state, len(book.events)

    def last_seq(self, run_id: str) -> int:
        """The seq of the run's last event."""
        return len(self.book(run_id).events)

    def read_events(self, run_id: str, after_seq: int = 0, limit: int | None = None) -> list[Event]:
        """The run's events above ``after_seq``, at most ``limit``."""
        events = self.book(run_id).events[after_seq:]
        return events if limit is None else events[:limit]

    def get_request(self, run_id: str, request_id: str) -> PendingRecord | None:
        """One of the run's requests, with its answer."""
        found = [r for r in self.book(run_id).requests if r.request.request_id == request_id]
        return found[0] if found else None

    def get_control(self, run_id: str) -> str | None:
        """A pause or cancel asked and not yet honoured."""
        return self.book(run_id).control

    def list_artifacts(self, run_id: str) -> list[ArtifactRecord]:
        """Every artifact version, by name then version."""
        return sorted(self.book(run_id).artifacts, key=lambda a: (a.name, a.version))

    def get_artifact(self, run_id: str, name: str, version: int | None = None) -> ArtifactRecord | None:
        """One artifact version (the latest without ``version``)."""
        found = [a for a in self.book(run_id).artifacts if a.name == name and version in (None, a.version)]
        return max(found, key=lambda a: a.version) if found else None

    def side_effects_of(self, run_id: str, statuses: tuple[str, ...]) -> list[SideEffectRecord]:
        """The run's journal entries in these statuses."""
        return [r for r in self.book(run_id).journal if r.status in statuses]

    def latest_checkpoint(self, run_id: str) -> Checkpoint | None:
        """None: a workflow's history is its checkpoint (Temporal replays it), none is kept apart."""
        self.book(run_id)
        return None

    def checkpoints_of(self, run_id: str, limit: int = 1000) -> list[Checkpoint]:
        """Empty, as :meth:`latest_checkpoint` says."""
        self.book(run_id)
        return []

    def checkpoint_at(self, run_id: str, seq: int) -> Checkpoint | None:
        """None, as :meth:`latest_checkpoint` says."""
        return None

    def forks_of(self, run_id: str, limit: int = 100) -> list[str]:
        """Empty: a Temporal backend does not fork runs."""
        return []

    def lease_of(self, run_id: str) -> Lease | None:
        """None: Temporal, not a lease, says which worker drives a workflow."""
        return None

    def get_breaker(self, tool: str) -> BreakerState | None:
        """None: each run's breakers live in its workflow."""
        return None

    def get_side_effect(self, idempotency_key: str) -> SideEffectRecord | None:
        """None: each run's journal lives in its workflow (see :meth:`side_effects_of`)."""
        return None

    def check_integrity(self) -> None:
        """Nothing to check here: the server keeps its own database."""

    def close(self) -> None:
        """Close the connection."""
        self._conn.close()

    # -- listings -----------------------------------------------------------------------------------
    def list_runs(self, limit: int = 100) -> list[RunRow]:
        """The first ``limit`` runs of the listing's order."""
        return self.page_runs(limit=limit).items

    def page_runs(
        self,
        *,
        status: str | None = None,
        tenant: str | None = None,
        agent: str | None = None,
        limit: int = DEFAULT_PAGE_SIZE,
        cursor: str | None = None,
        version: str | None = None,
        search: str | None = None,
    ) -> RunPage:
        """Runs as visibility lists them (open runs first, then ended ones by when they ended, newest first);
        ``search`` matches a run id's start (goals are not indexed on Temporal)."""
        size = page_size(limit)
        filters: dict[str, str | None] = {**run_filters(status, tenant, agent, version)}
        term = search_term(search)
        if term is not None:
            filters["search"] = term
        clauses = [_eq(search_key, filters.get(name)) for name, search_key in _RUN_KEYS]
        if term is not None:
            clauses.append(f"WorkflowId STARTS_WITH {_literal(term)}")
        memos, token = self._page(clauses, size, "runs", filters, cursor)
        rows = [row for row in (_row(m) for m in memos) if row is not None]
        return RunPage(items=rows, next_cursor=_cursor("runs", filters, token))

    def list_requests(self, run_id: str | None = None, open_only: bool = True) -> list[PendingRecord]:
        """A run's requests (every one, or its open ones); without a run, the first page of open ones."""
        if run_id is None:
            return list(self.page_requests(open_only=open_only).items)
        return [r for r in self.book(run_id).requests if r.is_open or not open_only]

    def page_requests(
        self,
        *,
        run_id: str | None = None,
        tenant: str | None = None,
        open_only: bool = True,
        limit: int = DEFAULT_PAGE_SIZE,
        cursor: str | None = None,
        kind: str | None = None,
        agent: str | None = None,
        role: str | None = None,
    ) -> RequestPage:
        """Open requests of the runs visibility finds waiting on one (their rows from each run's memo); one run's
        requests (answered ones too with ``open_only=False``) from its book."""
        size = page_size(limit)
        if kind is not None and kind not in {k.value for k in RequestKind}:
            raise UserError(f"unknown request kind {kind[:40]!r}", code=ErrorCode.INVALID_FILTER)
        if run_id is not None:
            state_tenant = self.load_run(run_id).tenant
            rows = [
                RequestRow(run_id=r.run_id, request=r.request, answer=r.answer, tenant=state_tenant)
                for r in self.list_requests(run_id, open_only)
                if _matches(r.request, kind, role) and tenant in (None, state_tenant)
            ]
            return RequestPage(items=rows[:size])
        filters = {"tenant": tenant, "kind": kind, "agent": agent, "role": role}
        clauses = [
            f"{search.PENDING_KIND.name} != {_literal(search.NO_PENDING)}",
            _eq(search.TENANT, tenant),
            _eq(search.PENDING_KIND, kind),
            _eq(search.AGENT, agent),
            _eq(search.APPROVER_ROLE, role),
        ]
        memos, token = self._page(clauses, size, "requests", filters, cursor)
        items = [row for m in memos for row in _requests(m) if _matches(row.request, kind, role)]
        return RequestPage(items=items, next_cursor=_cursor("requests", filters, token))

    def _page(
        self, clauses: list[str | None], size: int, kind: str, filters: dict[str, Any], cursor: str | None
    ) -> tuple[list[_Memo], bytes | None]:
        token = None if cursor is None else _token(decode_cursor(cursor, kind, filters, 1)[0], kind)
        query = " AND ".join([f"WorkflowType = {_literal(WORKFLOW)}", *(c for c in clauses if c is not None)])
        return self._conn.run(_list(self._conn, query, size, token))

    # -- writes: the workflow's own ---------------------------------------------------------------
    def create_run(self, state: RunState, events: list[NewEvent]) -> list[Event]:
        """Refused: a run starts as a workflow (``TemporalRuntime.submit``)."""
        _workflow_writes("create_run")

    def commit_step(self, run_id: str, expected_seq: int, write: StepWrite, lease: Lease | None = None) -> int:
        """Refused: only the run's workflow commits its steps."""
        _workflow_writes("commit_step")

    def set_control(self, run_id: str, control: str | None) -> None:
        """Refused: a pause or cancel is an Update of the workflow."""
        _workflow_writes("set_control")

    def acquire_lease(self, run_id: str, owner: str, ttl_s: float) -> Lease:
        """Refused: Temporal assigns a workflow to a worker."""
        _workflow_writes("acquire_lease")

    def renew_lease(self, lease: Lease, ttl_s: float) -> Lease:
        """Refused, as :meth:`acquire_lease`."""
        _workflow_writes("renew_lease")

    def release_lease(self, lease: Lease) -> None:
        """Refused, as :meth:`acquire_lease`."""
        _workflow_writes("release_lease")

    def claim_next(
        self, owner: str, ttl_s: float, statuses: tuple[str, ...] = ("RUNNING", "PAUSING"), *, builds: Any = None
    ) -> Lease | None:
        """Refused: a Temporal worker polls its task queue instead."""
        _workflow_writes("claim_next")

    def claim_batch(
        self,
        owner: str,
        ttl_s: float,
        limit: int,
        statuses: tuple[str, ...] = ("RUNNING", "PAUSING"),
        *,
        builds: Any = None,
    ) -> list[Lease]:
        """Refused, as :meth:`claim_next`."""
        _workflow_writes("claim_batch")

    def due_runs(self, status: str, now: datetime, limit: int = 100) -> list[str]:
        """Empty: a workflow keeps its own timers."""
        return []

    def put_breaker(self, state: BreakerState) -> None:
        """Refused: a run's breakers are its workflow's."""
        _workflow_writes("put_breaker")

    def put_side_effect(self, record: SideEffectRecord) -> None:
        """Refused: a run's journal is its workflow's."""
        _workflow_writes("put_side_effect")

    def create_fork(
        self,
        state: RunState,
        events: list[NewEvent],
        *,
        source: str,
        at_seq: int,
        open_request: PendingRequest | None = None,
        checkpoint: str | None = None,
    ) -> int:
        """Refused: a Temporal backend does not fork runs."""
        _workflow_writes("create_fork")


_RUN_KEYS = (
    ("status", search.STATUS),
    ("tenant", search.TENANT),
    ("agent", search.AGENT),
    ("agent_version", search.VERSION),
)


def _workflow_writes(operation: str) -> NoReturn:
    raise StoreError(
        f"{operation} is not a write a Temporal backend takes from outside: the run's workflow writes its own book",
        code=ErrorCode.STORE_UNSUPPORTED,
        details={"operation": operation},
    )


def _literal(value: str) -> str:
    """A visibility query's string literal; a quote or backslash in a filter value is INVALID_FILTER (never
    spliced into the query)."""
    if "'" in value or "\\" in value or '"' in value:
        raise UserError(
            "a filter value on a Temporal backend holds no quote or backslash", code=ErrorCode.INVALID_FILTER
        )
    return f"'{value}'"


def _eq(key: Any, value: str | None) -> str | None:
    return None if value is None else f"{key.name} = {_literal(value)}"


def _matches(request: PendingRequest, kind: str | None, role: str | None) -> bool:
    return kind in (None, request.kind.value) and role in (None, request.approver_role)


def _cursor(kind: str, filters: dict[str, Any], token: bytes | None) -> str | None:
    if token is None:
        return None
    return encode_cursor(kind, filters, [base64.urlsafe_b64encode(token).decode()])


def _token(part: str, kind: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(part.encode())
    except (binascii.Error, ValueError):
        raise UserError(f"invalid {kind} cursor", code=ErrorCode.INVALID_CURSOR, details={"kind": kind}) from None


async def _list(conn: Connection, query: str, size: int, token: bytes | None) -> tuple[list[_Memo], bytes | None]:
    pages = conn.client.list_workflows(query, page_size=size, next_page_token=token)
    await pages.fetch_next_page()
    return [await _memo(e) for e in pages.current_page or []], pages.next_page_token


async def _memo(execution: WorkflowExecution) -> _Memo:
    """The run's memo, decoded as every payload is (through the operator's codec, when there is one)."""
    fields = execution.raw_info.memo.fields
    decode = execution.data_converter.decode
    row, requests = fields.get("row"), fields.get("requests")
    return {
        "row": None if row is None else (await decode([row]))[0],
        "requests": [] if requests is None else (await decode([requests]))[0],
    }


def _row(memo: _Memo) -> RunRow | None:
    row = memo["row"]
    return None if row is None else RunRow.model_validate(row)


def _requests(memo: _Memo) -> list[RequestRow]:
    return [RequestRow.model_validate(r) for r in memo["requests"]]


__all__ = ["RunNotFoundError", "TemporalBook"]
