"""Round trips of the PostgreSQL store, counted on the wire (libpq's protocol trace of its connection).

A common step (the run row and its events) is one round trip; a step with more to write is one
pipelined transaction of two; a connection in steady use is not pinged on every checkout, while an
idle one is. Counts, never times: a regression to the old BEGIN / UPDATE / INSERT / COMMIT sequence
(plus a ping) fails here whatever the machine's speed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import pq

from stateward.core.errors import RunError, StaleLeaseError
from stateward.core.events import EventType, NewEvent
from stateward.core.journal import AttemptRecord
from stateward.core.state import AgentRef, RunState
from stateward.core.status import RunStatus
from stateward.store.postgres import PostgresStore
from stateward.store.records import StepWrite

pytestmark = pytest.mark.postgres
RUN = "run_wire"


class WireTrace:
    """What the store's pooled connections sent and received, as libpq traces them."""

    def __init__(self, path: Path):
        self.path = path
        self._file = path.open("w")
        self._traced: list[psycopg.Connection[Any]] = []

    def __call__(self, conn: psycopg.Connection[Any]) -> None:
        self._traced.append(conn)
        self._trace(conn)

    def _trace(self, conn: psycopg.Connection[Any]) -> None:
        conn.pgconn.trace(self._file.fileno())
        conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)

    def _flush(self) -> None:
        """libpq buffers its trace; untracing flushes it (then tracing goes on). Called between calls only."""
        for conn in self._traced:
            if not conn.closed:
                conn.pgconn.untrace()
                self._trace(conn)

    def mark(self) -> int:
        self._flush()
        return self.path.stat().st_size

    def since(self, mark: int) -> list[str]:
        self._flush()
        with self.path.open() as f:
            f.seek(mark)
            return [line for line in f.read().splitlines() if line[:2] in ("F\t", "B\t")]

    def round_trips(self, mark: int) -> int:
        """Batches of messages the client sent, each one after the replies to the one before."""
        lines = self.since(mark)
        return sum(1 for i, line in enumerate(lines) if line[0] == "F" and (i == 0 or lines[i - 1][0] == "B"))

    def close(self) -> None:
        self._file.close()


@pytest.fixture
def wire(tmp_path: Path) -> Iterator[WireTrace]:
    trace = WireTrace(tmp_path / "wire.log")
    yield trace
    trace.close()


def open_store(pg_url: str, wire: WireTrace, **options: Any) -> PostgresStore:
    """One pooled connection, traced; it has served a call (a fresh connection is pinged once)."""
    store = PostgresStore(pg_url, min_size=1, max_size=1, configure=wire, **options)
    store.create_run(RunState(run_id=RUN, agent=AgentRef(name="tests.store:agent"), goal="wire"), [started()])
    return store


def started() -> NewEvent:
    return NewEvent(type=EventType.RUN_STARTED, payload={"goal": "wire"})


def events(n: int) -> list[NewEvent]:
    return [NewEvent(type=EventType.TOOL_ATTEMPTED, payload={"n": i, "text": "x" * 100}) for i in range(n)]


def counted(wire: WireTrace, call: Callable[[], object]) -> int:
    mark = wire.mark()
    call()
    return wire.round_trips(mark)


@pytest.fixture
def store(pg_url: str, wire: WireTrace) -> Iterator[PostgresStore]:
    opened = open_store(pg_url, wire)
    yield opened
    opened.close()


def test_a_step_with_its_events_is_one_round_trip(store: PostgresStore, wire: WireTrace) -> None:
    lease = store.acquire_lease(RUN, "w1", ttl_s=30)
    state = store.load_run(RUN)
    assert counted(wire, lambda: store.commit_step(RUN, 1, StepWrite(state=state, events=events(3)), lease)) == 1
    assert counted(wire, lambda: store.commit_step(RUN, 4, StepWrite(state=state), lease)) == 1
    written = store.read_events(RUN)
    assert [(e.seq, e.type, e.lease_version) for e in written[1:4]] == [
        (seq, EventType.TOOL_ATTEMPTED, lease.version) for seq in (2, 3, 4)
    ]
    assert [e.payload["n"] for e in written[1:4]] == [0, 1, 2] and store.last_seq(RUN) == 4


def test_a_new_run_with_its_first_events_is_one_round_trip(store: PostgresStore, wire: WireTrace) -> None:
    state = RunState(run_id="run_new", agent=AgentRef(name="tests.store:agent"), goal="wire")
    assert counted(wire, lambda: store.create_run(state, [started(), *events(2)])) == 1
    assert [e.seq for e in store.read_events("run_new")] == [1, 2, 3] and store.last_seq("run_new") == 3
    with pytest.raises(RunError) as err:
        store.create_run(state, events(1))
    assert err.value.code == "RUN_EXISTS" and len(store.read_events("run_new")) == 3


