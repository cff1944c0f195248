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

What the server does for each side, so a miss is explained: its backend's CPU per step (from /proc,
over the timed blocks), and, for a further STEPS_INSPECTED steps of each side taken one side at a time,
the WAL it wrote per step (bytes, and records by relation and kind from ``pg_walinspect``: heap inserts,
HOT and non-HOT updates, and the index entries each index received).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchkit import RUN_ID, Target, emit, machine, run_state, step_write, table, targets_table, write_bytes
from stateward.core.errors import RunNotFoundError
from stateward.core.events import EventType, NewEvent
from stateward.store import _pg_direct
from stateward.store._pg_sql import step_statement
from stateward.store.base import PayloadLimits, event_batch
from stateward.store.outbox import notices_of
from stateward.store.parts import split_state
from stateward.store.postgres import PostgresStore
from stateward.store.records import Lease, StepWrite

HERE = Path(__file__).resolve().parent
BLOCK = 100
BLOCKS = 20
TARGET = 1.5
STEPS_INSPECTED = 200
STEP = "commit_step"
BARE = "commit_step, no events"
FLOOR = "floor (the step's statement, raw)"
DIRECT = "floor, prepared through libpq"
LENT = "direct floor + the store's connection"
SERIALIZED = "direct floor + connection + serializing"
RAW = "raw commit"
RAW_DIRECT = "raw commit, prepared through libpq"
TICK = os.sysconf("SC_CLK_TCK")


def backend_cpu_s(pids: list[int]) -> float:
    """CPU seconds the server backends ``pids`` have used (utime + stime from /proc; the server may run as
    another user, /proc/PID/stat is readable by all)."""
    ticks = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])
    return ticks / TICK


class PgStep:
    """A PostgresStore with one leased run, committing pre-built writes in order."""

    def __init__(self, url: str, writes: list[StepWrite]):
        self.pids: list[int] = []
        self.store = PostgresStore(url, configure=lambda conn: self.pids.append(conn.info.backend_pid))
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
    """The step's one statement over one connection, every value serialized before the clock starts: through
    psycopg's cursor (``RawCursor``, $n placeholders), or with ``direct`` prepared and sent through libpq as the
    store sends it (store/_pg_direct.py)."""

    def __init__(self, url: str, writes: list[StepWrite], *, direct: bool = False):
        import psycopg

        store = PostgresStore(url)  # creates the schema and the run, then steps aside
        store.create_run(run_state(0), [NewEvent(type=EventType.RUN_STARTED, payload={"goal": "bench"})])
        self.seq = store.last_seq(RUN_ID)
        lease = store.acquire_lease(RUN_ID, "bench", 3600)
        store.close()
        self.conn = psycopg.connect(url, autocommit=True)
        self.pids = [self.conn.info.backend_pid]
        self.cursor = psycopg.RawCursor(self.conn)  # the statement's $n placeholders as the store sends them
        self.statement = step_statement(leased=True, clear_control=False, release=False, events=len(writes[0].events))
        self.params = [self._params(w, lease) for w in writes]
        self.events = len(writes[0].events)  # every write has as many
        self.index = 0
        self.direct = direct
        if direct:
            _pg_direct.prepare(self.conn)

    @staticmethod
    def _params(write: StepWrite, lease: Lease) -> dict[str, Any]:
        return {
            "status": write.state.status.value,
            "reason": None,
            "snapshot": write.state.model_dump_json(),
            "parts": None,
            "run_id": RUN_ID,
            "not_before": None,
            "lease_version": lease.version,
            "owner": lease.owner,
            "version": lease.version,
            "batch": event_batch(RUN_ID, write.events, PayloadLimits()) if write.events else None,
            "count": len(write.events),
        }

    def step(self) -> None:
        params = self.params[self.index % len(self.params)]
        params.update(expected=self.seq, new_seq=self.seq + self.events)
        if self.direct:
            assert _pg_direct.run(self.conn, self.statement, self.statement.values(params)) == 1
        else:
            self.cursor.execute(self.statement.sql, self.statement.values(params)).fetchone()
        self.seq += self.events
        self.index += 1

    def close(self) -> None:
        self.conn.close()


