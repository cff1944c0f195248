"""The embedded default store: one SQLite file in WAL mode, one transaction per step."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from stateward.core.canonical import sha256_hex
from stateward.core.errors import RunError, RunNotFoundError, StoreError
from stateward.core.events import Event, EventType, NewEvent
from stateward.core.state import PendingRequest, RunState
from stateward.store.migrations import SQLITE_MIGRATIONS
from stateward.store.records import ArtifactRecord, PendingRecord, RequestAnswer, RunRow, StepWrite
from stateward.tools.ports import BreakerState, SideEffectRecord


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class SQLiteStore:
    """Thread-safe through one lock; every write is a ``BEGIN IMMEDIATE`` transaction."""

    def __init__(self, path: str | Path, *, synchronous: str = "FULL"):
        if synchronous not in {"FULL", "NORMAL", "OFF", "EXTRA"}:
            raise StoreError(f"unknown synchronous mode {synchronous!r}", code="CONFIGURATION_ERROR")
        self.path = str(path)
        try:
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open {self.path}: {exc}", code="STORE_UNAVAILABLE") from exc
        self._lock = threading.RLock()
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"PRAGMA synchronous={synchronous}")
        self._db.execute("PRAGMA busy_timeout=30000")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._migrate()

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

    def _migrate(self) -> None:
        with self._tx() as db:
            current = db.execute("PRAGMA user_version").fetchone()[0]
            if current > len(SQLITE_MIGRATIONS):
                raise StoreError(
                    f"{self.path} has schema version {current}; this stateward knows {len(SQLITE_MIGRATIONS)}",
                    code="SCHEMA_TOO_NEW",
                )
            for version, script in enumerate(SQLITE_MIGRATIONS[current:], start=current + 1):
                for statement in script:
                    db.execute(statement)
                db.execute(f"PRAGMA user_version={version}")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- runs -----------------------------------------------------------------------------------
    def create_run(self, state: RunState, events: list[NewEvent]) -> list[Event]:
        now = _now()
        with self._tx() as db:
            try:
                db.execute(
                    "INSERT INTO runs(run_id, agent, status, terminal_reason, snapshot, last_seq,"
                    " created_at, updated_at) VALUES (?,?,?,?,?,?,?,?)",
                    (
                        state.run_id,
                        state.agent.factory,
                        state.status.value,
                        state.terminal_reason,
                        state.model_dump_json(),
                        0,
                        now,
                        now,
                    ),
                )
            except sqlite3.IntegrityError:
                raise RunError(f"run {state.run_id} already exists", code="RUN_EXISTS") from None
            written = self._append(db, state.run_id, 0, events, now)
            db.execute("UPDATE runs SET last_seq=? WHERE run_id=?", (len(events), state.run_id))
        return written

    def load_run(self, run_id: str) -> RunState:
        return self.load_run_at(run_id)[0]

    def load_run_at(self, run_id: str) -> tuple[RunState, int]:
        with self._lock:
            row = self._db.execute("SELECT snapshot, last_seq FROM runs WHERE run_id=?", (run_id,)).fetchone()
        if row is None:
            raise RunNotFoundError(f"no run {run_id!r}", details={"run_id": run_id})
        return RunState.model_validate_json(row[0]), int(row[1])

    def last_seq(self, run_id: str) -> int:
        with self._lock:
            row = self._db.execute("SELECT last_seq FROM runs WHERE run_id=?", (run_id,)).fetchone()
        if row is None:
            raise RunNotFoundError(f"no run {run_id!r}", details={"run_id": run_id})
        return int(row[0])

    def commit_step(self, run_id: str, expected_seq: int, write: StepWrite) -> list[Event]:
        state = write.state
        now = _now()
        with self._tx() as db:
            new_seq = expected_seq + len(write.events)
            cur = db.execute(
                "UPDATE runs SET status=?, terminal_reason=?, snapshot=?, last_seq=?, updated_at=?"
                " WHERE run_id=? AND last_seq=?",
                (
                    state.status.value,
                    state.terminal_reason,
                    state.model_dump_json(),
                    new_seq,
                    now,
                    run_id,
                    expected_seq,
                ),
            )
            if cur.rowcount != 1:
                exists = db.execute("SELECT 1 FROM runs WHERE run_id=?", (run_id,)).fetchone()
                if exists is None:
                    raise RunNotFoundError(f"no run {run_id!r}", details={"run_id": run_id})
                raise RunError(
                    f"run {run_id} changed since event {expected_seq}; reload and retry",
                    code="CONCURRENT_UPDATE",
                    details={"run_id": run_id, "expected_seq": expected_seq},
                )
            written = self._append(db, run_id, expected_seq, write.events, now)
            if write.close_request is not None:
                self._close_request(db, run_id, write.close_request)
            if write.open_request is not None:
                db.execute(
                    "INSERT INTO pending_requests(run_id, request_id, body, answer) VALUES (?,?,?,NULL)",
                    (run_id, write.open_request.request_id, write.open_request.model_dump_json()),
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
        return written

    @staticmethod
    def _close_request(db: sqlite3.Connection, run_id: str, answer: RequestAnswer) -> None:
        cur = db.execute(
            "UPDATE pending_requests SET answer=? WHERE run_id=? AND request_id=? AND answer IS NULL",
            (answer.model_dump_json(), run_id, answer.request_id),
        )
        if cur.rowcount != 1:
            raise RunError(
                f"request {answer.request_id} of run {run_id} is not open",
                code="REQUEST_NOT_OPEN",
                details={"run_id": run_id, "request_id": answer.request_id},
            )

    @staticmethod
    def _append(db: sqlite3.Connection, run_id: str, after_seq: int, events: list[NewEvent], now: str) -> list[Event]:
        rows = [(run_id, after_seq + i, ev.type.value, _dumps(ev.payload), now) for i, ev in enumerate(events, start=1)]
        db.executemany("INSERT INTO events(run_id, seq, type, payload, at) VALUES (?,?,?,?,?)", rows)
        at = datetime.fromisoformat(now)
        return [
            Event(run_id=run_id, seq=seq, type=ev.type, payload=ev.payload, at=at)
            for (_, seq, _, _, _), ev in zip(rows, events, strict=True)
        ]

    def read_events(self, run_id: str, after_seq: int = 0) -> list[Event]:
        with self._lock:
            rows = self._db.execute(
                "SELECT seq, type, payload, lease_version, at FROM events WHERE run_id=? AND seq>? ORDER BY seq",
                (run_id, after_seq),
            ).fetchall()
        return [
            Event(
                run_id=run_id,
                seq=seq,
                type=EventType(kind),
                payload=json.loads(payload),
                lease_version=lease,
                at=datetime.fromisoformat(at),
            )
            for seq, kind, payload, lease, at in rows
        ]

    def list_runs(self, limit: int = 100) -> list[RunRow]:
        with self._lock:
            rows = self._db.execute(
                "SELECT run_id, agent, status, terminal_reason, last_seq, created_at, updated_at"
                " FROM runs ORDER BY created_at DESC, run_id LIMIT ?",
                (limit,),
            ).fetchall()
        return [
            RunRow(
                run_id=r[0],
                agent=r[1],
                status=r[2],
                terminal_reason=r[3],
                last_seq=r[4],
                created_at=datetime.fromisoformat(r[5]),
                updated_at=datetime.fromisoformat(r[6]),
            )
            for r in rows
        ]

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

    @staticmethod
    def _pending(run_id: str, body: str, answer: str | None) -> PendingRecord:
        return PendingRecord(
            run_id=run_id,
            request=PendingRequest.model_validate_json(body),
            answer=None if answer is None else RequestAnswer.model_validate_json(answer),
        )

    # -- artifacts ------------------------------------------------------------------------------
    def list_artifacts(self, run_id: str) -> list[ArtifactRecord]:
        with self._lock:
            rows = self._db.execute(
                "SELECT name, version, sha256, media_type, content, created_at FROM artifacts"
                " WHERE run_id=? ORDER BY name, version",
                (run_id,),
            ).fetchall()
        return [self._artifact(run_id, r) for r in rows]

    def get_artifact(self, run_id: str, name: str, version: int | None = None) -> ArtifactRecord | None:
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

    def put_side_effect(self, record: SideEffectRecord) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO side_effects(idempotency_key, run_id, tool, status, body) VALUES (?,?,?,?,?)",
                (record.idempotency_key, record.run_id, record.tool, record.status, record.model_dump_json()),
            )
