"""One durable step on PostgreSQL against one raw commit of the same size, and against its floor.

Starts a throwaway PostgreSQL server from the installed binaries (``tests/pg_fixtures.py``'s PgServer,
as bench_workers does; note its settings: ``fsync`` and ``synchronous_commit`` off, so every side is
measured without a disk flush and the ratio is round trips and CPU, client and server). Interleaved
in blocks: ``PostgresStore.commit_step`` of the realistic step (benchkit.step_write: the blog run's
~1 KB snapshot and 3 events of ~200 B, a leased write as a worker makes it); the baseline, one
autocommitted ``INSERT`` of a row of the same number of bytes into a one-table schema over one
psycopg connection; and the floor, the step's own statement (the run row's guarded update and the
events' insert, ``stateward.store._pg_sql.step_statement``) sent over one psycopg connection with
every value serialized beforehand: what the database charges for the step's writes, with no store
code around it. Target: median step / median raw commit <= 1.5x. Also printed: the same step with no
events (the run row's guarded update alone), the step / floor and floor / raw ratios, and the round
trips of one step (libpq's protocol trace).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchkit import RUN_ID, Target, emit, machine, run_state, step_write, table, targets_table, write_bytes
from stateward.core.canonical import compact_json
from stateward.core.errors import RunNotFoundError
from stateward.core.events import EventType, NewEvent
from stateward.store._pg_sql import step_statement
from stateward.store.postgres import PostgresStore
from stateward.store.records import Lease, StepWrite

HERE = Path(__file__).resolve().parent
BLOCK = 100
BLOCKS = 20
TARGET = 1.5


class PgStep:
    """A PostgresStore with one leased run, committing pre-built writes in order."""

    def __init__(self, url: str, writes: list[StepWrite]):
        self.store = PostgresStore(url)
        self.writes = writes
        self.store.create_run(run_state(0), [NewEvent(type=EventType.RUN_STARTED, payload={"goal": "bench"})])
        self.seq = self.store.last_seq(RUN_ID)
        self.lease: Lease = self.store.acquire_lease(RUN_ID, "bench", 3600)
        self.index = 0

    def step(self) -> None:
        write = self.writes[self.index % len(self.writes)]
        self.seq = self.store.commit_step(RUN_ID, self.seq, write, self.lease)
        self.index += 1

    def close(self) -> None:
        self.store.close()


class Floor:
    """The step's one statement over one connection, every value serialized before the clock starts."""

    def __init__(self, url: str, writes: list[StepWrite]):
        import psycopg

        store = PostgresStore(url)  # creates the schema and the run, then steps aside
        store.create_run(run_state(0), [NewEvent(type=EventType.RUN_STARTED, payload={"goal": "bench"})])
        self.seq = store.last_seq(RUN_ID)
        lease = store.acquire_lease(RUN_ID, "bench", 3600)
        store.close()
        self.conn = psycopg.connect(url, autocommit=True)
        self.sql = step_statement(leased=True, clear_control=False, release=False, events=len(writes[0].events))
        self.params = [self._params(w, lease) for w in writes]
        self.events = len(writes[0].events)  # every write has as many
        self.index = 0

    @staticmethod
    def _params(write: StepWrite, lease: Lease) -> dict[str, Any]:
        params: dict[str, Any] = {
            "status": write.state.status.value,
            "reason": None,
            "snapshot": write.state.model_dump_json(),
            "parts": None,
            "run_id": RUN_ID,
            "not_before": None,
            "lease_version": lease.version,
            "owner": lease.owner,
            "version": lease.version,
        }
        for i, ev in enumerate(write.events):
            params[f"type_{i}"] = ev.type.value
            params[f"payload_{i}"] = compact_json(ev.payload)
        return params

    def step(self) -> None:
        params = self.params[self.index % len(self.params)]
        n = self.events
        params.update(expected=self.seq, new_seq=self.seq + n, **{f"seq_{i}": self.seq + 1 + i for i in range(n)})
        self.conn.execute(self.sql, params).fetchone()
        self.seq += n
        self.index += 1

    def close(self) -> None:
        self.conn.close()


