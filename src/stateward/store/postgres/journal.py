"""The Tool Gateway's journal on PostgreSQL: side effects by idempotency key, circuit breakers."""

from __future__ import annotations

from psycopg import errors as pg_errors

from stateward.core.journal import (
    BreakerState,
    SideEffectRecord,
    approval_consumed,
    stale_journal_start,
    superseded,
)
from stateward.store import _pg_sql as q
from stateward.store.postgres.base import PostgresBase


class PostgresJournal(PostgresBase):
    """:class:`~stateward.store.protocols.EffectJournal` on PostgreSQL."""

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
