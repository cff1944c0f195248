"""The chaos agents' domain: a ledger with a unique idempotency constraint that also checks fencing tokens.

Every handler entry is logged, so the harness can count what the runtime asked the domain to do,
not only what the domain let through.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from stateward.core.errors import ErrorCode
from stateward.store.backends import sqlite_path
from stateward.tools.errors import ToolFailure
from stateward.tools.types import LookupStatus

_SCHEMA = [
    """CREATE TABLE IF NOT EXISTS chaos_ledger (
        idempotency_key TEXT PRIMARY KEY, run_id TEXT NOT NULL, op INTEGER NOT NULL, amount INTEGER NOT NULL,
        fencing_token INTEGER)""",
    "CREATE INDEX IF NOT EXISTS chaos_ledger_by_op ON chaos_ledger(run_id, op)",
    """CREATE TABLE IF NOT EXISTS chaos_calls (
        idempotency_key TEXT NOT NULL, run_id TEXT NOT NULL, op INTEGER NOT NULL, fencing_token INTEGER,
        outcome TEXT NOT NULL)""",
    "CREATE TABLE IF NOT EXISTS chaos_tokens (run_id TEXT PRIMARY KEY, max_token INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS chaos_log (kind TEXT NOT NULL, run_id TEXT NOT NULL, detail TEXT)",
]
_TABLES = ("chaos_ledger", "chaos_calls", "chaos_tokens", "chaos_log")


class StaleFencingToken(ToolFailure):
    """The domain has seen a newer lease of this run: the caller is a superseded worker."""

    default_code = ErrorCode.PERMISSION_DENIED


class Ledger:
    """One connection per process (reopened after a fork), to the same database as the runs."""

    def __init__(self, url: str):
        self.url = url
        self.postgres = url.startswith(("postgresql://", "postgres://"))
        self._conn: Any = None
        self._pid = -1
        # Handlers run on the gateway's timeout threads, and a timed-out one may still be running.
        self._lock = threading.RLock()

    def _connection(self) -> Any:
        if self._conn is None or self._pid != os.getpid():
            if self.postgres:
                import psycopg

                self._conn = psycopg.connect(self.url, autocommit=True)
            else:
                self._conn = sqlite3.connect(
                    sqlite_path(self.url), isolation_level=None, timeout=60, check_same_thread=False
                )
                self._conn.execute("PRAGMA busy_timeout=60000")
            self._pid = os.getpid()
        return self._conn

    @contextmanager
    def _tx(self) -> Iterator[Any]:
        with self._lock:
            conn = self._connection()
            if self.postgres:
                with conn.transaction():
                    yield conn
                return
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def ping(self) -> bool:
        """The side-effect-free health check the circuit breaker may probe with."""
        try:
            with self._tx() as db:
                db.execute("SELECT 1").fetchone()
        except Exception:
            return False
        return True

    def _q(self, sql: str) -> str:
        return sql.replace("?", "%s") if self.postgres else sql

    def setup(self, *, reset: bool = False) -> None:
        with self._tx() as db:
            for statement in _SCHEMA:
                db.execute(statement)
            if reset:
                for table in _TABLES:
                    db.execute(f"DELETE FROM {table}")

    def apply(self, key: str, run_id: str, op: int, amount: int, token: int | None) -> dict[str, Any]:
        """Post one entry exactly once per idempotency key, refusing superseded fencing tokens."""
        with self._tx() as db:
            row = db.execute(self._q("SELECT max_token FROM chaos_tokens WHERE run_id=?"), (run_id,)).fetchone()
            if token is not None and row is not None and token < row[0]:
                outcome = "stale_token"
            else:
                self._fence(db, run_id, token)
                done = db.execute(self._q("SELECT 1 FROM chaos_ledger WHERE idempotency_key=?"), (key,)).fetchone()
                outcome = "duplicate_key" if done else "applied"
                if not done:
                    db.execute(
                        self._q("INSERT INTO chaos_ledger VALUES (?, ?, ?, ?, ?)"), (key, run_id, op, amount, token)
                    )
            db.execute(self._q("INSERT INTO chaos_calls VALUES (?, ?, ?, ?, ?)"), (key, run_id, op, token, outcome))
        if outcome == "stale_token":
            raise StaleFencingToken(f"fencing token {token} of run {run_id} is superseded")
        return {"posted": op, "amount": amount}

    def lookup(
        self, key: str, *, run_id: str | None = None, fencing_token: int | None = None
    ) -> tuple[LookupStatus, Any]:
        """What became of ``key``. Told the asker's token, the ledger fences first: a superseded holder's
        post that arrives after a NOT_EXECUTED answer is refused instead of landing before the retry."""
        with self._tx() as db:
            if run_id is not None:
                self._fence(db, run_id, fencing_token)
            row = db.execute(self._q("SELECT op, amount FROM chaos_ledger WHERE idempotency_key=?"), (key,)).fetchone()
        if row is None:
            return LookupStatus.NOT_EXECUTED, None
        return LookupStatus.SUCCEEDED, {"posted": row[0], "amount": row[1]}

    def _fence(self, db: Any, run_id: str, token: int | None) -> None:
        if token is None:
            return
        db.execute(
            self._q(
                "INSERT INTO chaos_tokens(run_id, max_token) VALUES (?, ?) ON CONFLICT (run_id)"
                " DO UPDATE SET max_token = CASE WHEN excluded.max_token > chaos_tokens.max_token"
                " THEN excluded.max_token ELSE chaos_tokens.max_token END"
            ),
            (run_id, token),
        )

    def balance(self, run_id: str) -> int:
        with self._tx() as db:
            row = db.execute(
                self._q("SELECT COALESCE(SUM(amount), 0) FROM chaos_ledger WHERE run_id=?"), (run_id,)
            ).fetchone()
        return int(row[0])

    def log(self, kind: str, run_id: str, detail: str = "") -> None:
        with self._tx() as db:
            db.execute(self._q("INSERT INTO chaos_log VALUES (?, ?, ?)"), (kind, run_id, detail))

    def rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._tx() as db:
            return [tuple(r) for r in db.execute(self._q(sql), params).fetchall()]

    def close(self) -> None:
        if self._conn is not None and self._pid == os.getpid():
            self._conn.close()
        self._conn = None


_LEDGERS: dict[tuple[str, int], Ledger] = {}


def ledger_for(url: str) -> Ledger:
    """One ledger per database per process; a forked child gets its own."""
    key = (url, os.getpid())
    if key not in _LEDGERS:
        _LEDGERS[key] = Ledger(url)
    return _LEDGERS[key]
