"""The embedded default store: one SQLite file in WAL mode, one transaction per step."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

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
from stateward.store.base import Buildable, PayloadLimits, build_pairs, claim_limit, event_batch, refused_write
from stateward.store.keys import MAX_KEYS_LISTED, ApiKeyRecord, StoredResponse, key_exists, key_not_found
from stateward.store.lineage import inherited_artifact, inherited_artifacts, read_lineage
from stateward.store.migrations import SQLITE_MIGRATIONS
from stateward.store.outbox import OutboxMethods, enqueue, notices_of
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


def _now() -> str:
    return datetime.now(UTC).isoformat()


def store_error(exc: sqlite3.Error, path: str | None = None) -> StoreError:
    """A SQLite failure as a named store error: the file is busy, unreadable, or unavailable."""
    where = f"{path}: " if path else ""
    text = str(exc)
    if isinstance(exc, sqlite3.OperationalError) and ("locked" in text or "busy" in text):
        return StoreError(f"{where}the database is locked by another writer ({text})", code=ErrorCode.STORE_BUSY)
    if type(exc) is sqlite3.DatabaseError or "malformed" in text or "not a database" in text:
        return StoreError(f"{where}not a readable SQLite database ({text})", code=ErrorCode.STORE_CORRUPT)
    return StoreError(f"{where}{text}", code=ErrorCode.STORE_UNAVAILABLE)


class _Guarded:
    """The store's lock. A SQLite error that leaves a locked section leaves as a named StoreError
    (STORE_BUSY / STORE_CORRUPT / STORE_UNAVAILABLE), so no caller ever sees the driver's own errors."""

    def __init__(self, path: str):
        self._lock = threading.RLock()
        self._path = path

    def __enter__(self) -> _Guarded:
        self._lock.acquire()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        self._lock.release()
        if isinstance(exc, sqlite3.Error):
            raise store_error(exc, self._path) from exc


def _step_updates(fenced: bool, clear_control: bool, release: bool = False) -> tuple[str, str]:
    """The two UPDATEs of a step: status unchanged (the common case), then any status; ``release``
    (fenced only) also gives the lease up in the same statement."""
    fence = " AND lease_owner=? AND lease_version=?" if fenced else " AND (lease_owner IS NULL OR lease_expires_at<?)"
    control = (", control=NULL" if clear_control else "") + (
        ", lease_owner=NULL, lease_expires_at=NULL" if release and fenced else ""
    )
    return (
        f"UPDATE runs SET terminal_reason=?, snapshot=?, parts=?, last_seq=?, updated_at=?, not_before=?{control}"
        f" WHERE run_key=? AND last_seq=? AND status=?{fence}",
        f"UPDATE runs SET status=?, terminal_reason=?, snapshot=?, parts=?, last_seq=?, updated_at=?,"
        f" not_before=?{control}"
        f" WHERE run_key=? AND last_seq=?{fence}",
    )


_STEP_UPDATES = {
    (fenced, clear, release): _step_updates(fenced, clear, release)
    for fenced in (False, True)
    for clear in (False, True)
    for release in (False, True)
}
_RUN_KEY_CACHE = 10_000
_INSERT_PART = "INSERT OR IGNORE INTO state_parts(run_key, digest, body) VALUES (?,?,?)"
_INSERT_BATCH = "INSERT INTO event_batches(run_key, seq, count, events, lease_version, at) VALUES (?,?,?,?,?,?)"


def _insert_events(
    db: sqlite3.Connection | sqlite3.Cursor,
    run_key: int,
    after_seq: int,
    events: list[NewEvent],
    lease_version: int,
    at: int,
    batch: str,
) -> None:
    db.execute(_INSERT_BATCH, (run_key, after_seq + len(events), len(events), batch, lease_version, at))


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICRO = timedelta(microseconds=1)


def _micros(at: datetime) -> int:
    """Event times are stored as integer microseconds since the epoch: a third of an ISO string."""
    return (at - _EPOCH) // _MICRO


def _from_micros(value: int) -> datetime:
    return _EPOCH + timedelta(microseconds=value)


class WalCheckpointer:
    """Copies the WAL back into the database from its own connection, off the step path.

    A PASSIVE checkpoint (never blocking writers) runs on a background thread once the WAL passes
    ``wal_bytes``, so the commit that crosses SQLite's own threshold (1,000 pages) finds little left
    to copy. That inline checkpoint is still needed: under continuous writes a background checkpoint
    never catches up with the last frame, the WAL never restarts, and it grows without bound.
    """

    def __init__(self, path: str, wal_bytes: int = 1 << 20, interval_s: float = 0.05):
        self._wal = path + "-wal"
        self._path = path
        self._limit = wal_bytes
        self._interval = interval_s
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        _CHECKPOINTERS.add(self)

    def note_commit(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="stateward-wal-checkpoint", daemon=True)
            self._thread.start()

    def forget_thread(self) -> None:
        """In a forked child the thread does not exist: the next commit starts the child's own."""
        self._thread = None

    def _wal_size(self) -> int:
        try:
            return os.stat(self._wal).st_size
        except OSError:
            return 0

    def _run(self) -> None:
        conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False, timeout=5)
        try:
            while not self._stopped.wait(self._interval):
                if self._wal_size() >= self._limit:
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        finally:
            conn.close()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


_CHECKPOINTERS: weakref.WeakSet[WalCheckpointer] = weakref.WeakSet()


def _forget_threads_after_fork() -> None:
    for checkpointer in list(_CHECKPOINTERS):
        checkpointer.forget_thread()


os.register_at_fork(after_in_child=_forget_threads_after_fork)


