"""Forks on SQLite: a new run that reads its source's history through (store/lineage.py)."""

from __future__ import annotations

import sqlite3
import time
from datetime import datetime

from stateward.core.errors import ErrorCode, RunError
from stateward.core.events import NewEvent
from stateward.core.state import PendingRequest, RunState
from stateward.store.base import event_batch
from stateward.store.outbox import enqueue, notices_of
from stateward.store.paging import (
    goal_excerpt,
)
from stateward.store.parts import split_state
from stateward.store.sqlite.base import SQLiteBase
from stateward.store.sqlite.connection import (
    micros,
    now_iso,
)
from stateward.store.sqlite.requests import insert_request
from stateward.store.sqlite.runs import insert_checkpoint, insert_events


class SQLiteForks(SQLiteBase):
    """:class:`~stateward.store.protocols.ForkBook` on SQLite."""

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
        now = now_iso()
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
            insert_events(db, key, at_seq, events, 0, micros(datetime.fromisoformat(now)), batch)
            notices = notices_of(state, at_seq, events)
            if notices:  # a re-opened request notifies as any wait does (store/outbox.py)
                enqueue(db, "?", state, notices, time.time())
            if open_request is not None:
                insert_request(db, state, open_request)
            if checkpoint is not None:
                insert_checkpoint(db, state.run_id, new_seq, checkpoint, split, now)
        self._parts.committed(state.run_id, split.known)
        return new_seq

    def forks_of(self, run_id: str, limit: int = 100) -> list[str]:
        """The runs forked from ``run_id``, oldest first (at most ``limit``)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT run_id FROM runs WHERE forked_from=? ORDER BY created_at, run_id LIMIT ?", (run_id, limit)
            ).fetchall()
        return [str(r[0]) for r in rows]
