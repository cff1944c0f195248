"""The Tool Gateway's journal on SQLite: side effects by idempotency key, circuit breakers."""

from __future__ import annotations

import sqlite3

from stateward.core.journal import (
    BreakerState,
    SideEffectRecord,
    approval_consumed,
    stale_journal_start,
    superseded,
)
from stateward.store.sqlite.base import SQLiteBase


class SQLiteJournal(SQLiteBase):
    """:class:`~stateward.store.protocols.EffectJournal` on SQLite: the gateway's side effects and breakers."""

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