class SQLiteStore(OutboxMethods, SessionMethods):
    """Thread-safe through one lock; every write is a ``BEGIN IMMEDIATE`` transaction."""

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: str = "FULL",
        create: bool = True,
        limits: PayloadLimits | None = None,
    ):
        """``create=False`` opens only an existing stateward database: a mistyped path is refused
        (``STORE_NOT_FOUND``) instead of becoming a new, empty file. ``limits`` caps event payloads and
        snapshots (default: 1 MiB and 4 MiB, or STATEWARD_MAX_EVENT_BYTES / STATEWARD_MAX_SNAPSHOT_BYTES)."""
        self.limits = limits if limits is not None else PayloadLimits.from_env()
        if synchronous not in {"FULL", "NORMAL", "OFF", "EXTRA"}:
            raise UserError(f"unknown synchronous mode {synchronous!r}", code=ErrorCode.CONFIGURATION_ERROR)
        self.synchronous = synchronous
        self.path = str(path)
        if not self.path:
            raise UserError("the database path is empty", code=ErrorCode.CONFIGURATION_ERROR)
        if not create and self.path != ":memory:" and not os.path.exists(self.path):
            raise StoreError(f"no stateward database at {self.path}", code=ErrorCode.STORE_NOT_FOUND)
        try:
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open {self.path}: {exc}", code=ErrorCode.STORE_UNAVAILABLE) from exc
        self._lock = _Guarded(self.path)
        # Most WAL checkpoints run on a background connection, off the step path; SQLite's own
        # autocheckpoint stays as the backstop that lets the WAL restart under continuous writes.
        self._checkpointer = WalCheckpointer(self.path)
        self._step_cursor = self._db.cursor()
        self._run_keys: dict[str, int] = {}  # run_id -> run_key: fixed for the run's life
        self._forks: dict[str, tuple[str, int] | None] = {}  # run_id -> (source, shared seq): fixed at creation
        self._statuses: dict[str, str] = {}  # run_id -> the status last read or written here: a hint only
        self._parts = PartCache()
        try:
            self._db.execute("PRAGMA busy_timeout=30000")
            version = self._refuse_foreign(create)  # before anything below changes the file
            self._enable_wal()
            self._db.execute(f"PRAGMA synchronous={synchronous}")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._migrate(version)
        except BaseException as exc:
            self._checkpointer.stop()
            self._db.close()
            if isinstance(exc, sqlite3.Error):
                raise store_error(exc, self.path) from exc
            raise

    @property
    def brief_calls(self) -> bool:
        """Whether every call returns in microseconds: no fsync per commit (``synchronous`` NORMAL or OFF).

        The async Runtime then calls this store on the event loop's thread (see store/offload.py): the
        one connection serializes every call anyway, and a thread hop costs more CPU than such a call.
        """
        return self.synchronous in ("NORMAL", "OFF")

    def trace(self, callback: Callable[[str], None] | None) -> None:
        """Call ``callback`` with the text of every SQL statement this store's connection runs (None stops):
        how a benchmark counts the statements a run costs. Nothing is traced unless asked."""
        with self._lock:
            self._db.set_trace_callback(callback)

    # -- plumbing -------------------------------------------------------------------------------
    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            else:
                self._db.execute("COMMIT")
                self._checkpointer.note_commit()

    def _enable_wal(self) -> None:
        """Switching a new file to WAL needs a moment of exclusive access, for which SQLite does not
        always wait: several processes opening one new database at once retry briefly instead."""
        for attempt in range(50):
            try:
                self._db.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or attempt == 49:
                    raise StoreError(f"cannot open {self.path}: {exc}", code=ErrorCode.STORE_UNAVAILABLE) from exc
                time.sleep(0.02 * (attempt + 1))

    def _migrate(self, seen_version: int) -> None:
        # Opening an up-to-date store only reads: in WAL mode that never waits for a writer, so a
        # stalled writer elsewhere (even a SIGSTOPped one) cannot block a reader from opening.
        if seen_version == len(SQLITE_MIGRATIONS):
            self._check_layout()
            return
        with self._tx() as db:
            current = db.execute("PRAGMA user_version").fetchone()[0]  # again: another process may have migrated
            if current > len(SQLITE_MIGRATIONS):
                raise self._too_new(current)
            for version, script in enumerate(SQLITE_MIGRATIONS[current:], start=current + 1):
                for statement in script:
                    db.execute(statement)
                db.execute(f"PRAGMA user_version={version}")

    def _refuse_foreign(self, create: bool) -> int:
        """Only reads: a file that is not (yet) a stateward database is left exactly as it was.

        Returns the schema version it read."""
        # One statement, one read snapshot: another process may be creating the schema right now.
        version, tables = self._db.execute(
            "SELECT (SELECT user_version FROM pragma_user_version), (SELECT count(*) FROM sqlite_master)"
        ).fetchone()
        if version > len(SQLITE_MIGRATIONS):
            raise self._too_new(version)
        if version > 0:
            return int(version)
        # Migrations set the version in the transaction that creates the tables: version 0 with tables
        # is another application's database.
        if tables:
            raise StoreError(
                f"{self.path} is a SQLite database of another application (it has tables but no stateward"
                " schema version); use a new file",
                code=ErrorCode.NOT_A_STATEWARD_STORE,
            )
        if not create:
            raise StoreError(f"no stateward database at {self.path}", code=ErrorCode.STORE_NOT_FOUND)
        return 0

    def _too_new(self, version: int) -> StoreError:
        return StoreError(
            f"{self.path} has schema version {version}; this stateward knows {len(SQLITE_MIGRATIONS)}",
            code=ErrorCode.SCHEMA_TOO_NEW,
        )

    def _check_layout(self) -> None:
        """A file written by a development build before schema 1 settled has the version but not the layout."""
        found = self._db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='event_batches'").fetchone()
        if found is None:
            raise StoreError(
                f"{self.path} was written by an earlier development build of stateward (no event_batches table);"
                " open it with that build, or start a new database file",
                code=ErrorCode.SCHEMA_MISMATCH,
            )

    def check_integrity(self) -> None:
        """``PRAGMA quick_check`` (every page and index of the file, without comparing index contents):
        any answer but ``ok`` is STORE_CORRUPT, with SQLite's first findings."""
        try:
            with self._lock:
                found = [str(row[0]) for row in self._db.execute("PRAGMA quick_check(20)").fetchall()]
        except StoreError as exc:
            if exc.code == ErrorCode.STORE_CORRUPT:
                raise
            raise StoreError(f"{self.path}: the integrity check failed: {exc.message}", code=exc.code) from None
        if found != ["ok"]:
            raise StoreError(
                f"{self.path} is damaged (PRAGMA quick_check: {'; '.join(found)[:500]}); restore it from a backup",
                code=ErrorCode.STORE_CORRUPT,
                details={"findings": found[:20]},
            )

    def close(self) -> None:
        self._checkpointer.stop()
        with self._lock:
            self._db.close()

    # -- runs -----------------------------------------------------------------------------------
    def create_run(self, state: RunState, events: list[NewEvent]) -> list[Event]:
        now = _now()
        split = split_state(state)
        self.limits.check_snapshot_parts(state.run_id, split.texts)
        batch = event_batch(state.run_id, events, self.limits) if events else ""
        with self._tx() as db:
            try:
                cur = db.execute(
                    "INSERT INTO runs(run_id, tenant, agent, agent_version, status, terminal_reason, snapshot, parts,"
                    " last_seq, created_at, updated_at, goal) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                    (
                        state.run_id,
                        state.tenant,
                        state.agent.name,
                        state.agent.version,
                        state.status.value,
                        state.terminal_reason,
                        split.snapshot,
                        split.refs,
                        len(events),
                        now,
                        time.time(),
                        goal_excerpt(state.goal),
                    ),
                )
            except sqlite3.IntegrityError:
                raise RunError(f"run {state.run_id} already exists", code=ErrorCode.RUN_EXISTS) from None
            # The new key is not cached: this transaction may still roll back and the key go to another run.
            key = cur.lastrowid
            assert key is not None
            written = self._append(db, key, state.run_id, events, now, batch)
        self._parts.committed(state.run_id, split.known)  # a new run has no parts yet (see store/parts.py)
        return written

    def _run_key(self, db: sqlite3.Connection | sqlite3.Cursor, run_id: str) -> int:
        """The key of a committed run never changes (runs are never deleted), so each process reads it once."""
        key = self._run_keys.get(run_id)
        if key is None:
            row = db.execute("SELECT run_key FROM runs WHERE run_id=?", (run_id,)).fetchone()
            if row is None:
                raise RunNotFoundError(f"no run {run_id!r}", details={"run_id": run_id})
            key = self._remember(run_id, int(row[0]))
        return key

    def _remember(self, run_id: str, key: int, status: str | None = None) -> int:
        """Keep a committed run's key (and the status just read) for its next step; both maps are bounded."""
        if len(self._run_keys) >= _RUN_KEY_CACHE:  # a long-lived worker sees unboundedly many runs
            self._run_keys.clear()
        if len(self._statuses) >= _RUN_KEY_CACHE:
            self._statuses.clear()
        self._run_keys[run_id] = key
        if status is not None:
            self._statuses[run_id] = status
        return key

    def _forget(self, run_id: str) -> None:
        self._run_keys.pop(run_id, None)
        self._statuses.pop(run_id, None)

    def load_run(self, run_id: str) -> RunState:
        return self.load_run_at(run_id)[0]

    def load_run_at(self, run_id: str) -> tuple[RunState, int]:
        with self._lock:
            row = self._db.execute(
                "SELECT snapshot, last_seq, parts, run_key, status FROM runs WHERE run_id=?", (run_id,)
            )
            found = row.fetchone()
            if found is None:
                raise RunNotFoundError(f"no run {run_id!r}", details={"run_id": run_id})
            self._remember(run_id, int(found[3]), str(found[4]))  # the step that follows needs neither lookup
            parts = self._read_parts(int(found[3]), found[2])
        return join_state(run_id, found[0], found[2], parts), int(found[1])

    def _read_parts(self, run_key: int, refs: str | None) -> dict[str, str]:
        """The parts a row names (see store/parts.py); immutable, so read outside the row's transaction."""
        digests = referenced(refs)
        if not digests:
            return {}
        marks = ",".join("?" * len(digests))
        rows = self._db.execute(
            f"SELECT digest, body FROM state_parts WHERE run_key=? AND digest IN ({marks})", (run_key, *digests)
        ).fetchall()
        return {str(d): str(b) for d, b in rows}

    def last_seq(self, run_id: str) -> int:
        return int(self._one("SELECT last_seq FROM runs WHERE run_id=?", run_id)[0])

    def get_control(self, run_id: str) -> str | None:
        value = self._one("SELECT control FROM runs WHERE run_id=?", run_id)[0]
        return None if value is None else str(value)

    def set_control(self, run_id: str, control: str | None) -> None:
        with self._tx() as db:
            if db.execute("UPDATE runs SET control=? WHERE run_id=?", (control, run_id)).rowcount != 1:
                raise RunNotFoundError(f"no run {run_id!r}", details={"run_id": run_id})

    def _one(self, sql: str, run_id: str) -> tuple[Any, ...]:
        with self._lock:
            row = self._db.execute(sql, (run_id,)).fetchone()
        if row is None:
            raise RunNotFoundError(f"no run {run_id!r}", details={"run_id": run_id})
        return tuple(row)

    def commit_step(self, run_id: str, expected_seq: int, write: StepWrite, lease: Lease | None = None) -> int:
        # The hot path of every run: prepared SQL text, one clock read, one serializer call per document.
        state = write.state
        split = split_state(state, self._parts.known(run_id))  # large memo entries apart, written when changed
        snapshot = split.snapshot
        events = write.events
        self.limits.check_snapshot_parts(run_id, split.texts)  # refused before the transaction: nothing is written
        batch = event_batch(run_id, events, self.limits) if events else ""
        new_seq = expected_seq + len(events)
        now = time.time()
        if lease is None:
            same_status, any_status = _STEP_UPDATES[False, write.clear_control, False]
            fence: tuple[Any, ...] = (now,)
            lease_version = 0
        else:
            same_status, any_status = _STEP_UPDATES[True, write.clear_control, write.release_lease]
            fence = (lease.owner, lease.version)
            lease_version = lease.version
        status, reason = state.status.value, state.terminal_reason
        hold = None if write.not_before is None else write.not_before.timestamp()
        with self._lock:
            cur = self._step_cursor  # reused: a new cursor per statement costs more than the statement
            cur.execute("BEGIN IMMEDIATE")
            try:
                key = self._run_key(cur, run_id)
                # Most steps leave the status alone: keep it out of the SET list so its index is not rewritten.
                # The status this process last saw for the run picks the statement; a wrong guess costs one
                # more (the guarded UPDATE matches nothing and changes nothing).
                row = (snapshot, split.refs, new_seq, now, hold, key, expected_seq)
                written = 0
                if self._statuses.get(run_id) == status:
                    cur.execute(same_status, (reason, *row, status, *fence))
                    written = cur.rowcount
                if written != 1:
                    cur.execute(any_status, (status, reason, *row, *fence))
                    if cur.rowcount != 1:
                        self._forget(run_id)  # in case the run is gone: look it up afresh next time
                        raise self._why_not_written(self._db, run_id, expected_seq, lease)
                if events:
                    _insert_events(cur, key, expected_seq, events, lease_version, int(now * 1_000_000), batch)
                    notices = notices_of(state, expected_seq, events)
                    if notices:  # a wait, an end: the outbox row commits with the step (store/outbox.py)
                        enqueue(cur, "?", state, notices, now)
                for digest, body in split.new_parts.items():
                    cur.execute(_INSERT_PART, (key, digest, body))
                if write.has_contents:
                    self._write_contents(self._db, run_id, expected_seq, new_seq, write, split)
                cur.execute("COMMIT")
            except BaseException:
                cur.execute("ROLLBACK")
                raise
            self._parts.committed(run_id, split.known)
            self._remember(run_id, key, status)
        self._checkpointer.note_commit()
        return new_seq

    def _write_contents(
        self,
        db: sqlite3.Connection,
        run_id: str,
        expected_seq: int,
        new_seq: int,
        write: StepWrite,
        split: SplitState,
    ) -> None:
        """The rarer parts of a step: requests, artifacts, attempts, a checkpoint."""
        # The time is stored with artifacts and checkpoints only: a tool step records an attempt and no clock read.
        now = _now() if write.artifacts or write.checkpoint is not None else ""
        try:
            if write.close_request is not None:
                self._close_request(db, run_id, write.close_request)
            if write.close_all_requests is not None:
                db.execute(
                    "UPDATE pending_requests SET answer=? WHERE run_id=? AND answer IS NULL",
                    (write.close_all_requests.model_dump_json(), run_id),
                )
            if write.open_request is not None:
                opened = write.open_request
                db.execute(
                    "INSERT INTO pending_requests(run_id, request_id, body, answer, tenant, kind, approver_role, agent)"
                    " VALUES (?,?,?,NULL,?,?,?,?)",
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
            for art in write.artifacts:
                db.execute(
                    "INSERT INTO artifacts(run_id, name, version, sha256, media_type, content, created_at)"
                    " VALUES (?,?,?,?,?,?,?)",
                    (run_id, art.name, art.version, sha256_hex(art.content), art.media_type, art.content, now),
                )
            for attempt in write.attempts:
                db.execute(
                    "INSERT OR REPLACE INTO tool_attempts(attempt_id, run_id, step, body) VALUES (?,?,?,?)",
                    (attempt.attempt_id, run_id, attempt.step, attempt.model_dump_json()),
                )
            if write.set_agent_version:
                db.execute("UPDATE runs SET agent_version=? WHERE run_id=?", (write.state.agent.version, run_id))
            if write.checkpoint is not None:
                db.execute(
                    "INSERT INTO checkpoints(run_id, seq, reason, snapshot, parts, created_at) VALUES (?,?,?,?,?,?)",
                    (run_id, new_seq, write.checkpoint, split.snapshot, split.refs, now),
                )
        except sqlite3.IntegrityError as exc:  # e.g. an artifact version written twice
            raise RunError(
                f"step of run {run_id} repeats a record that already exists: {exc}",
                code=ErrorCode.DUPLICATE_RECORD,
                details={"run_id": run_id, "expected_seq": expected_seq},
            ) from None

    @staticmethod
    def _why_not_written(db: sqlite3.Connection, run_id: str, expected_seq: int, lease: Lease | None) -> RunError:
        row = db.execute("SELECT last_seq, lease_owner, lease_version FROM runs WHERE run_id=?", (run_id,)).fetchone()
        return refused_write(run_id, expected_seq, lease, None if row is None else tuple(row))

    # -- leases ---------------------------------------------------------------------------------
    def acquire_lease(self, run_id: str, owner: str, ttl_s: float) -> Lease:
        """Take the run's lease if nobody else holds a live one; every acquisition is a new fencing token."""
        with self._tx() as db:
            row = db.execute(
                "SELECT lease_owner, lease_version, lease_expires_at FROM runs WHERE run_id=?", (run_id,)
            ).fetchone()
            if row is None:
                raise RunNotFoundError(f"no run {run_id!r}", details={"run_id": run_id})
            holder, version, expires = row
            now = time.time()
            if holder is not None and holder != owner and expires is not None and expires > now:
                raise RunError(
                    f"run {run_id} is leased by {holder} until {expires:.3f}",
                    code=ErrorCode.LEASE_HELD,
                    details={"run_id": run_id, "holder": holder},
                )
            return self._grant(db, run_id, owner, int(version) + 1, now + ttl_s)

    def claim_next(
        self,
        owner: str,
        ttl_s: float,
        statuses: tuple[str, ...] = ("RUNNING", "PAUSING"),
        *,
        builds: Buildable | None = None,
    ) -> Lease | None:
        """The oldest runnable run nobody holds a live lease on, leased to ``owner``."""
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
        """Up to ``limit`` of them, oldest first, in one transaction of two statements whatever their number."""
        claim_limit(limit)
        marks = ",".join("?" * len(statuses))
        version_clause, version_args = _buildable_clause(builds)
        with self._tx() as db:
            now = time.time()
            rows = db.execute(
                f"SELECT run_key, run_id, lease_version, status FROM runs WHERE status IN ({marks})"
                " AND (lease_owner IS NULL OR lease_expires_at < ?) AND (not_before IS NULL OR not_before <= ?)"
                f"{version_clause} ORDER BY updated_at, run_id LIMIT ?",
                (*statuses, now, now, *version_args, limit),
            ).fetchall()
            if not rows:
                return []
            expires_at = now + ttl_s
            # Under BEGIN IMMEDIATE nobody else writes meanwhile: each version is the one read, plus one.
            keys = ",".join("?" * len(rows))
            db.execute(
                f"UPDATE runs SET lease_owner=?, lease_version=lease_version+1, lease_expires_at=?"
                f" WHERE run_key IN ({keys})",
                (owner, expires_at, *(row[0] for row in rows)),
            )
        for key, run_id, _, status in rows:  # the drive that follows looks neither up again
            self._remember(run_id, int(key), str(status))
        return [
            Lease(run_id=run_id, owner=owner, version=int(version) + 1, expires_at=expires_at)
            for _, run_id, version, _ in rows
        ]

    def due_runs(self, status: str, now: datetime, limit: int = 100) -> list[str]:
        with self._lock:
            rows = self._db.execute(
                "SELECT run_id FROM runs WHERE status=? AND not_before IS NOT NULL AND not_before <= ?"
                " ORDER BY not_before, run_id LIMIT ?",
                (status, now.timestamp(), limit),
            ).fetchall()
        return [str(r[0]) for r in rows]

    @staticmethod
    def _grant(db: sqlite3.Connection, run_id: str, owner: str, version: int, expires_at: float) -> Lease:
        db.execute(
            "UPDATE runs SET lease_owner=?, lease_version=?, lease_expires_at=? WHERE run_id=?",
            (owner, version, expires_at, run_id),
        )
        return Lease(run_id=run_id, owner=owner, version=version, expires_at=expires_at)

    def renew_lease(self, lease: Lease, ttl_s: float) -> Lease:
        expires_at = time.time() + ttl_s
        with self._tx() as db:
            cur = db.execute(
                "UPDATE runs SET lease_expires_at=? WHERE run_id=? AND lease_owner=? AND lease_version=?",
                (expires_at, lease.run_id, lease.owner, lease.version),
            )
            if cur.rowcount != 1:
                raise StaleLeaseError(
                    f"lease {lease.version} of {lease.owner} on run {lease.run_id} was superseded",
                    details={"run_id": lease.run_id, "lease_version": lease.version},
                )
        return lease.model_copy(update={"expires_at": expires_at})

    def release_lease(self, lease: Lease) -> None:
        with self._tx() as db:
            db.execute(
                "UPDATE runs SET lease_owner=NULL, lease_expires_at=NULL WHERE run_id=? AND lease_owner=?"
                " AND lease_version=?",
                (lease.run_id, lease.owner, lease.version),
            )

    def lease_of(self, run_id: str) -> Lease | None:
        row = self._one("SELECT lease_owner, lease_version, lease_expires_at FROM runs WHERE run_id=?", run_id)
        if row[0] is None:
            return None
        return Lease(run_id=run_id, owner=row[0], version=row[1], expires_at=row[2])

    def latest_checkpoint(self, run_id: str) -> Checkpoint | None:
        return self._one_checkpoint(
            run_id,
            "SELECT seq, reason, snapshot, created_at, parts FROM checkpoints WHERE run_id=? ORDER BY seq DESC LIMIT 1",
            (run_id,),
        )

    def _one_checkpoint(self, run_id: str, sql: str, params: tuple[Any, ...]) -> Checkpoint | None:
        """The checkpoint ``sql`` selects (seq, reason, snapshot, created_at, parts), joined with its parts."""
        with self._lock:
            row = self._db.execute(sql, params).fetchone()
            if row is None:
                return None
            parts = self._read_parts(self._run_key(self._db, run_id), row[4]) if row[4] else {}
        return Checkpoint(
            run_id=run_id,
            seq=row[0],
            reason=row[1],
            state=join_state(run_id, row[2], row[4], parts),
            created_at=datetime.fromisoformat(row[3]),
        )

    @staticmethod
    def _close_request(db: sqlite3.Connection, run_id: str, answer: RequestAnswer) -> None:
        cur = db.execute(
            "UPDATE pending_requests SET answer=? WHERE run_id=? AND request_id=? AND answer IS NULL",
            (answer.model_dump_json(), run_id, answer.request_id),
        )
        if cur.rowcount != 1:
            raise RunError(
                f"request {answer.request_id} of run {run_id} is not open",
                code=ErrorCode.REQUEST_NOT_OPEN,
                details={"run_id": run_id, "request_id": answer.request_id},
            )

    @staticmethod
    def _append(
        db: sqlite3.Connection, key: int, run_id: str, events: list[NewEvent], now: str, batch: str
    ) -> list[Event]:
        """A new run's first events (its first batch)."""
        at = datetime.fromisoformat(now)
        if events:
            _insert_events(db, key, 0, events, 0, _micros(at), batch)
        # Built from values that were just validated on their way in: no need to validate them again.
        return [
            Event.model_construct(run_id=run_id, seq=seq, type=ev.type, payload=ev.payload, lease_version=0, at=at)
            for seq, ev in enumerate(events, start=1)
        ]

    def read_events(self, run_id: str, after_seq: int = 0, limit: int | None = None) -> list[Event]:
        if self._fork_of(run_id) is None:
            return self._read_own(run_id, run_id, after_seq, None, limit)
        return read_lineage(self._fork_of, self._read_own, run_id, after_seq, limit)

    def _read_own(self, run_id: str, label: str, after_seq: int, upper: int | None, limit: int | None) -> list[Event]:
        """``run_id``'s own event rows above ``after_seq`` (none above ``upper``), labelled ``label``."""
        # Each batch holds at least one event after ``after_seq``: ``limit`` batches hold enough.
        bound = "" if upper is None else " AND seq-count<?"
        with self._lock:
            rows = self._db.execute(
                "SELECT seq, count, events, lease_version, at FROM event_batches"
                f" WHERE run_key=(SELECT run_key FROM runs WHERE run_id=?) AND seq>?{bound} ORDER BY seq LIMIT ?",
                (run_id, after_seq, *(() if upper is None else (upper,)), -1 if limit is None else limit),
            ).fetchall()
        out = []
        for last, count, batch, lease, micros in rows:
            at = _from_micros(micros)
            for seq, (kind, payload) in enumerate(json.loads(batch), start=last - count + 1):
                if seq > after_seq and (upper is None or seq <= upper):  # a batch may straddle either bound
                    out.append(
                        Event(run_id=label, seq=seq, type=EventType(kind), payload=payload, lease_version=lease, at=at)
                    )
        return out if limit is None else out[:limit]

    def _fork_of(self, run_id: str) -> tuple[str, int] | None:
        """(source, shared seq) of a fork, None for any other run; fixed at creation, so remembered."""
        if run_id in self._forks:
            return self._forks[run_id]
        with self._lock:
            row = self._db.execute("SELECT forked_from, fork_seq FROM runs WHERE run_id=?", (run_id,)).fetchone()
        if row is None:
            return None  # not remembered: the run may be created later
        found = None if row[0] is None else (str(row[0]), int(row[1]))
        if len(self._forks) >= _RUN_KEY_CACHE:
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
        first ``events`` after them, its re-opened request and a checkpoint; returns its last seq."""
        now = _now()
        split = split_state(state)
        self.limits.check_snapshot_parts(state.run_id, split.texts)
        batch = event_batch(state.run_id, events, self.limits)
        new_seq = at_seq + len(events)
        with self._tx() as db:
            try:
                cur = db.execute(
                    "INSERT INTO runs(run_id, tenant, agent, agent_version, status, terminal_reason, snapshot, parts,"
                    " last_seq, created_at, updated_at, forked_from, fork_seq, goal)"
                    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (
                        state.run_id,
                        state.tenant,
                        state.agent.name,
                        state.agent.version,
                        state.status.value,
                        state.terminal_reason,
                        split.snapshot,
                        split.refs,
                        new_seq,
                        now,
                        time.time(),
                        source,
                        at_seq,
                        goal_excerpt(state.goal),
                    ),
                )
            except sqlite3.IntegrityError:
                raise RunError(f"run {state.run_id} already exists", code=ErrorCode.RUN_EXISTS) from None
            key = cur.lastrowid
            assert key is not None
            _insert_events(db, key, at_seq, events, 0, _micros(datetime.fromisoformat(now)), batch)
            notices = notices_of(state, at_seq, events)
            if notices:  # a re-opened request notifies as any wait does (store/outbox.py)
                enqueue(db, "?", state, notices, time.time())
            if open_request is not None:
                db.execute(
                    "INSERT INTO pending_requests(run_id, request_id, body, answer, tenant, kind, approver_role, agent)"
                    " VALUES (?,?,?,NULL,?,?,?,?)",
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
                db.execute(
                    "INSERT INTO checkpoints(run_id, seq, reason, snapshot, parts, created_at) VALUES (?,?,?,?,?,?)",
                    (state.run_id, new_seq, checkpoint, split.snapshot, split.refs, now),
                )
        self._parts.committed(state.run_id, split.known)
        return new_seq

    def forks_of(self, run_id: str, limit: int = 100) -> list[str]:
        """The runs forked from ``run_id``, oldest first (at most ``limit``)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT run_id FROM runs WHERE forked_from=? ORDER BY created_at, run_id LIMIT ?", (run_id, limit)
            ).fetchall()
        return [str(r[0]) for r in rows]

    def checkpoint_at(self, run_id: str, seq: int) -> Checkpoint | None:
        fork = self._fork_of(run_id)
        if fork is not None and seq <= fork[1]:
            return self.checkpoint_at(fork[0], seq)
        return self._one_checkpoint(
            run_id,
            "SELECT seq, reason, snapshot, created_at, parts FROM checkpoints WHERE run_id=? AND seq=?",
            (run_id, seq),
        )

    def checkpoints_of(self, run_id: str, limit: int = 1000) -> list[Checkpoint]:
        """The run's checkpoints in seq order, its sources' shared ones first (at most ``limit``)."""
        fork = self._fork_of(run_id)
        shared = [] if fork is None else [c for c in self.checkpoints_of(fork[0], limit) if c.seq <= fork[1]]
        with self._lock:
            rows = self._db.execute(
                "SELECT seq, reason, snapshot, created_at, parts FROM checkpoints WHERE run_id=? ORDER BY seq LIMIT ?",
                (run_id, limit),
            ).fetchall()
            key = self._run_key(self._db, run_id) if any(r[4] for r in rows) else 0
            own = [
                Checkpoint(
                    run_id=run_id,
                    seq=r[0],
                    reason=r[1],
                    state=join_state(run_id, r[2], r[4], self._read_parts(key, r[4]) if r[4] else {}),
                    created_at=datetime.fromisoformat(r[3]),
                )
                for r in rows
            ]
        return [*shared, *own][:limit]

    _RUN_COLUMNS = (
        "run_id, tenant, agent, status, terminal_reason, last_seq, created_at, updated_at,"
        " CASE WHEN lease_expires_at > ? THEN lease_owner END, agent_version, goal, forked_from, fork_seq"
    )

    def list_runs(self, limit: int = 100) -> list[RunRow]:
        with self._lock:
            rows = self._db.execute(
                f"SELECT {self._RUN_COLUMNS} FROM runs ORDER BY created_at DESC, run_id DESC LIMIT ?",
                (time.time(), limit),
            ).fetchall()
        return [self._run_row(r) for r in rows]

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
        where = [f"{column}=?" for column, value in filters.items() if value is not None]
        params: list[Any] = [value for value in filters.values() if value is not None]
        if cursor is not None:
            where.append("(created_at, run_id) < (?, ?)")
            params += decode_run_cursor(cursor, scope)
        clause = (" WHERE " + " AND ".join(where)) if where else ""
        order = " ORDER BY created_at DESC, run_id DESC"
        if term is None:
            sql, args = f"SELECT {self._RUN_COLUMNS} FROM runs{clause}{order} LIMIT ?", [*params, size + 1]
        else:
            # The newest SEARCH_WINDOW runs past the cursor (read from runs_search alone for a tenant), then
            # the rows of the ones whose id starts with the term or whose goal holds it (LIKE: ASCII case
            # ignored, the term's wildcards escaped).
            # Only the page's keys are picked from the window (rows are read for those alone).
            scanned = f"SELECT run_id, created_at, goal FROM runs{clause}{order} LIMIT ?"
            sql = (
                f"SELECT {self._RUN_COLUMNS} FROM runs WHERE run_id IN (SELECT run_id FROM ({scanned})"
                f" WHERE run_id LIKE ? ESCAPE '\\' OR goal LIKE ? ESCAPE '\\'{order} LIMIT ?)"
                f"{order}"
            )
            pattern = like_escaped(term)
            args = [*params, SEARCH_WINDOW, f"{pattern}%", f"%{pattern}%", size + 1]
        with self._lock:
            rows = self._db.execute(sql, (time.time(), *args)).fetchall()
            edge = None
            if term is not None and len(rows) <= size:  # a short page: go on past the window, if it was full
                edge = self._db.execute(
                    f"SELECT created_at, run_id FROM runs{clause}{order} LIMIT 1 OFFSET ?", (*params, SEARCH_WINDOW - 1)
                ).fetchone()
        more = len(rows) > size
        rows = rows[:size]
        key = [rows[-1][6], rows[-1][0]] if more else None if edge is None else [edge[0], edge[1]]
        return RunPage(
            items=[self._run_row(r) for r in rows],
            next_cursor=None if key is None else encode_cursor("runs", scope, key),
        )

    @staticmethod
    def _run_row(r: tuple[Any, ...]) -> RunRow:
        return RunRow(
            run_id=r[0],
            tenant=r[1],
            agent=r[2],
            status=r[3],
            terminal_reason=r[4],
            last_seq=r[5],
            created_at=datetime.fromisoformat(r[6]),
            updated_at=datetime.fromtimestamp(r[7], UTC),
            lease_owner=r[8],
            agent_version=r[9],
            goal=r[10],
            forked_from=r[11],
            fork_seq=r[12],
        )

    # -- pending requests -----------------------------------------------------------------------
    def get_request(self, run_id: str, request_id: str) -> PendingRecord | None:
        with self._lock:
            row = self._db.execute(
                "SELECT body, answer FROM pending_requests WHERE run_id=? AND request_id=?",
                (run_id, request_id),
            ).fetchone()
        return None if row is None else self._pending(run_id, row[0], row[1])

    def list_requests(self, run_id: str | None = None, open_only: bool = True) -> list[PendingRecord]:
        sql = "SELECT run_id, body, answer FROM pending_requests WHERE 1=1"
        params: list[Any] = []
        if run_id is not None:
            sql += " AND run_id=?"
            params.append(run_id)
        if open_only:
            sql += " AND answer IS NULL"
        with self._lock:
            rows = self._db.execute(sql + " ORDER BY run_id, request_id", params).fetchall()
        return [self._pending(r[0], r[1], r[2]) for r in rows]

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
        where: list[str] = []
        params: list[Any] = []
        if run_id is not None:
            where.append("p.run_id=?")
            params.append(run_id)
        if tenant is not None:
            where.append("p.tenant=?")  # the request's own copy of its run's tenant: its index orders the page
            params.append(tenant)
        for column in REQUEST_FILTER_COLUMNS:  # the request's own copies too, each indexed after the tenant
            if column in filters:
                where.append(f"p.{column}=?")
                params.append(filters[column])
        if open_only:
            where.append("p.answer IS NULL")
        if cursor is not None:
            where.append("(p.run_id, p.request_id) > (?, ?)")
            params += decode_cursor(cursor, "requests", filters, 2)
        sql = (
            "SELECT p.run_id, p.body, p.answer, r.tenant, p.request_id"
            # CROSS JOIN keeps requests the outer loop: their index gives the order; a tenant's runs do not.
            " FROM pending_requests AS p CROSS JOIN runs AS r ON r.run_id=p.run_id"
        )
        if where:
            sql += " WHERE " + " AND ".join(where)
        with self._lock:
            rows = self._db.execute(sql + " ORDER BY p.run_id, p.request_id LIMIT ?", (*params, size + 1)).fetchall()
        more = len(rows) > size
        rows = rows[:size]
        items = [request_row(r[0], r[1], r[2], r[3]) for r in rows]
        last = rows[-1] if more else None
        return RequestPage(
            items=items, next_cursor=None if last is None else encode_cursor("requests", filters, [last[0], last[4]])
        )

    @staticmethod
    def _pending(run_id: str, body: str, answer: str | None) -> PendingRecord:
        return PendingRecord(
            run_id=run_id,
            request=PendingRequest.model_validate_json(body),
            answer=None if answer is None else RequestAnswer.model_validate_json(answer),
        )

    # -- artifacts ------------------------------------------------------------------------------
    def list_artifacts(self, run_id: str) -> list[ArtifactRecord]:
        if self._fork_of(run_id) is None:
            return self._own_artifacts(run_id)
        return inherited_artifacts(self._fork_of, self._own_artifacts, self._shared_versions, run_id)

    def _shared_versions(self, run_id: str) -> dict[str, int]:
        lineage = self.load_run(run_id).lineage
        return {} if lineage is None else dict(lineage.artifacts)

    def _own_artifacts(self, run_id: str) -> list[ArtifactRecord]:
        with self._lock:
            rows = self._db.execute(
                "SELECT name, version, sha256, media_type, content, created_at FROM artifacts"
                " WHERE run_id=? ORDER BY name, version",
                (run_id,),
            ).fetchall()
        return [self._artifact(run_id, r) for r in rows]

    def get_artifact(self, run_id: str, name: str, version: int | None = None) -> ArtifactRecord | None:
        found = self._own_artifact(run_id, name, version)
        if found is not None or self._fork_of(run_id) is None:
            return found
        return inherited_artifact(self._fork_of, self._own_artifact, self._shared_versions, run_id, name, version)

    def _own_artifact(self, run_id: str, name: str, version: int | None) -> ArtifactRecord | None:
        sql = "SELECT name, version, sha256, media_type, content, created_at FROM artifacts WHERE run_id=? AND name=?"
        params: list[Any] = [run_id, name]
        if version is not None:
            sql += " AND version=?"
            params.append(version)
        with self._lock:
            row = self._db.execute(sql + " ORDER BY version DESC LIMIT 1", params).fetchone()
        return None if row is None else self._artifact(run_id, row)

    @staticmethod
    def _artifact(run_id: str, r: tuple[Any, ...]) -> ArtifactRecord:
        return ArtifactRecord(
            run_id=run_id,
            name=r[0],
            version=r[1],
            sha256=r[2],
            media_type=r[3],
            content=r[4],
            created_at=datetime.fromisoformat(r[5]),
        )

    # -- gateway state (GatewayStore) -----------------------------------------------------------
    def get_breaker(self, tool: str) -> BreakerState | None:
        with self._lock:
            row = self._db.execute("SELECT body FROM breakers WHERE tool=?", (tool,)).fetchone()
        return None if row is None else BreakerState.model_validate_json(row[0])

    def put_breaker(self, state: BreakerState) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO breakers(tool, body) VALUES (?,?)", (state.tool, state.model_dump_json())
            )

    def get_side_effect(self, idempotency_key: str) -> SideEffectRecord | None:
        with self._lock:
            row = self._db.execute(
                "SELECT body FROM side_effects WHERE idempotency_key=?", (idempotency_key,)
            ).fetchone()
        return None if row is None else SideEffectRecord.model_validate_json(row[0])

    def side_effects_of(self, run_id: str, statuses: tuple[str, ...]) -> list[SideEffectRecord]:
        marks = ",".join("?" * len(statuses))
        with self._lock:
            rows = self._db.execute(
                f"SELECT body FROM side_effects WHERE run_id=? AND status IN ({marks}) ORDER BY idempotency_key",
                (run_id, *statuses),
            ).fetchall()
        return [SideEffectRecord.model_validate_json(r[0]) for r in rows]

    def put_side_effect(self, record: SideEffectRecord) -> None:
        # An upsert, not INSERT OR REPLACE: REPLACE would delete the row holding the same grant.
        with self._tx() as db:
            held = db.execute("SELECT lease_version FROM runs WHERE run_id=?", (record.run_id,)).fetchone()
            current = None if held is None else int(held[0])
            if current is not None and superseded(record, current):
                raise stale_journal_start(record, current)
            try:
                db.execute(
                    "INSERT INTO side_effects(idempotency_key, run_id, tool, status, body, grant_id)"
                    " VALUES (?,?,?,?,?,?) ON CONFLICT(idempotency_key) DO UPDATE SET run_id=excluded.run_id,"
                    " tool=excluded.tool, status=excluded.status, body=excluded.body, grant_id=excluded.grant_id",
                    (
                        record.idempotency_key,
                        record.run_id,
                        record.tool,
                        record.status,
                        record.model_dump_json(),
                        record.grant_id,
                    ),
                )
            except sqlite3.IntegrityError:
                raise approval_consumed(record) from None

    # -- the HTTP service's keys and idempotent responses (KeyStore, schema 4) -------------------
    _KEY_COLUMNS = "key_id, name, tenant, roles, secret_sha256, created_at, revoked_at"

    def add_api_key(self, key: ApiKeyRecord) -> None:
        with self._tx() as db:
            try:
                db.execute(
                    f"INSERT INTO api_keys({self._KEY_COLUMNS}) VALUES (?,?,?,?,?,?,?)",
                    (
                        key.key_id,
                        key.name,
                        key.tenant,
                        json.dumps(list(key.roles)),
                        key.secret_sha256,
                        key.created_at.isoformat(),
                        None if key.revoked_at is None else key.revoked_at.isoformat(),
                    ),
                )
            except sqlite3.IntegrityError:
                raise key_exists(key.key_id) from None

    def get_api_key(self, key_id: str) -> ApiKeyRecord | None:
        with self._lock:
            row = self._db.execute(f"SELECT {self._KEY_COLUMNS} FROM api_keys WHERE key_id=?", (key_id,)).fetchone()
        return None if row is None else _key(row)

    def list_api_keys(self, limit: int = MAX_KEYS_LISTED) -> list[ApiKeyRecord]:
        with self._lock:
            rows = self._db.execute(
                f"SELECT {self._KEY_COLUMNS} FROM api_keys ORDER BY created_at, key_id LIMIT ?", (page_size(limit),)
            ).fetchall()
        return [_key(r) for r in rows]

    def revoke_api_key(self, key_id: str, at: datetime) -> ApiKeyRecord:
        with self._tx() as db:
            db.execute(
                "UPDATE api_keys SET revoked_at=? WHERE key_id=? AND revoked_at IS NULL", (at.isoformat(), key_id)
            )
            row = db.execute(f"SELECT {self._KEY_COLUMNS} FROM api_keys WHERE key_id=?", (key_id,)).fetchone()
        if row is None:
            raise key_not_found(key_id)
        return _key(row)

    def remember_response(self, response: StoredResponse) -> StoredResponse:
        with self._tx() as db:
            db.execute(
                "INSERT INTO api_responses(tenant, idempotency_key, fingerprint, status_code, body, created_at)"
                " VALUES (?,?,?,?,?,?) ON CONFLICT(tenant, idempotency_key) DO NOTHING",
                (
                    response.tenant,
                    response.idempotency_key,
                    response.fingerprint,
                    response.status_code,
                    response.body,
                    response.created_at.isoformat(),
                ),
            )
            kept = self._response(db, response.tenant, response.idempotency_key)
        assert kept is not None
        return kept

    def recall_response(self, tenant: str, idempotency_key: str) -> StoredResponse | None:
        with self._lock:
            return self._response(self._db, tenant, idempotency_key)

    @staticmethod
    def _response(db: sqlite3.Connection, tenant: str, idempotency_key: str) -> StoredResponse | None:
        row = db.execute(
            "SELECT fingerprint, status_code, body, created_at FROM api_responses WHERE tenant=? AND idempotency_key=?",
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
            created_at=datetime.fromisoformat(row[3]),
        )


def _key(r: tuple[Any, ...]) -> ApiKeyRecord:
    return ApiKeyRecord(
        key_id=r[0],
        name=r[1],
        tenant=r[2],
        roles=tuple(json.loads(r[3])),
        secret_sha256=r[4],
        created_at=datetime.fromisoformat(r[5]),
        revoked_at=None if r[6] is None else datetime.fromisoformat(r[6]),
    )


def _buildable_clause(builds: Buildable | None) -> tuple[str, tuple[str, ...]]:
    """The claim's version filter (see ``Buildable``) and its parameters; nothing without ``builds``."""
    if builds is None or not builds:
        return "", ()
    pairs = build_pairs(builds)
    names = ",".join("?" * len(builds))
    clause = f" AND NOT (agent IN ({names}) AND agent_version IS NOT NULL"
    if pairs:
        clause += f" AND (agent, agent_version) NOT IN (VALUES {','.join(['(?,?)'] * len(pairs))})"
    return clause + ")", (*builds, *(item for pair in pairs for item in pair))
