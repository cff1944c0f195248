"""The SQLite store's base: opening, migrating and checking the file, its one transaction, and the
lookups every concern shares (a run's key, its parts, its lineage)."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from stateward.core.errors import ErrorCode, RunNotFoundError, StoreError, UserError
from stateward.core.state import RunState
from stateward.store.base import PayloadLimits
from stateward.store.migrations import SQLITE_MIGRATIONS
from stateward.store.parts import PartCache, referenced
from stateward.store.sqlite.connection import (
    RUN_KEY_CACHE,
    Guarded,
    WalCheckpointer,
    store_error,
)


class SQLiteBase:
    """The connection, its lock and the per-process caches every concern's methods share; a
    SQLiteStore is this plus one mixin per concern (store/sqlite/__init__.py). Thread-safe through one lock;
    every write is a ``BEGIN IMMEDIATE`` transaction."""

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
        self._lock = Guarded(self.path)
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

    def _one(self, sql: str, run_id: str) -> tuple[Any, ...]:
        with self._lock:
            row = self._db.execute(sql, (run_id,)).fetchone()
        if row is None:
            raise RunNotFoundError(f"no run {run_id!r}", details={"run_id": run_id})
        return tuple(row)

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
        if len(self._run_keys) >= RUN_KEY_CACHE:  # a long-lived worker sees unboundedly many runs
            self._run_keys.clear()
        if len(self._statuses) >= RUN_KEY_CACHE:
            self._statuses.clear()
        self._run_keys[run_id] = key
        if status is not None:
            self._statuses[run_id] = status
        return key

    def _forget(self, run_id: str) -> None:
        self._run_keys.pop(run_id, None)
        self._statuses.pop(run_id, None)

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

    def _fork_of(self, run_id: str) -> tuple[str, int] | None:
        """(source, shared seq) of a fork, None for any other run; fixed at creation, so remembered."""
        if run_id in self._forks:
            return self._forks[run_id]
        with self._lock:
            row = self._db.execute("SELECT forked_from, fork_seq FROM runs WHERE run_id=?", (run_id,)).fetchone()
        if row is None:
            return None  # not remembered: the run may be created later
        found = None if row[0] is None else (str(row[0]), int(row[1]))
        if len(self._forks) >= RUN_KEY_CACHE:
            self._forks.clear()
        self._forks[run_id] = found
        return found

    def load_run(self, run_id: str) -> RunState:
        """The run's snapshot: :class:`~stateward.store.sqlite.runs.SQLiteRuns` reads it (declared here for the
        concerns that read a run, e.g. an artifact's lineage)."""
        raise NotImplementedError
