"""Forks on PostgreSQL: a new run that reads its source's history through (store/lineage.py)."""

from __future__ import annotations

from typing import Any

from stateward.core.errors import ErrorCode, RunError
from stateward.core.events import NewEvent
from stateward.core.state import PendingRequest, RunState
from stateward.store import _pg_sql as q
from stateward.store.base import event_batch
from stateward.store.outbox import enqueue, notices_of
from stateward.store.paging import (
    goal_excerpt,
)
from stateward.store.parts import split_state
from stateward.store.postgres.base import PostgresBase
from stateward.store.postgres.requests import insert_request


class PostgresForks(PostgresBase):
    """:class:`~stateward.store.protocols.ForkBook` on PostgreSQL."""

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
                insert_request(conn, state, open_request)
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
