"""The shared store: PostgreSQL through a connection pool, one transaction per step.

The semantics are SQLiteStore's, clause for clause (the conformance suite runs on both). What
differs is what several machines need: runnable runs are claimed with ``FOR UPDATE SKIP LOCKED``,
lease expiry is judged by the database clock, and migrations run under an advisory lock.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql as pg_sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import ConnectionPool, PoolClosed, PoolTimeout

from stateward.core.canonical import sha256_hex
from stateward.core.errors import ErrorCode, RunError, RunNotFoundError, StaleLeaseError, StoreError, UserError
from stateward.core.events import Event, EventType, NewEvent
from stateward.core.journal import (
    BreakerState,
    SideEffectRecord,
    approval_consumed,
    stale_journal_start,
    superseded,
)
from stateward.core.state import PendingRequest, RunState
from stateward.store import _pg_direct
from stateward.store import _pg_sql as q
from stateward.store._pg_check import DEFAULT_IDLE_S, IdleCheck
from stateward.store._pg_conns import Connections, Lent
from stateward.store.base import Buildable, PayloadLimits, build_pairs, claim_limit, event_batch, refused_write
from stateward.store.keys import MAX_KEYS_LISTED, ApiKeyRecord, StoredResponse, key_exists, key_not_found
from stateward.store.lineage import inherited_artifact, inherited_artifacts, read_lineage
from stateward.store.migrations import POSTGRES_MIGRATIONS
from stateward.store.outbox import Notice, OutboxMethods, enqueue, notices_of
from stateward.store.paging import (
    DEFAULT_PAGE_SIZE,
    REQUEST_FILTER_COLUMNS,
    SEARCH_WINDOW,
    RequestPage,
    RunPage,
    decode_cursor,
    decode_run_cursor,
    encode_cursor,
    goal_excerpt,
    like_escaped,
    page_size,
    request_filters,
    request_row,
    run_filters,
    search_scope,
    search_term,
)
from stateward.store.parts import PartCache, SplitState, join_state, referenced, split_state
from stateward.store.records import (
    ArtifactRecord,
    Checkpoint,
    Lease,
    PendingRecord,
    RequestAnswer,
    RunRow,
    StepWrite,
)
from stateward.store.sessions import SessionMethods

Conn = psycopg.Connection[tuple[Any, ...]]
_FORK_CACHE = 10_000  # runs whose lineage one store object remembers
_UNREACHABLE = (psycopg.OperationalError, psycopg.InterfaceError, PoolTimeout, PoolClosed)


def _first_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split("\n")[0].split())
    return text or type(exc).__name__


def _configure(conn: Conn) -> None:
    """Every pooled session reports times in UTC, like the SQLite store, and has the step statements
    prepared (store/_pg_direct.py)."""
    conn.execute("SET TIME ZONE 'UTC'")
    _pg_direct.prepare(conn)


def _both(first: Callable[[Conn], None], then: Callable[[Conn], None]) -> Callable[[Conn], None]:
    def configure(conn: Conn) -> None:
        first(conn)
        then(conn)

    return configure


def _execute(
    cursor: psycopg.RawCursor[tuple[Any, ...]], statement: q.Positional, params: dict[str, Any]
) -> psycopg.RawCursor[tuple[Any, ...]]:
    """``statement`` with its ``$n`` placeholders sent as they are (see ``_pg_sql.Positional``)."""
    return cursor.execute(statement.sql, statement.values(params))


class _Borrowed:
    """``with`` a connection the store lends (and takes back), driver errors turned into StoreErrors: a
    class rather than a generator, as it wraps every call (a few µs less per call)."""

    __slots__ = ("lent", "store")

    def __init__(self, store: PostgresStore):
        self.store = store

    def __enter__(self) -> Lent:
        try:
            self.lent = self.store._conns.take()
        except _UNREACHABLE as exc:
            raise self.store._unavailable(exc) from exc
        return self.lent

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        self.store._conns.give(self.lent)
        if exc is None or not isinstance(exc, psycopg.Error | PoolTimeout | PoolClosed):
            return
        if isinstance(exc, _UNREACHABLE):
            raise self.store._unavailable(exc) from exc
        raise StoreError(
            f"PostgreSQL store at {self.store.where}: {_first_line(exc)}", code=ErrorCode.STORE_ERROR
        ) from exc


def _pipeline(conn: Conn) -> contextlib.AbstractContextManager[Any]:
    """Statements queued and sent together, waiting only where a result is read (libpq >= 14)."""
    return conn.pipeline() if psycopg.Pipeline.is_supported() else contextlib.nullcontext()


class PostgresStore(OutboxMethods, SessionMethods):
    """Thread-safe: each call borrows a connection (the one it last used, from the store's own stack in front of
    its pool: store/_pg_conns.py); every write is one transaction."""

    _PLACEHOLDER = "%s"
    _CLAIM_LOCK = " FOR UPDATE OF d SKIP LOCKED"

    def __init__(
        self,
        url: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        connect_timeout: float = 10.0,
        create: bool = True,
        limits: PayloadLimits | None = None,
        check_idle_s: float = DEFAULT_IDLE_S,
        configure: Callable[[Conn], None] | None = None,
    ):
        """``limits`` caps event payloads and snapshots (default: 1 MiB and 4 MiB, or
        STATEWARD_MAX_EVENT_BYTES / STATEWARD_MAX_SNAPSHOT_BYTES). A pooled connection idle longer
        than ``check_idle_s`` is pinged before it is lent (see store/_pg_check.py). ``configure`` is
        called on every new pooled connection after the store's own settings (e.g. to trace its protocol)."""
        self.limits = limits if limits is not None else PayloadLimits.from_env()
        self._parts = PartCache()
        self._forks: dict[str, tuple[str, int] | None] = {}  # run_id -> (source, shared seq): fixed at creation
        try:
            params = conninfo_to_dict(url)
        except psycopg.Error as exc:
            raise UserError(f"not a PostgreSQL URL: {_first_line(exc)}", code=ErrorCode.CONFIGURATION_ERROR) from None
        params.setdefault("connect_timeout", max(1, round(connect_timeout)))
        params.setdefault("application_name", "stateward")
        self._conninfo = make_conninfo("", **params)
        self.where = self._describe(params)
        try:
            with psycopg.connect(self._conninfo, autocommit=True) as conn:
                if not create and conn.execute(q.SCHEMA_TABLE_EXISTS).fetchone() != (True,):
                    raise StoreError(f"no stateward schema in {self.where}", code=ErrorCode.STORE_NOT_FOUND)
                self._migrate(conn)
        except psycopg.OperationalError as exc:
            raise self._unavailable(exc) from exc
        except psycopg.Error as exc:
            raise StoreError(f"cannot migrate {self.where}: {_first_line(exc)}", code=ErrorCode.STORE_ERROR) from exc
        self._idle = IdleCheck(check_idle_s)
        pool_options: dict[str, Any] = {
            "min_size": min_size,
            "max_size": max_size,
            "kwargs": {"autocommit": True, "client_encoding": "UTF8"},  # what _pg_direct sends its text in
            "configure": _configure if configure is None else _both(_configure, configure),
            "check": self._idle,
            "name": f"stateward {self.where}",
            "timeout": connect_timeout,
        }
        self._conns = Connections(lambda: self._open_pool(pool_options, connect_timeout), self._idle)

    def _open_pool(self, options: dict[str, Any], connect_timeout: float) -> ConnectionPool[Conn]:
        """The pool behind the store's connections (opened again in a forked child: see store/_pg_conns.py)."""
        pool: ConnectionPool[Conn] = ConnectionPool(self._conninfo, open=False, **options)
        try:
            pool.open(wait=True, timeout=connect_timeout)
        except PoolTimeout as exc:
            pool.close()
            raise self._unavailable(exc) from exc
        return pool

    # -- plumbing -------------------------------------------------------------------------------
    @staticmethod
    def _describe(params: dict[str, Any]) -> str:
        """Where the store is, for messages: never the password."""
        host = params.get("host") or params.get("hostaddr") or "localhost"
        port = params.get("port") or "5432"
        return f"postgresql://{host}:{port}/{params.get('dbname') or ''}"

    def _unavailable(self, exc: BaseException) -> StoreError:
        return StoreError(
            f"cannot use the PostgreSQL store at {self.where}: {_first_line(exc)}",
            code=ErrorCode.STORE_UNAVAILABLE,
            details={"store": self.where},
        )

    def _lent(self) -> _Borrowed:
        """A connection in autocommit mode with the cursor kept for it (``with``); driver errors become
        StoreErrors. The store's own stack first (store/_pg_conns.py), the pool when it is empty."""
        return _Borrowed(self)

    @contextmanager
    def _conn(self) -> Iterator[Conn]:
        """As :meth:`_lent`, the connection alone (a read is one statement)."""
        with _Borrowed(self) as lent:
            yield lent.conn

    @contextmanager
    def _tx(self) -> Iterator[Conn]:
        """One transaction: committed on exit, rolled back on any error (a refused write leaves nothing)."""
        with self._conn() as conn, conn.transaction():
            yield conn

    def _migrate(self, conn: Conn) -> None:
        """Apply missing migrations in one transaction, serialised across processes by an advisory lock.

        An up-to-date database is only read, so opening never waits behind another process's lock.
        """
        up_to_date = (len(POSTGRES_MIGRATIONS),)
        if conn.execute(q.SCHEMA_TABLE_EXISTS).fetchone() == (True,) and (
            conn.execute(q.SCHEMA_VERSION).fetchone() == up_to_date
        ):
            return
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (q.MIGRATION_LOCK_KEY,))
            conn.execute(q.SCHEMA_TABLE)
            row = conn.execute(q.SCHEMA_VERSION).fetchone()
            current = int(row[0]) if row else 0
            if current > len(POSTGRES_MIGRATIONS):
                raise StoreError(
                    f"{self.where} has schema version {current}; this stateward knows {len(POSTGRES_MIGRATIONS)}",
                    code=ErrorCode.SCHEMA_TOO_NEW,
                )
            for version, script in enumerate(POSTGRES_MIGRATIONS[current:], start=current + 1):
                for statement in script:
                    conn.execute(statement)
                conn.execute(q.SCHEMA_RECORD, (version,))

    def close(self) -> None:
        self._conns.close()

    def _one(self, sql: str, run_id: str) -> tuple[Any, ...]:
        with self._conn() as conn:
            row = conn.execute(sql, (run_id,)).fetchone()
        if row is None:
            raise RunNotFoundError(f"no run {run_id!r}", details={"run_id": run_id})
        return row

    # -- runs -----------------------------------------------------------------------------------
    def create_run(self, state: RunState, events: list[NewEvent]) -> list[Event]:
        """The run's row and first events in one statement (one round trip)."""
        split = split_state(state)
        self.limits.check_snapshot_parts(state.run_id, split.texts)
        params: dict[str, Any] = {
            "run_id": state.run_id,
            "tenant": state.tenant,
            "agent": state.agent.name,
            "agent_version": state.agent.version,
            "goal": goal_excerpt(state.goal),
            "status": state.status.value,
            "reason": state.terminal_reason,
            "snapshot": split.snapshot,
            "parts": split.refs,
            "new_seq": len(events),
            "batch": event_batch(state.run_id, events, self.limits) if events else None,
            "count": len(events),
            "lease_version": 0,
        }
        with self._lent() as lent:
            row = _execute(lent.cursor, q.create_statement(len(events)), params).fetchone()
        if row is None:
            raise RunError(f"run {state.run_id} already exists", code=ErrorCode.RUN_EXISTS)
        self._parts.committed(state.run_id, split.known)  # a new run has no parts yet (see store/parts.py)
        return [
            Event(run_id=state.run_id, seq=seq, type=ev.type, payload=ev.payload, lease_version=0, at=row[0])
            for seq, ev in enumerate(events, start=1)
        ]

    def load_run(self, run_id: str) -> RunState:
        return self.load_run_at(run_id)[0]

    def load_run_at(self, run_id: str) -> tuple[RunState, int]:
        row = self._one(q.SNAPSHOT, run_id)
        return join_state(run_id, row[0], row[2], self._read_parts(run_id, row[2])), int(row[1])

    def _read_parts(self, run_id: str, refs: str | None) -> dict[str, str]:
        digests = referenced(refs)
        if not digests:
            return {}
        with self._conn() as conn:
            return {str(d): str(b) for d, b in conn.execute(q.READ_PARTS, (run_id, digests)).fetchall()}

    def last_seq(self, run_id: str) -> int:
        return int(self._one(q.LAST_SEQ, run_id)[0])

    def get_control(self, run_id: str) -> str | None:
        value = self._one(q.GET_CONTROL, run_id)[0]
        return None if value is None else str(value)

    def set_control(self, run_id: str, control: str | None) -> None:
        with self._conn() as conn:
            if conn.execute(q.SET_CONTROL, (control, run_id)).rowcount != 1:
                raise RunNotFoundError(f"no run {run_id!r}", details={"run_id": run_id})

    def commit_step(self, run_id: str, expected_seq: int, write: StepWrite, lease: Lease | None = None) -> int:
        """One round trip for most steps (the run row's guarded update, the events and a tool step's
        attempts, one statement); a step with more to write is one pipelined transaction, two round trips
        or three."""
        state = write.state
        new_seq = expected_seq + len(write.events)
        split = split_state(state, self._parts.known(run_id))  # large memo entries apart, written when changed
        self.limits.check_snapshot_parts(run_id, split.texts)  # refused before the transaction
        params: dict[str, Any] = {
            "status": state.status._value_,  # not the enum's ``value`` property: a Python call per use
            "reason": state.terminal_reason,
            "snapshot": split.snapshot,
            "parts": split.refs,
            "new_seq": new_seq,
            "run_id": run_id,
            "expected": expected_seq,
            "not_before": None if write.not_before is None else write.not_before.timestamp(),
            "lease_version": 0 if lease is None else lease.version,
            "batch": event_batch(run_id, write.events, self.limits) if write.events else None,
            "count": len(write.events),
        }
        if lease is not None:
            params.update(owner=lease.owner, version=lease.version)
        notices = notices_of(state, expected_seq, write.events) if write.events else []
        pipelined = bool(
            write.has_contents_besides_attempts or split.new_parts or notices or (write.attempts and not write.events)
        )
        inline = bool(write.attempts) and not pipelined  # a tool step's attempts ride in its one statement
        if inline:
            params["attempts"] = q.attempts_json([(a.attempt_id, a.step, a.model_dump_json()) for a in write.attempts])
        statement = q.step_statement(
            leased=lease is not None,
            clear_control=write.clear_control,
            release=lease is not None and write.release_lease,
            events=len(write.events),
            attempts=inline,
        )
        with self._lent() as lent:
            try:
                if pipelined:
                    self._pipelined_step(lent, statement, params, lease, write, split, notices)
                else:
                    self._direct_step(lent, statement, params, lease)
            except pg_errors.UniqueViolation as exc:
                raise RunError(
                    f"step of run {run_id} repeats a record that already exists: {_first_line(exc)}",
                    code=ErrorCode.DUPLICATE_RECORD,
                    details={"run_id": run_id, "expected_seq": expected_seq},
                ) from None
        self._parts.committed(run_id, split.known)
        return new_seq

    def _pipelined_step(
        self,
        lent: Lent,
        statement: q.Positional,
        params: dict[str, Any],
        lease: Lease | None,
        write: StepWrite,
        split: SplitState,
        notices: list[Notice],
    ) -> None:
        """One transaction sent as a pipeline: BEGIN and the guarded statement (whose row is awaited),
        then the contents and COMMIT, awaited together when the pipeline ends (a webhook lookup adds one wait)."""
        conn = lent.conn
        try:
            with _pipeline(conn):
                conn.execute("BEGIN")
                now = self._guarded_step(lent, statement, params, lease)
                self._write_contents(conn, params["run_id"], params["expected"], write, now, split, notices)
                conn.execute("COMMIT")
        except BaseException:
            if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                with contextlib.suppress(psycopg.Error):  # a broken connection is discarded by the pool anyway
                    conn.execute("ROLLBACK")
            raise

    def _direct_step(self, lent: Lent, statement: q.Positional, params: dict[str, Any], lease: Lease | None) -> None:
        """The step's statement, prepared, straight through libpq (store/_pg_direct.py); through psycopg
        where the connection does not have it prepared."""
        written = _pg_direct.run(lent.conn, statement, statement.values(params))
        if written is None:
            self._guarded_step(lent, statement, params, lease)
        elif not written:
            raise self._why_not_written(lent.conn, params["run_id"], params["expected"], lease)

    def _guarded_step(
        self, lent: Lent, statement: q.Positional, params: dict[str, Any], lease: Lease | None
    ) -> datetime:
        """The step's statement; the reason nothing was written if its guard matched no row."""
        row = _execute(lent.cursor, statement, params).fetchone()
        if row is None:
            raise self._why_not_written(lent.conn, params["run_id"], params["expected"], lease)
        return row[0]  # type: ignore[no-any-return]

    def _write_contents(
        self,
        conn: Conn,
        run_id: str,
        expected_seq: int,
        write: StepWrite,
        now: datetime,
        split: SplitState,
        notices: list[Notice],
    ) -> None:
        """Everything a step writes besides the run row and its events, in the same transaction."""
        if notices:  # a wait, an end: the outbox row commits with the step (store/outbox.py)
            enqueue(conn, "%s", write.state, notices, now.timestamp())
        for digest, body in split.new_parts.items():
            conn.execute(q.INSERT_PART, (run_id, digest, body))
        if write.close_request is not None:
            self._close_request(conn, run_id, write.close_request)
        if write.close_all_requests is not None:
            conn.execute(q.CLOSE_ALL_REQUESTS, (write.close_all_requests.model_dump_json(), run_id))
        if write.open_request is not None:
            opened = write.open_request
            conn.execute(
                q.OPEN_REQUEST,
                (
                    run_id,
                    opened.request_id,
                    opened.model_dump_json(),
                    write.state.tenant,
                    opened.kind.value,
                    opened.approver_role,
                    write.state.agent.name,
                ),
            )
        with conn.cursor() as cur:
            if write.artifacts:
                cur.executemany(
                    q.INSERT_ARTIFACT,
                    [
                        (run_id, a.name, a.version, sha256_hex(a.content), a.media_type, a.content, now)
                        for a in write.artifacts
                    ],
                )
            if write.attempts:
                cur.executemany(
                    q.UPSERT_ATTEMPT, [(a.attempt_id, run_id, a.step, a.model_dump_json()) for a in write.attempts]
                )
        if write.set_agent_version:
            conn.execute(q.SET_AGENT_VERSION, (write.state.agent.version, run_id))
        if write.checkpoint is not None:
            new_seq = expected_seq + len(write.events)
            conn.execute(q.INSERT_CHECKPOINT, (run_id, new_seq, write.checkpoint, split.snapshot, split.refs, now))

    @staticmethod
    def _why_not_written(conn: Conn, run_id: str, expected_seq: int, lease: Lease | None) -> RunError:
        row = conn.execute(q.RUN_GUARD_ROW, (run_id,)).fetchone()
        return refused_write(run_id, expected_seq, lease, None if row is None else tuple(row))

    @staticmethod
    def _close_request(conn: Conn, run_id: str, answer: RequestAnswer) -> None:
        closed = conn.execute(q.CLOSE_REQUEST, (answer.model_dump_json(), run_id, answer.request_id)).fetchone()
        if closed is None:
            raise RunError(
                f"request {answer.request_id} of run {run_id} is not open",
                code=ErrorCode.REQUEST_NOT_OPEN,
                details={"run_id": run_id, "request_id": answer.request_id},
            )

    def read_events(self, run_id: str, after_seq: int = 0, limit: int | None = None) -> list[Event]:
        if self._fork_of(run_id) is None:
            return self._read_own(run_id, run_id, after_seq, None, limit)
        return read_lineage(self._fork_of, self._read_own, run_id, after_seq, limit)

    def _read_own(self, run_id: str, label: str, after_seq: int, upper: int | None, limit: int | None) -> list[Event]:
        """``run_id``'s own event rows above ``after_seq`` (none above ``upper``), labelled ``label``."""
        with self._conn() as conn:
            if upper is None:
                rows = conn.execute(q.READ_BATCHES, (run_id, after_seq, limit)).fetchall()
            else:
                rows = conn.execute(q.READ_BATCHES_UPTO, (run_id, after_seq, upper, limit)).fetchall()
        out = []
        for last, count, batch, version, at in rows:
            for seq, (kind, payload) in enumerate(json.loads(batch), start=last - count + 1):
                if seq > after_seq and (upper is None or seq <= upper):  # a batch may straddle either bound
                    out.append(
                        Event(
                            run_id=label, seq=seq, type=EventType(kind), payload=payload, lease_version=version, at=at
                        )
                    )
        return out if limit is None else out[:limit]

    def _fork_of(self, run_id: str) -> tuple[str, int] | None:
        """(source, shared seq) of a fork, None for any other run; fixed at creation, so remembered."""
        if run_id in self._forks:
            return self._forks[run_id]
        with self._conn() as conn:
            row = conn.execute(q.FORK_OF, (run_id,)).fetchone()
        if row is None:
            return None  # not remembered: the run may be created later
        found = None if row[0] is None else (str(row[0]), int(row[1]))
        if len(self._forks) >= _FORK_CACHE:
            self._forks.clear()
        self._forks[run_id] = found
        return found

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
        """A new run sharing ``source``'s events up to ``at_seq`` (read through, never copied), with its own
        first ``events`` after them, its re-opened request and a checkpoint, in one transaction."""
        split = split_state(state)
        self.limits.check_snapshot_parts(state.run_id, split.texts)
        batch = event_batch(state.run_id, events, self.limits)
        new_seq = at_seq + len(events)
        params: dict[str, Any] = {
            "run_id": state.run_id,
            "tenant": state.tenant,
            "agent": state.agent.name,
            "agent_version": state.agent.version,
            "status": state.status.value,
            "reason": state.terminal_reason,
            "snapshot": split.snapshot,
            "parts": split.refs,
            "new_seq": new_seq,
            "source": source,
            "at_seq": at_seq,
            "goal": goal_excerpt(state.goal),
        }
        with self._tx() as conn:
            row = conn.execute(q.CREATE_FORK, params).fetchone()
            if row is None:
                raise RunError(f"run {state.run_id} already exists", code=ErrorCode.RUN_EXISTS)
            conn.execute(q.INSERT_BATCH, (state.run_id, new_seq, len(events), batch, row[0]))
            notices = notices_of(state, at_seq, events)
            if notices:  # a re-opened request notifies as any wait does (store/outbox.py)
                enqueue(conn, "%s", state, notices, row[0].timestamp())
            for digest, body in split.new_parts.items():
                conn.execute(q.INSERT_PART, (state.run_id, digest, body))
            if open_request is not None:
                conn.execute(
                    q.OPEN_REQUEST,
                    (
                        state.run_id,
                        open_request.request_id,
                        open_request.model_dump_json(),
                        state.tenant,
                        open_request.kind.value,
                        open_request.approver_role,
                        state.agent.name,
                    ),
                )
            if checkpoint is not None:
                conn.execute(
                    q.INSERT_CHECKPOINT, (state.run_id, new_seq, checkpoint, split.snapshot, split.refs, row[0])
                )
        self._parts.committed(state.run_id, split.known)
        return new_seq

    def forks_of(self, run_id: str, limit: int = 100) -> list[str]:
        with self._conn() as conn:
            rows = conn.execute(q.FORKS_OF, (run_id, limit)).fetchall()
        return [str(r[0]) for r in rows]

    def checkpoint_at(self, run_id: str, seq: int) -> Checkpoint | None:
        fork = self._fork_of(run_id)
        if fork is not None and seq <= fork[1]:
            return self.checkpoint_at(fork[0], seq)
        with self._conn() as conn:
            row = conn.execute(q.CHECKPOINT_AT, (run_id, seq)).fetchone()
        if row is None:
            return None
        state = join_state(run_id, row[2], row[4], self._read_parts(run_id, row[4]))
        return Checkpoint(run_id=run_id, seq=row[0], reason=row[1], state=state, created_at=row[3])

    def checkpoints_of(self, run_id: str, limit: int = 1000) -> list[Checkpoint]:
        fork = self._fork_of(run_id)
        shared = [] if fork is None else [c for c in self.checkpoints_of(fork[0], limit) if c.seq <= fork[1]]
        with self._conn() as conn:
            rows = conn.execute(q.CHECKPOINTS_OF, (run_id, limit)).fetchall()
        own = [
            Checkpoint(
                run_id=run_id,
                seq=r[0],
                reason=r[1],
                state=join_state(run_id, r[2], r[4], self._read_parts(run_id, r[4])),
                created_at=r[3],
            )
            for r in rows
        ]
        return [*shared, *own][:limit]

    def check_integrity(self) -> None:
        """A read of one row of every table of the store's schema: a page the server cannot read (SQLSTATE
        class XX, data_corrupted / index_corrupted) is STORE_CORRUPT; an unreachable server stays
        STORE_UNAVAILABLE. The server checks its own pages (checksums) as it reads them."""
        try:
            with self._conn() as conn:
                tables = [
                    str(row[0])
                    for row in conn.execute(
                        "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY tablename"
                    ).fetchall()
                ]
                for table in tables:
                    conn.execute(pg_sql.SQL("SELECT 1 FROM {} LIMIT 1").format(pg_sql.Identifier(table)))
        except StoreError as exc:
            cause = exc.__cause__
            state = getattr(cause, "sqlstate", None) or ""
            if state.startswith("XX"):
                raise StoreError(
                    f"the PostgreSQL store is damaged ({_first_line(cause) if cause else exc.message})",
                    code=ErrorCode.STORE_CORRUPT,
                ) from None
            raise

    def list_runs(self, limit: int = 100) -> list[RunRow]:
        with self._conn() as conn:
            rows = conn.execute(q.LIST_RUNS, (limit,)).fetchall()
        return [_run_row(r) for r in rows]

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
        size = page_size(limit)
        filters = run_filters(status, tenant, agent, version)
        term = search_term(search)
        scope = search_scope(filters, term)
        columns = [column for column, value in filters.items() if value is not None]
        params: list[Any] = [filters[column] for column in columns]
        if cursor is not None:
            created, last_id = decode_run_cursor(cursor, scope)
            params += [datetime.fromisoformat(created), last_id]
        after = cursor is not None
        edge = None
        with self._conn() as conn:
            if term is None:
                rows = conn.execute(q.page_runs(columns, after), (*params, size + 1)).fetchall()
            else:
                pattern = like_escaped(term)
                args = (*params, SEARCH_WINDOW, f"{pattern}%", f"%{pattern}%", size + 1)
                rows = conn.execute(q.page_runs(columns, after, search=True), args).fetchall()
                if len(rows) <= size:  # a short page: go on past the window, if it was full
                    edge = conn.execute(q.runs_window_edge(columns, after), (*params, SEARCH_WINDOW - 1)).fetchone()
        more = len(rows) > size
        items = [_run_row(r) for r in rows[:size]]
        key = (
            [items[-1].created_at.isoformat(), items[-1].run_id]
            if more
            else None
            if edge is None
            else [edge[0].isoformat(), edge[1]]
        )
        return RunPage(items=items, next_cursor=None if key is None else encode_cursor("runs", scope, key))

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
        size = page_size(limit)
        filters = request_filters(run_id, tenant, open_only, kind=kind, agent=agent, role=role)
        columns = tuple(column for column in REQUEST_FILTER_COLUMNS if column in filters)
        params: list[Any] = [value for value in (run_id, tenant) if value is not None]
        params += [filters[column] for column in columns]
        if cursor is not None:
            params += decode_cursor(cursor, "requests", filters, 2)
        sql = q.page_requests(
            run_id=run_id is not None,
            tenant=tenant is not None,
            open_only=bool(open_only),
            after=cursor is not None,
            columns=columns,
        )
        with self._conn() as conn:
            rows = conn.execute(sql, (*params, size + 1)).fetchall()
        more = len(rows) > size
        rows = rows[:size]
        items = [request_row(r[0], r[1], r[2], r[3]) for r in rows]
        last = rows[-1] if more else None
        return RequestPage(
            items=items, next_cursor=None if last is None else encode_cursor("requests", filters, [last[0], last[4]])
        )

    # -- leases ---------------------------------------------------------------------------------
    def acquire_lease(self, run_id: str, owner: str, ttl_s: float) -> Lease:
        """Take the run's lease if nobody else holds a live one; every acquisition is a new fencing token."""
        with self._conn() as conn:
            row = conn.execute(q.ACQUIRE_LEASE, {"owner": owner, "ttl": ttl_s, "run_id": run_id}).fetchone()
            if row is not None:
                return Lease(run_id=run_id, owner=owner, version=row[0], expires_at=row[1])
            held = conn.execute(q.LEASE_ROW, (run_id,)).fetchone()
        if held is None:
            raise RunNotFoundError(f"no run {run_id!r}", details={"run_id": run_id})
        holder, _, expires = held
        raise RunError(
            f"run {run_id} is leased by {holder} until {expires:.3f}",
            code=ErrorCode.LEASE_HELD,
            details={"run_id": run_id, "holder": holder},
        )

    def claim_next(
        self,
        owner: str,
        ttl_s: float,
        statuses: tuple[str, ...] = ("RUNNING", "PAUSING"),
        *,
        builds: Buildable | None = None,
    ) -> Lease | None:
        """The runnable run nobody holds a live lease on that has waited longest since a write left it without
        a lease (``queued_at``: its creation, an unleased step, a lease given back); rows other claimers have
        locked are skipped. A worker's own steps do not move it, so they stay heap-only updates (migration 7)."""
        claimed = self.claim_batch(owner, ttl_s, 1, statuses, builds=builds)
        return claimed[0] if claimed else None

    def claim_batch(
        self,
        owner: str,
        ttl_s: float,
        limit: int,
        statuses: tuple[str, ...] = ("RUNNING", "PAUSING"),
        *,
        builds: Buildable | None = None,
    ) -> list[Lease]:
        """Up to ``limit`` of them in one statement, in queue order."""
        params: dict[str, Any] = {"statuses": list(statuses), "owner": owner, "ttl": ttl_s, "limit": claim_limit(limit)}
        sql = q.CLAIM_RUNS
        if builds is not None:
            pairs = build_pairs(builds)
            params |= {
                "agents": list(builds),
                "build_agents": [a for a, _ in pairs],
                "build_versions": [v for _, v in pairs],
            }
            sql = q.CLAIM_BUILDABLE_RUNS
        with self._conn() as conn:
            rows = conn.execute(sql, params).fetchall()
        rows.sort(key=lambda row: (row[3], row[0]))
        return [Lease(run_id=row[0], owner=owner, version=row[1], expires_at=row[2]) for row in rows]

    def due_runs(self, status: str, now: datetime, limit: int = 100) -> list[str]:
        with self._conn() as conn:
            rows = conn.execute(q.DUE_RUNS, (status, now.timestamp(), limit)).fetchall()
        return [str(r[0]) for r in rows]

    def renew_lease(self, lease: Lease, ttl_s: float) -> Lease:
        with self._conn() as conn:
            row = conn.execute(q.RENEW_LEASE, (ttl_s, lease.run_id, lease.owner, lease.version)).fetchone()
        if row is None:
            raise StaleLeaseError(
                f"lease {lease.version} of {lease.owner} on run {lease.run_id} was superseded",
                details={"run_id": lease.run_id, "lease_version": lease.version},
            )
        return lease.model_copy(update={"expires_at": row[0]})

    def release_lease(self, lease: Lease) -> None:
        with self._conn() as conn:
            conn.execute(q.RELEASE_LEASE, (lease.run_id, lease.owner, lease.version))

    def lease_of(self, run_id: str) -> Lease | None:
        owner, version, expires = self._one(q.LEASE_ROW, run_id)
        if owner is None:
            return None
        return Lease(run_id=run_id, owner=owner, version=version, expires_at=expires)

    def latest_checkpoint(self, run_id: str) -> Checkpoint | None:
        with self._conn() as conn:
            row = conn.execute(q.LATEST_CHECKPOINT, (run_id,)).fetchone()
        if row is None:
            return None
        state = join_state(run_id, row[2], row[4], self._read_parts(run_id, row[4]))
        return Checkpoint(run_id=run_id, seq=row[0], reason=row[1], state=state, created_at=row[3])

    # -- pending requests -----------------------------------------------------------------------
    def get_request(self, run_id: str, request_id: str) -> PendingRecord | None:
        with self._conn() as conn:
            row = conn.execute(q.GET_REQUEST, (run_id, request_id)).fetchone()
        return None if row is None else _pending(run_id, row[0], row[1])

    def list_requests(self, run_id: str | None = None, open_only: bool = True) -> list[PendingRecord]:
        with self._conn() as conn:
            rows = conn.execute(q.LIST_REQUESTS, {"run_id": run_id, "open_only": open_only}).fetchall()
        return [_pending(r[0], r[1], r[2]) for r in rows]

    # -- artifacts ------------------------------------------------------------------------------
    def list_artifacts(self, run_id: str) -> list[ArtifactRecord]:
        if self._fork_of(run_id) is None:
            return self._own_artifacts(run_id)
        return inherited_artifacts(self._fork_of, self._own_artifacts, self._shared_versions, run_id)

    def _shared_versions(self, run_id: str) -> dict[str, int]:
        lineage = self.load_run(run_id).lineage
        return {} if lineage is None else dict(lineage.artifacts)

    def _own_artifacts(self, run_id: str) -> list[ArtifactRecord]:
        with self._conn() as conn:
            rows = conn.execute(q.LIST_ARTIFACTS, (run_id,)).fetchall()
        return [_artifact(run_id, r) for r in rows]

    def get_artifact(self, run_id: str, name: str, version: int | None = None) -> ArtifactRecord | None:
        found = self._own_artifact(run_id, name, version)
        if found is not None or self._fork_of(run_id) is None:
            return found
        return inherited_artifact(self._fork_of, self._own_artifact, self._shared_versions, run_id, name, version)

    def _own_artifact(self, run_id: str, name: str, version: int | None) -> ArtifactRecord | None:
        with self._conn() as conn:
            row = conn.execute(q.GET_ARTIFACT, {"run_id": run_id, "name": name, "version": version}).fetchone()
        return None if row is None else _artifact(run_id, row)

    # -- gateway state (GatewayStore) -----------------------------------------------------------
    def get_breaker(self, tool: str) -> BreakerState | None:
        with self._conn() as conn:
            row = conn.execute(q.GET_BREAKER, (tool,)).fetchone()
        return None if row is None else BreakerState.model_validate_json(row[0])

    def put_breaker(self, state: BreakerState) -> None:
        with self._conn() as conn:
            conn.execute(q.PUT_BREAKER, (state.tool, state.model_dump_json()))

    def get_side_effect(self, idempotency_key: str) -> SideEffectRecord | None:
        with self._conn() as conn:
            row = conn.execute(q.GET_SIDE_EFFECT, (idempotency_key,)).fetchone()
        return None if row is None else SideEffectRecord.model_validate_json(row[0])

    def side_effects_of(self, run_id: str, statuses: tuple[str, ...]) -> list[SideEffectRecord]:
        with self._conn() as conn:
            rows = conn.execute(q.SIDE_EFFECTS_OF, (run_id, list(statuses))).fetchall()
        return [SideEffectRecord.model_validate_json(r[0]) for r in rows]

    def put_side_effect(self, record: SideEffectRecord) -> None:
        """Its own transaction, committed at once: it must survive a crash of the step."""
        with self._conn() as conn, conn.transaction():
            held = conn.execute("SELECT lease_version FROM runs WHERE run_id=%s FOR SHARE", (record.run_id,)).fetchone()
            current = None if held is None else int(held[0])
            if current is not None and superseded(record, current):
                raise stale_journal_start(record, current)
            try:
                conn.execute(
                    q.PUT_SIDE_EFFECT,
                    (
                        record.idempotency_key,
                        record.run_id,
                        record.tool,
                        record.status,
                        record.model_dump_json(),
                        record.grant_id,
                    ),
                )
            except pg_errors.UniqueViolation:
                raise approval_consumed(record) from None

    # -- the HTTP service's keys and idempotent responses (KeyStore, schema 4) -------------------
    _KEY_COLUMNS = "key_id, name, tenant, roles, secret_sha256, created_at, revoked_at"

    def add_api_key(self, key: ApiKeyRecord) -> None:
        with self._conn() as conn:
            try:
                conn.execute(
                    f"INSERT INTO api_keys({self._KEY_COLUMNS}) VALUES (%s,%s,%s,%s,%s,%s,%s)",
                    (
                        key.key_id,
                        key.name,
                        key.tenant,
                        json.dumps(list(key.roles)),
                        key.secret_sha256,
                        key.created_at,
                        key.revoked_at,
                    ),
                )
            except pg_errors.UniqueViolation:
                raise key_exists(key.key_id) from None

    def get_api_key(self, key_id: str) -> ApiKeyRecord | None:
        with self._conn() as conn:
            row = conn.execute(f"SELECT {self._KEY_COLUMNS} FROM api_keys WHERE key_id=%s", (key_id,)).fetchone()
        return None if row is None else _key(row)

    def list_api_keys(self, limit: int = MAX_KEYS_LISTED) -> list[ApiKeyRecord]:
        with self._conn() as conn:
            rows = conn.execute(
                f"SELECT {self._KEY_COLUMNS} FROM api_keys ORDER BY created_at, key_id LIMIT %s", (page_size(limit),)
            ).fetchall()
        return [_key(r) for r in rows]

    def revoke_api_key(self, key_id: str, at: datetime) -> ApiKeyRecord:
        with self._tx() as conn:
            conn.execute("UPDATE api_keys SET revoked_at=%s WHERE key_id=%s AND revoked_at IS NULL", (at, key_id))
            row = conn.execute(f"SELECT {self._KEY_COLUMNS} FROM api_keys WHERE key_id=%s", (key_id,)).fetchone()
        if row is None:
            raise key_not_found(key_id)
        return _key(row)

    def remember_response(self, response: StoredResponse) -> StoredResponse:
        with self._tx() as conn:
            conn.execute(
                "INSERT INTO api_responses(tenant, idempotency_key, fingerprint, status_code, body, created_at)"
                " VALUES (%s,%s,%s,%s,%s,%s) ON CONFLICT (tenant, idempotency_key) DO NOTHING",
                (
                    response.tenant,
                    response.idempotency_key,
                    response.fingerprint,
                    response.status_code,
                    response.body,
                    response.created_at,
                ),
            )
            kept = self._response(conn, response.tenant, response.idempotency_key)
        assert kept is not None
        return kept

    def recall_response(self, tenant: str, idempotency_key: str) -> StoredResponse | None:
        with self._conn() as conn:
            return self._response(conn, tenant, idempotency_key)

    @staticmethod
    def _response(conn: Conn, tenant: str, idempotency_key: str) -> StoredResponse | None:
        row = conn.execute(
            "SELECT fingerprint, status_code, body, created_at FROM api_responses"
            " WHERE tenant=%s AND idempotency_key=%s",
            (tenant, idempotency_key),
        ).fetchone()
        if row is None:
            return None
        return StoredResponse(
            tenant=tenant,
            idempotency_key=idempotency_key,
            fingerprint=row[0],
            status_code=row[1],
            body=row[2],
            created_at=row[3],
        )


