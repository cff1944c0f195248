"""Runs and steps on PostgreSQL: create, load and commit a run (one round trip for most steps); its events;
its checkpoints."""

from __future__ import annotations

import contextlib
import json
from datetime import datetime
from typing import Any

import psycopg
from psycopg import errors as pg_errors

from stateward.core.canonical import sha256_hex
from stateward.core.errors import ErrorCode, RunError
from stateward.core.events import Event, EventType, NewEvent
from stateward.core.state import RunState
from stateward.store import _pg_direct
from stateward.store import _pg_sql as q
from stateward.store._pg_conns import Lent
from stateward.store.base import event_batch, refused_write
from stateward.store.lineage import read_lineage
from stateward.store.outbox import Notice, enqueue, notices_of
from stateward.store.paging import (
    goal_excerpt,
)
from stateward.store.parts import SplitState, join_state, split_state
from stateward.store.postgres.base import Conn, PostgresBase, execute, first_line, pipeline
from stateward.store.postgres.requests import close_request, insert_request
from stateward.store.records import (
    Checkpoint,
    Lease,
    StepWrite,
)


class PostgresRuns(PostgresBase):
    """:class:`~stateward.store.protocols.RunLog` on PostgreSQL: runs, steps, events and checkpoints."""

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
            row = execute(lent.cursor, q.create_statement(len(events)), params).fetchone()
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

    def last_seq(self, run_id: str) -> int:
        return int(self._one(q.LAST_SEQ, run_id)[0])

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
                    f"step of run {run_id} repeats a record that already exists: {first_line(exc)}",
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
            with pipeline(conn):
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
        row = execute(lent.cursor, statement, params).fetchone()
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
            close_request(conn, run_id, write.close_request)
        if write.close_all_requests is not None:
            conn.execute(q.CLOSE_ALL_REQUESTS, (write.close_all_requests.model_dump_json(), run_id))
        if write.open_request is not None:
            insert_request(conn, write.state, write.open_request)
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

    def latest_checkpoint(self, run_id: str) -> Checkpoint | None:
        with self._conn() as conn:
            row = conn.execute(q.LATEST_CHECKPOINT, (run_id,)).fetchone()
        if row is None:
            return None
        state = join_state(run_id, row[2], row[4], self._read_parts(run_id, row[4]))
        return Checkpoint(run_id=run_id, seq=row[0], reason=row[1], state=state, created_at=row[3])

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