def round_trips(url: str, write: StepWrite) -> int:
    """Batches of messages one warm ``commit_step`` sends, by libpq's protocol trace (as
    tests/store/test_postgres_round_trips.py counts them)."""
    from psycopg import pq

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "wire.log"
        with path.open("w") as log:

            def trace(conn: Any) -> None:
                conn.pgconn.trace(log.fileno())
                conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)

            store = PostgresStore(url, min_size=1, max_size=1, configure=trace)
            try:
                store.create_run(run_state(0), [NewEvent(type=EventType.RUN_STARTED, payload={"goal": "bench"})])
                lease = store.acquire_lease(RUN_ID, "bench", 3600)
                with contextlib.suppress(RunNotFoundError):  # a marker: the step's messages follow its reply
                    store.last_seq("mark")
                store.commit_step(RUN_ID, 1, write, lease)
            finally:
                store.close()
        text = path.read_text()
        after = text[text.index("'mark'") :].split("ReadyForQuery", 1)[1]
        lines = [line for line in after.splitlines() if line[:2] in ("F\t", "B\t") and "Terminate" not in line]
    return sum(1 for i, line in enumerate(lines) if line[0] == "F" and (i == 0 or lines[i - 1][0] == "B"))


class RawCommit:
    """The baseline: one autocommitted INSERT of ``size`` bytes over one connection."""

    def __init__(self, url: str, size: int):
        import psycopg

        self.conn = psycopg.connect(url, autocommit=True)
        self.conn.execute("CREATE TABLE IF NOT EXISTS raw_commit (id BIGSERIAL PRIMARY KEY, body TEXT NOT NULL)")
        self.body = "x" * size

    def step(self) -> None:
        self.conn.execute("INSERT INTO raw_commit(body) VALUES (%s)", (self.body,))

    def close(self) -> None:
        self.conn.close()


def timed(fn: Any, n: int) -> list[int]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        fn()
        out.append(time.perf_counter_ns() - t0)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").strip().splitlines()[0])
    parser.add_argument("--blocks", type=int, default=BLOCKS, help=f"interleaved blocks of {BLOCK} (default {BLOCKS})")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    args = parser.parse_args()
    sys.path.insert(0, str(HERE.parent / "tests"))
    fixtures = importlib.import_module("pg_fixtures")
    bin_dir = fixtures.find_pg_bin()
    if bin_dir is None:
        raise SystemExit(f"PostgreSQL server binaries were not found; install them: {fixtures.INSTALL_HINT}")
    server = fixtures.PgServer(bin_dir=bin_dir)
    server.start()
    try:
        server.create_session_database()
        writes = [step_write(i) for i in range(1, 501)]
        snapshot, payload = write_bytes(writes[0])
        bare_writes = [StepWrite(state=w.state, events=[]) for w in writes]
        sides: dict[str, Any] = {
            "commit_step": PgStep(server.new_schema(), writes),
            "commit_step, no events": PgStep(server.new_schema(), bare_writes),
            "floor (the step's statement, raw)": Floor(server.new_schema(), writes),
            "raw commit": RawCommit(server.new_schema(), snapshot + payload),
        }
        trips = round_trips(server.new_schema(), writes[0])
        samples: dict[str, list[int]] = {name: [] for name in sides}
        try:
            for side in sides.values():
                timed(side.step, 50)
            for _ in range(args.blocks):
                for name, side in sides.items():
                    samples[name] += timed(side.step, BLOCK)
        finally:
            for side in sides.values():
                side.close()
    finally:
        server.stop()
    medians = {name: statistics.median(s) / 1000 for name, s in samples.items()}
    means = {name: statistics.fmean(s) / 1000 for name, s in samples.items()}
    floor = medians["floor (the step's statement, raw)"]
    targets = [Target("median commit_step / raw commit", medians["commit_step"] / medians["raw commit"], TARGET)]
    ratios = {
        "commit_step / floor": medians["commit_step"] / floor,
        "floor / raw commit": floor / medians["raw commit"],
    }
    out = {
        "benchmark": "pg_step",
        "machine": machine(),
        "bytes": {"snapshot": snapshot, "events": payload},
        "median_us": medians,
        "mean_us": means,
        "targets": [t.as_dict() for t in targets],
        "ratios": {name: round(value, 2) for name, value in ratios.items()},
        "round_trips_per_step": trips,
    }
    rows = [[name, f"{medians[name]:.1f}", f"{means[name]:.1f}"] for name in sides]
    tables = [
        table(
            f"PostgreSQL (fsync off), {args.blocks} x {BLOCK} each, interleaved; {snapshot} B snapshot + {payload} B"
            " events",
            ("write", "median µs", "mean µs"),
            rows,
        ),
        targets_table(targets),
        table(
            "where the time goes",
            ("measure", "value"),
            [
                ["commit_step / floor (the store's own cost)", f"{ratios['commit_step / floor']:.2f}x"],
                ["floor / raw commit (what the database charges)", f"{ratios['floor / raw commit']:.2f}x"],
                ["round trips per commit_step", str(trips)],
            ],
        ),
    ]
    emit(args.json, out, tables)


if __name__ == "__main__":
    main()