def _key(r: tuple[Any, ...]) -> ApiKeyRecord:
    return ApiKeyRecord(
        key_id=r[0],
        name=r[1],
        tenant=r[2],
        roles=tuple(json.loads(r[3])),
        secret_sha256=r[4],
        created_at=r[5],
        revoked_at=r[6],
    )


def _run_row(r: tuple[Any, ...]) -> RunRow:
    return RunRow(
        run_id=r[0],
        tenant=r[1],
        agent=r[2],
        status=r[3],
        terminal_reason=r[4],
        last_seq=r[5],
        created_at=r[6],
        updated_at=r[7],
        lease_owner=r[8],
        agent_version=r[9],
        goal=r[10],
        forked_from=r[11],
        fork_seq=r[12],
    )


def _pending(run_id: str, body: str, answer: str | None) -> PendingRecord:
    return PendingRecord(
        run_id=run_id,
        request=PendingRequest.model_validate_json(body),
        answer=None if answer is None else RequestAnswer.model_validate_json(answer),
    )


def _artifact(run_id: str, r: tuple[Any, ...]) -> ArtifactRecord:
    return ArtifactRecord(
        run_id=run_id, name=r[0], version=r[1], sha256=r[2], media_type=r[3], content=r[4], created_at=r[5]
    )