class Layered:
    """The direct floor's statement with the store's own layers added: the connection lent as commit_step
    borrows it (``PostgresStore``'s stack), and with ``serialize`` also the state and
    the events serialized in the timed step, as commit_step does. Differences between these sides and the
    floor, interleaved with it, are what each layer costs where it runs (after a wait, on a cold CPU)."""

    def __init__(self, url: str, writes: list[StepWrite], *, serialize: bool):
        self.pids: list[int] = []
        self.store = PostgresStore(url, configure=lambda conn: self.pids.append(conn.info.backend_pid))
        self.store.create_run(run_state(0), [NewEvent(type=EventType.RUN_STARTED, payload={"goal": "bench"})])
        self.seq = self.store.last_seq(RUN_ID)
        lease = self.store.acquire_lease(RUN_ID, "bench", 3600)
        self.writes = writes
        self.serialize = serialize
        self.statement = step_statement(leased=True, clear_control=False, release=False, events=len(writes[0].events))
        self.params = [Floor._params(w, lease) for w in writes]
        self.events = len(writes[0].events)
        self.limits = PayloadLimits()
        self.index = 0

    def step(self) -> None:
        i = self.index % len(self.params)
        params = self.params[i]
        if self.serialize:
            write = self.writes[i]
            params["snapshot"] = split_state(write.state).snapshot
            params["batch"] = event_batch(RUN_ID, write.events, self.limits)
        params.update(expected=self.seq, new_seq=self.seq + self.events)
        with self.store._lent() as lent:
            assert _pg_direct.run(lent.conn, self.statement, self.statement.values(params)) == 1
        self.seq += self.events
        self.index += 1

    def close(self) -> None:
        self.store.close()


def client_pieces(store: PostgresStore, writes: list[StepWrite], loops: int = 2000) -> dict[str, float]:
    """The store's client-side work per step, each piece alone in a warm loop (best of 5, µs): what the
    pieces cost on a CPU that has not just waited; the interleaved sides show what they cost in place."""
    write, limits = writes[0], store.limits

    def borrow() -> None:
        with store._lent():
            pass

    pieces: dict[str, Callable[[], object]] = {
        "the store's connection (from its stack, one poll)": borrow,
        "the snapshot (split_state, size check)": lambda: limits.check_snapshot_parts(
            RUN_ID, split_state(write.state).texts
        ),
        "the events (event_batch)": lambda: event_batch(RUN_ID, write.events, limits),
        "the notices it may cause (notices_of)": lambda: notices_of(write.state, 1, write.events),
    }
    out = {}
    for name, fn in pieces.items():
        best = []
        for _ in range(5):
            t0 = time.perf_counter_ns()
            for _ in range(loops):
                fn()
            best.append((time.perf_counter_ns() - t0) / loops / 1000)
        out[name] = min(best)
    return out


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

    def __init__(self, url: str, size: int, *, direct: bool = False):
        import psycopg

        self.conn = psycopg.connect(url, autocommit=True)
        self.pids = [self.conn.info.backend_pid]
        self.conn.execute("CREATE TABLE IF NOT EXISTS raw_commit (id BIGSERIAL PRIMARY KEY, body TEXT NOT NULL)")
        self.body = "x" * size
        self.direct = direct
        if direct:  # prepared, and sent through libpq as the store sends a step
            self.conn.pgconn.prepare(b"raw_commit", b"INSERT INTO raw_commit(body) VALUES ($1)")

    def step(self) -> None:
        if self.direct:
            self.conn.pgconn.exec_prepared(b"raw_commit", [self.body.encode()])
        else:
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


@dataclass
class ServerWork:
    """What the server did for one side, per step: its backend's CPU, the WAL it wrote, by record."""

    cpu_s: float = 0.0
    steps: int = 0
    wal_bytes: float | None = None
    records: dict[str, float] | None = None  # "relation Rmgr KIND" -> records per step
    commits: float = 0.0
    inspected: bool = False  # its WAL read back (the layered sides send the floor's statement: not read)

    @property
    def cpu_us(self) -> float:
        return self.cpu_s * 1e6 / max(1, self.steps)

    def of(self, rmgr: str) -> dict[str, float]:
        """Records of one resource manager ("Heap", "Btree"...) per step, by "relation KIND"."""
        out: dict[str, float] = {}
        for key, n in (self.records or {}).items():
            name, manager, kind = key.rsplit(" ", 2)
            if manager.startswith(rmgr):
                out[f"{name} {kind}"] = n
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "backend_cpu_us_per_step": round(self.cpu_us, 1),
            "wal_bytes_per_step": None if self.wal_bytes is None else round(self.wal_bytes),
            "wal_records_per_step": self.records,
            "commit_records_per_step": self.commits,
        }