def test_a_refused_one_statement_step_inserts_no_events(store: PostgresStore) -> None:
    old = store.acquire_lease(RUN, "w1", ttl_s=0.05)
    store.release_lease(old)
    new = store.acquire_lease(RUN, "w2", ttl_s=30)
    state = store.load_run(RUN)
    with pytest.raises(StaleLeaseError):
        store.commit_step(RUN, 1, StepWrite(state=state, events=events(3)), old)
    assert store.last_seq(RUN) == 1 and len(store.read_events(RUN)) == 1
    assert store.commit_step(RUN, 1, StepWrite(state=state, events=events(2)), new) == 3


def tool_attempt(attempt_id: str, outcome: str = "SUCCESS") -> AttemptRecord:
    return AttemptRecord(
        attempt_id=attempt_id,
        run_id=RUN,
        step=1,
        sequence=1,
        tool="t",
        input_hash="h",
        idempotency_key=None,
        outcome=outcome,
    )


def test_a_tool_step_with_its_attempts_is_one_round_trip(store: PostgresStore, wire: WireTrace, pg_url: str) -> None:
    lease = store.acquire_lease(RUN, "w1", ttl_s=30)
    state = store.load_run(RUN)
    twice = [tool_attempt("a1", "PENDING_VERIFICATION"), tool_attempt("a2"), tool_attempt("a1")]  # a1: the last
    write = StepWrite(state=state, events=events(2), attempts=twice)
    assert counted(wire, lambda: store.commit_step(RUN, 1, write, lease)) == 1
    again = StepWrite(state=state, events=events(1), attempts=[tool_attempt("a2", "FAILED")])  # replaces a2
    assert counted(wire, lambda: store.commit_step(RUN, 3, again, lease)) == 1
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute("SELECT attempt_id, run_id, step, body FROM tool_attempts ORDER BY attempt_id").fetchall()
    assert [(r[0], r[1], r[2], AttemptRecord.model_validate_json(r[3]).outcome) for r in rows] == [
        ("a1", RUN, 1, "SUCCESS"),
        ("a2", RUN, 1, "FAILED"),
    ]
    assert store.last_seq(RUN) == 4


def test_a_refused_tool_step_writes_no_attempt(store: PostgresStore, pg_url: str) -> None:
    old = store.acquire_lease(RUN, "w1", ttl_s=0.05)
    store.release_lease(old)
    store.acquire_lease(RUN, "w2", ttl_s=30)
    state = store.load_run(RUN)
    with pytest.raises(StaleLeaseError):
        store.commit_step(RUN, 1, StepWrite(state=state, events=events(1), attempts=[tool_attempt("a1")]), old)
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT count(*) FROM tool_attempts").fetchone() == (0,)


def test_a_step_with_contents_is_one_pipelined_transaction(store: PostgresStore, wire: WireTrace) -> None:
    lease = store.acquire_lease(RUN, "w1", ttl_s=30)
    state = store.load_run(RUN)
    attempt = tool_attempt("a1")
    ended = state.model_copy(update={"status": RunStatus.COMPLETED, "terminal_reason": "done"})
    write = StepWrite(state=ended, events=events(2), attempts=[attempt], checkpoint="terminal", release_lease=True)
    assert counted(wire, lambda: store.commit_step(RUN, 1, write, lease)) == 2
    checkpoint = store.latest_checkpoint(RUN)
    assert checkpoint is not None and (checkpoint.seq, checkpoint.state.status) == (3, RunStatus.COMPLETED)
    assert store.lease_of(RUN) is None and store.last_seq(RUN) == 3


def test_a_connection_in_steady_use_is_not_pinged_per_checkout(store: PostgresStore, wire: WireTrace) -> None:
    assert counted(wire, lambda: [store.last_seq(RUN) for _ in range(5)]) == 5


def test_a_connection_idle_past_the_limit_is_pinged_before_it_is_lent(pg_url: str, wire: WireTrace) -> None:
    store = open_store(pg_url, wire, check_idle_s=0.0)  # every connection counts as idle
    try:
        mark = wire.mark()
        store.last_seq(RUN)
        assert wire.round_trips(mark) == 2
        assert any("Query" in line and '""' in line for line in wire.since(mark))  # the ping: an empty query
    finally:
        store.close()


def test_a_connection_closed_under_the_store_is_replaced_before_it_is_lent(pg_url: str, wire: WireTrace) -> None:
    lent: list[psycopg.Connection[Any]] = []

    def keep(conn: psycopg.Connection[Any]) -> None:
        wire(conn)
        lent.append(conn)

    store = PostgresStore(pg_url, min_size=1, max_size=1, configure=keep)
    try:
        store.create_run(RunState(run_id=RUN, agent=AgentRef(name="tests.store:agent"), goal="wire"), [started()])
        lease = store.acquire_lease(RUN, "w1", ttl_s=30)
        state = store.load_run(RUN)
        lent[0].pgconn.finish()  # the socket is gone, though it was used a moment ago
        assert store.commit_step(RUN, 1, StepWrite(state=state, events=events(3)), lease) == 4
        assert len(lent) == 2 and store.last_seq(RUN) == 4
    finally:
        store.close()
