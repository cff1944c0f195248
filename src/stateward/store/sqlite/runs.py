"""Runs and steps on SQLite: create, load and commit a run; its events; its checkpoints."""

from __future__ import annotations

import json
import sqlite3
import time
from datetime import datetime
from typing import Any

from stateward.core.canonical import sha256_hex
from stateward.core.errors import ErrorCode, RunError, RunNotFoundError
from stateward.core.events import Event, EventType, NewEvent
from stateward.core.state import RunState
from stateward.store.base import event_batch, refused_write
from stateward.store.lineage import read_lineage
from stateward.store.outbox import enqueue, notices_of
from stateward.store.paging import (
    goal_excerpt,
)
from stateward.store.parts import SplitState, join_state, split_state
from stateward.store.records import (
    Checkpoint,
    Lease,
    StepWrite,
)
from stateward.store.sqlite.base import SQLiteBase
from stateward.store.sqlite.connection import (
    from_micros,
    micros,
    now_iso,
)
from stateward.store.sqlite.requests import close_request, insert_request


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


INSERT_PART = "INSERT OR IGNORE INTO state_parts(run_key, digest, body) VALUES (?,?,?)"


_INSERT_BATCH = "INSERT INTO event_batches(run_key, seq, count, events, lease_version, at) VALUES (?,?,?,?,?,?)"


def insert_events(
    db: sqlite3.Connection | sqlite3.Cursor,
    run_key: int,
    after_seq: int,
    events: list[NewEvent],
    lease_version: int,
    at: int,
    batch: str,
) -> None:
    """A step's events as one batch row (``store.base.event_batch``)."""
    db.execute(_INSERT_BATCH, (run_key, after_seq + len(events), len(events), batch, lease_version, at))


_INSERT_CHECKPOINT = "INSERT INTO checkpoints(run_id, seq, reason, snapshot, parts, created_at) VALUES (?,?,?,?,?,?)"


def insert_checkpoint(db: sqlite3.Connection, run_id: str, seq: int, reason: str, split: SplitState, now: str) -> None:
    """A checkpoint of the run's state as written by the step (or fork) that ends at event ``seq``."""
    db.execute(_INSERT_CHECKPOINT, (run_id, seq, reason, split.snapshot, split.refs, now))


class SQLiteRuns(SQLiteBase):
    """:class:`~stateward.store.protocols.RunLog` on SQLite: runs, steps, events and checkpoints."""

    def create_run(self, state: RunState, events: list[NewEvent]) -> list[Event]:
        now = now_iso()
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

    @staticmethod
    def _append(
        db: sqlite3.Connection, key: int, run_id: str, events: list[NewEvent], now: str, batch: str
    ) -> list[Event]:
        """A new run's first events (its first batch)."""
        at = datetime.fromisoformat(now)
        if events:
            insert_events(db, key, 0, events, 0, micros(at), batch)
        # Built from values that were just validated on their way in: no need to validate them again.
        return [
            Event.model_construct(run_id=run_id, seq=seq, type=ev.type, payload=ev.payload, lease_version=0, at=at)
            for seq, ev in enumerate(events, start=1)
        ]

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

    def last_seq(self, run_id: str) -> int:
        return int(self._one("SELECT last_seq FROM runs WHERE run_id=?", run_id)[0])

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
                    insert_events(cur, key, expected_seq, events, lease_version, int(now * 1_000_000), batch)
                    notices = notices_of(state, expected_seq, events)
                    if notices:  # a wait, an end: the outbox row commits with the step (store/outbox.py)
                        enqueue(cur, "?", state, notices, now)
                for digest, body in split.new_parts.items():
                    cur.execute(INSERT_PART, (key, digest, body))
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
        now = now_iso() if write.artifacts or write.checkpoint is not None else ""
        try:
            if write.close_request is not None:
                close_request(db, run_id, write.close_request)
            if write.close_all_requests is not None:
                db.execute(
                    "UPDATE pending_requests SET answer=? WHERE run_id=? AND answer IS NULL",
                    (write.close_all_requests.model_dump_json(), run_id),
                )
            if write.open_request is not None:
                insert_request(db, write.state, write.open_request)
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
                insert_checkpoint(db, run_id, new_seq, write.checkpoint, split, now)
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
        for last, count, batch, lease, stamp in rows:
            at = from_micros(stamp)
            for seq, (kind, payload) in enumerate(json.loads(batch), start=last - count + 1):
                if seq > after_seq and (upper is None or seq <= upper):  # a batch may straddle either bound
                    out.append(
                        Event(run_id=label, seq=seq, type=EventType(kind), payload=payload, lease_version=lease, at=at)
                    )
        return out if limit is None else out[:limit]

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