_RELATIONS = """SELECT c.relfilenode::text, c.relname
    FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
    WHERE n.nspname = %(schema)s AND c.relfilenode <> 0
    UNION ALL SELECT t.relfilenode::text, c.relname || '(TOAST)' FROM pg_class AS c
        JOIN pg_namespace AS n ON n.oid = c.relnamespace JOIN pg_class AS t ON t.oid = c.reltoastrelid
    WHERE n.nspname = %(schema)s
    UNION ALL SELECT x.relfilenode::text, c.relname || '(TOAST index)' FROM pg_class AS c
        JOIN pg_namespace AS n ON n.oid = c.relnamespace JOIN pg_index AS i ON i.indrelid = c.reltoastrelid
        JOIN pg_class AS x ON x.oid = i.indexrelid
    WHERE n.nspname = %(schema)s"""


def inspect_wal(db_url: str, schema: str, step: Callable[[], None], n: int, work: ServerWork) -> None:
    """Take ``n`` steps alone and read back the WAL they wrote: bytes (LSN distance) and, where the server
    has ``pg_walinspect`` (PostgreSQL 15+ contrib), its records by relation of ``schema`` and kind."""
    import re

    import psycopg

    with psycopg.connect(db_url, autocommit=True) as conn:
        try:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
            inspectable = True
        except psycopg.Error:
            inspectable = False
        start = conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]  # type: ignore[index]
        for _ in range(n):
            step()
        end = conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]  # type: ignore[index]
        work.wal_bytes = float(conn.execute("SELECT pg_wal_lsn_diff(%s, %s)", (end, start)).fetchone()[0]) / n  # type: ignore[index]
        if not inspectable:
            return
        deadline = time.monotonic() + 10
        while not conn.execute("SELECT pg_current_wal_flush_lsn() >= %s", (end,)).fetchone()[0]:  # type: ignore[index]
            if time.monotonic() > deadline:
                return
            time.sleep(0.05)
        names: dict[str, str] = dict(conn.execute(_RELATIONS, {"schema": schema}).fetchall())
        counts: Counter[str] = Counter()
        commits = 0
        records = conn.execute(
            "SELECT resource_manager, record_type, block_ref FROM pg_get_wal_records_info(%s, %s)", (start, end)
        )
        for manager, kind, block_ref in records:
            if manager == "Transaction" and kind == "COMMIT":
                commits += 1
            found = re.search(r"rel \d+/\d+/(\d+)", block_ref or "")
            if found and found[1] in names:
                counts[f"{names[found[1]]} {manager} {kind}"] += 1
    work.records = {key: round(c / n, 2) for key, c in sorted(counts.items())}
    work.commits = round(commits / n, 2)


def schema_of(url: str) -> str:
    """The schema a ``PgServer.new_schema`` URL works in."""
    return url.rsplit("%3D", 1)[1]


def measure(sides: dict[str, Any], blocks: int) -> tuple[dict[str, list[int]], dict[str, ServerWork]]:
    """Interleaved timed blocks of every side, and each side's backend CPU over them."""
    samples: dict[str, list[int]] = {name: [] for name in sides}
    work = {name: ServerWork() for name in sides}
    for side in sides.values():
        timed(side.step, 50)
    for _ in range(blocks):
        for name, side in sides.items():
            cpu0 = backend_cpu_s(side.pids)
            samples[name] += timed(side.step, BLOCK)
            work[name].cpu_s += backend_cpu_s(side.pids) - cpu0
            work[name].steps += BLOCK
    return samples, work


def per_step(work: ServerWork, rmgr: str) -> str:
    parts = work.of(rmgr)
    if not parts:
        return "-" if work.records is not None else "?"
    return ", ".join(f"{name} {n:g}" for name, n in parts.items())


