"""One durable step on PostgreSQL against one raw commit of the same size.

Starts a throwaway PostgreSQL server from the installed binaries (``tests/pg_fixtures.py``'s PgServer,
as bench_workers does; note its settings: ``fsync`` and ``synchronous_commit`` off, so both sides are
measured without a disk flush and the ratio is round trips and CPU, client and server). Interleaved
in blocks: ``PostgresStore.commit_step`` of the realistic step (benchkit.step_write: the blog run's
~1 KB snapshot and 3 events of ~200 B, a leased write as a worker makes it), and the baseline, one
autocommitted ``INSERT`` of a row of the same number of bytes into a one-table schema over one
psycopg connection. Target: median step / median raw commit <= 1.5x. Also printed: the same step
with no events (the run row's guarded update alone, in its transaction).
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from benchkit import RUN_ID, Target, emit, machine, run_state, step_write, table, targets_table, write_bytes
from stateward.core.events import EventType, NewEvent
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
            "raw commit": RawCommit(server.new_schema(), snapshot + payload),
        }
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
    targets = [Target("median commit_step / raw commit", medians["commit_step"] / medians["raw commit"], TARGET)]
    out = {
        "benchmark": "pg_step",
        "machine": machine(),
        "bytes": {"snapshot": snapshot, "events": payload},
        "median_us": medians,
        "mean_us": means,
        "targets": [t.as_dict() for t in targets],
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
    ]
    emit(args.json, out, tables)


if __name__ == "__main__":
    main()