def server_table(work: dict[str, ServerWork], raw: str) -> str:
    rows = []
    for name, w in work.items():
        indexes = sum(w.of("Btree").values())
        cpu = f"{w.cpu_us:.0f} ({w.cpu_us / max(1e-9, work[raw].cpu_us):.2f}x)"
        if not w.inspected:
            rows.append([name, cpu, "as the raw commit" if name == RAW_DIRECT else "as the floor", "", ""])
            continue
        rows.append(
            [
                name,
                cpu,
                "?" if w.wal_bytes is None else f"{w.wal_bytes:.0f}",
                per_step(w, "Heap"),
                f"{indexes:g}: {per_step(w, 'Btree')}" if w.records is not None else "?",
            ]
        )
    return table(
        f"what the server did per step (backend CPU over the timed blocks; WAL of {STEPS_INSPECTED} more steps"
        " of each side alone, pg_walinspect)",
        ("write", "backend CPU µs (vs raw)", "WAL bytes", "heap records", "index entries"),
        rows,
    )


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
        urls = {name: server.new_schema() for name in (STEP, BARE, FLOOR, DIRECT, LENT, SERIALIZED, RAW, RAW_DIRECT)}
        sides: dict[str, Any] = {
            STEP: PgStep(urls[STEP], writes),
            BARE: PgStep(urls[BARE], bare_writes),
            FLOOR: Floor(urls[FLOOR], writes),
            DIRECT: Floor(urls[DIRECT], writes, direct=True),
            LENT: Layered(urls[LENT], writes, serialize=False),
            SERIALIZED: Layered(urls[SERIALIZED], writes, serialize=True),
            RAW: RawCommit(urls[RAW], snapshot + payload),
            RAW_DIRECT: RawCommit(urls[RAW_DIRECT], snapshot + payload, direct=True),
        }
        trips = round_trips(server.new_schema(), writes[0])
        try:
            samples, work = measure(sides, args.blocks)
            for name in (STEP, BARE, FLOOR, RAW):  # the other sides send the floor's or the raw commit's statement
                inspect_wal(server.url, schema_of(urls[name]), sides[name].step, STEPS_INSPECTED, work[name])
                work[name].inspected = True
            pieces = client_pieces(sides[STEP].store, writes)
        finally:
            for side in sides.values():
                side.close()
    finally:
        server.stop()
    report(args.json, args.blocks, samples, work, (snapshot, payload), trips, pieces)


def report(
    as_json: bool,
    blocks: int,
    samples: dict[str, list[int]],
    work: dict[str, ServerWork],
    sizes: tuple[int, int],
    trips: int,
    pieces: dict[str, float],
) -> None:
    snapshot, payload = sizes
    medians = {name: statistics.median(s) / 1000 for name, s in samples.items()}
    means = {name: statistics.fmean(s) / 1000 for name, s in samples.items()}
    floor, raw = medians[DIRECT], medians[RAW]
    targets = [Target("median commit_step / raw commit", medians[STEP] / raw, TARGET)]
    ratios = {
        "commit_step / floor": medians[STEP] / floor,
        "floor / raw commit": floor / raw,
        "commit_step / floor through psycopg's cursor": medians[STEP] / medians[FLOOR],
        "commit_step / raw commit prepared through libpq": medians[STEP] / medians[RAW_DIRECT],
        "floor / raw commit, both prepared through libpq": floor / medians[RAW_DIRECT],
    }
    layers = {  # each layer of the store, as the difference of two interleaved sides (µs per step)
        "the store's connection (its stack, one poll)": medians[LENT] - floor,
        "serializing the state and the events": medians[SERIALIZED] - medians[LENT],
        "the rest of commit_step (notices, parameters, checks)": medians[STEP] - medians[SERIALIZED],
    }
    out = {
        "benchmark": "pg_step",
        "machine": machine(),
        "bytes": {"snapshot": snapshot, "events": payload},
        "median_us": medians,
        "mean_us": means,
        "targets": [t.as_dict() for t in targets],
        "ratios": {name: round(value, 2) for name, value in ratios.items()},
        "client_layers_us": {name: round(v, 1) for name, v in layers.items()},
        "client_pieces_warm_us": {name: round(v, 1) for name, v in pieces.items()},
        "round_trips_per_step": trips,
        "server_per_step": {name: w.as_dict() for name, w in work.items()},
    }
    rows = [[name, f"{medians[name]:.1f}", f"{means[name]:.1f}"] for name in samples]
    tables = [
        table(
            f"PostgreSQL (fsync off), {blocks} x {BLOCK} each, interleaved; {snapshot} B snapshot + {payload} B events",
            ("write", "median µs", "mean µs"),
            rows,
        ),
        targets_table(targets),
        table(
            "where the time goes",
            ("measure", "value"),
            [
                ["commit_step / floor through libpq (the store's own cost)", f"{ratios['commit_step / floor']:.2f}x"],
                ["floor through libpq / raw commit", f"{ratios['floor / raw commit']:.2f}x"],
                *[[name, f"{value:.2f}x"] for name, value in list(ratios.items())[2:]],
                ["round trips per commit_step", str(trips)],
            ],
        ),
        table(
            "the store's client side per step: each layer in place (difference of interleaved medians), and its"
            " pieces alone in a warm loop",
            ("part", "in place µs", "share of step - floor"),
            [
                *[[name, f"{v:.1f}", f"{v / max(1e-9, medians[STEP] - floor):.0%}"] for name, v in layers.items()],
                *[[f"  alone, warm: {name}", f"{v:.1f}", ""] for name, v in pieces.items()],
            ],
        ),
        server_table(work, RAW),
    ]
    emit(as_json, out, tables)


if __name__ == "__main__":
    main()
