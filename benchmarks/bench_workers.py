"""Worker processes on a real PostgreSQL server: runs/s with 1, 2 and 4 workers, and takeover after a SIGKILL.

The server is started from the installed binaries (``tests/pg_fixtures.py``: a throwaway cluster, trust
auth, durability off) and stopped at the end; every measurement works in a fresh schema.

Throughput: RUNS runs of a workflow agent (STEPS tool nodes, each a side-effect-free tool that sleeps
SLEEP_MS like an I/O call, then a finish node) are submitted, then W ``stateward worker`` processes
(``--concurrency 1 --idle-exit 1``) are started; runs/s = RUNS / (worker start -> last run COMPLETED).
"2 forked" and "4 forked" are the same runs driven by one ``stateward worker --processes W`` (it imports
once and forks W workers). Rounds alternate the order (1, 2, 4, 2 forked, 4 forked, then back); medians of
the rounds; ratios are against 1 worker in the same run. "steady" leaves out the workers' start-up: first
committed step -> last run.
Start-up per worker: the CPU of an idle worker process (start, open the store, one empty claim, exit;
median of 5) and the modules it imports (``-X importtime``); with W workers on C CPUs the first step
cannot come before about W x that / C (printed as the start-up bound beside the first step's time); an idle
forked fleet of 4 (median of 3) is measured the same way, all its processes' CPU together.

Takeover: two workers with ``--lease-ttl 1.5 --heartbeat 0.5``; a one-node run whose tool blocks 3 s is
claimed, its worker is SIGKILLed mid-tool after a random delay, and the time until the other worker holds
the run's lease is taken. It cannot beat the lease time left at the kill (at most the TTL).

The workers build the agent by name from ``bench_workers:AGENTS`` (``STATEWARD_AGENTS``, ``PYTHONPATH=benchmarks``).
"""

from __future__ import annotations

import importlib
import itertools
import json
import os
import random
import re
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar
from urllib.parse import urlsplit

from benchkit import machine, parse_args, table
from stateward.controllers.workflow import FinishNode, ToolNode, WorkflowController
from stateward.core.budget import Budget
from stateward.core.state import AgentRef
from stateward.runtime.agent import Agent
from stateward.runtime.agent_registry import AgentRegistry
from stateward.runtime.runtime import Runtime
from stateward.store.records import Lease
from stateward.tools.registry import ToolRegistry
from stateward.tools.spec import tool

HERE = Path(__file__).resolve().parent
NAME = "bench-workers"
GOAL = "Call the service once per node, then finish."
RUNS = 60
STEPS = 6
SLEEP_MS = 20
WORKER_COUNTS = (1, 2, 4)
FORKED_COUNTS = (2, 4)  # also as one `stateward worker --processes W`: one import, W forked workers
ROUNDS = 3
WARMUP_RUNS = 4
IDLE_WORKERS = 5
IDLE_EXIT_S = "0.01"  # the idle worker: one empty claim, then exit
TAKEOVERS = 7
TTL_S = 1.5
HEARTBEAT_S = 0.5
BLOCK_MS = 3000
KILL_DELAY_S = (0.2, 1.2)  # after the claim; the tool is still blocking when the worker dies
SEED = 7
POLL_S = 0.02
LEASE_POLL_S = 0.01
TIMEOUT_S = 120.0
RUNNABLE_OR_DONE = ("RUNNING", "COMPLETED")
READY = "slot(s) on"  # the worker's start-up line: its store is open, it is about to claim
_STATS = re.compile(r"worker stopped: claimed=(\d+) stale_leases=(\d+) errors=(\d+)")
_SUPERVISOR = re.compile(r"worker supervisor (\d+: \d+ processes on |stopped: processes=\d+ replaced=0 exit=0$)")
_IMPORT_LINE = re.compile(r"import time:\s+\d+ \|")
_SCRIPT = Path(sys.executable).parent / "stateward"
CLI = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "stateward.cli.main"]
T = TypeVar("T")


# -- the agent the workers drive -----------------------------------------------------------------------
def build_agent(steps: int = STEPS, sleep_ms: int = SLEEP_MS) -> Agent:
    """``steps`` tool nodes calling a side-effect-free tool that sleeps ``sleep_ms`` (I/O: the GIL is free)."""

    @tool(description="Wait like a remote call, then answer; no side effect.", timeout_s=30)
    def io_call(node: int) -> dict[str, int]:
        time.sleep(sleep_ms / 1000)
        return {"node": node}

    names = [f"call_{i}" for i in range(steps)]
    nodes: list[ToolNode | FinishNode] = [
        ToolNode(name, "io_call", {"node": i}, next=names[i + 1] if i + 1 < steps else "done")
        for i, name in enumerate(names)
    ]
    nodes.append(FinishNode("done", "all nodes called"))
    return Agent(
        name="bench-workers",
        controller=WorkflowController(nodes),
        tools=ToolRegistry([io_call]),
        ref=AgentRef(name=NAME, params={"steps": steps, "sleep_ms": sleep_ms}),
        budget=Budget(max_steps=steps + 5),
    )


AGENTS = AgentRegistry()
AGENTS.register(NAME, build_agent)


# -- the server ------------------------------------------------------------------------------------------
class Server(Protocol):
    """What this benchmark uses of ``tests/pg_fixtures.py``'s PgServer."""

    url: str
    admin_url: str

    def start(self) -> None: ...
    def stop(self) -> None: ...
    def create_session_database(self) -> None: ...
    def new_schema(self) -> str: ...
    def drop_schema(self, url: str) -> None: ...


def pg_server() -> Server:
    """A stopped PgServer on the newest installed binaries (the tests' fixture module, imported by path)."""
    sys.path.insert(0, str(HERE.parent / "tests"))
    fixtures = importlib.import_module("pg_fixtures")
    bin_dir = fixtures.find_pg_bin()
    if bin_dir is None:
        raise SystemExit(f"PostgreSQL server binaries were not found; install them: {fixtures.INSTALL_HINT}")
    server: Server = fixtures.PgServer(bin_dir=bin_dir)
    return server


class ServerCpu:
    """CPU seconds used by the server: its postmaster and live backends, plus exited backends (reaped into
    the postmaster's children times), read from /proc. The postmaster is found by its ``-p PORT``."""

    TICK = os.sysconf("SC_CLK_TCK")

    def __init__(self, port: int):
        self.postmaster = next((pid for pid, argv in _processes() if _is_postmaster(argv, port)), None)

    def seconds(self) -> float | None:
        if self.postmaster is None:
            return None
        ticks = 0
        for pid in _pids():
            fields = _stat(pid)
            if fields is None:
                continue
            if pid == self.postmaster:
                ticks += sum(fields[11:15])  # utime, stime, cutime, cstime
            elif fields[1] == self.postmaster:
                ticks += fields[11] + fields[12]
        return ticks / self.TICK


def _pids() -> list[int]:
    return [int(d.name) for d in Path("/proc").iterdir() if d.name.isdigit()]


def _processes() -> Iterator[tuple[int, list[str]]]:
    for pid in _pids():
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        yield pid, argv


def _is_postmaster(argv: list[str], port: int) -> bool:
    return argv[0].endswith("postgres") and any(a == "-p" and b == str(port) for a, b in itertools.pairwise(argv))


def _stat(pid: int) -> list[int] | None:
    """The numeric fields of /proc/PID/stat after the command name (index 1 is the parent pid)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return [int(f) if f.lstrip("-").isdigit() else 0 for f in text.rsplit(")", 1)[1].split()]


def server_version(server: Server) -> str:
    import psycopg

    with psycopg.connect(server.admin_url) as conn:
        row = conn.execute("SHOW server_version").fetchone()
    return str(row[0]).split()[0] if row else "?"


# -- worker processes ------------------------------------------------------------------------------------
@dataclass
class WorkerProc:
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def ready(self) -> bool:
        return READY in self.text()

    def stats(self) -> tuple[int, int, int] | None:
        """(claimed, stale_leases, errors) from the worker's exit line, or None if it did not exit cleanly."""
        match = _STATS.search(self.text())
        return None if match is None else (int(match[1]), int(match[2]), int(match[3]))

    def all_stats(self) -> list[tuple[int, int, int]]:
        """``stats`` of every worker that logged here: one, or each child of a ``--processes`` supervisor."""
        return [(int(m[1]), int(m[2]), int(m[3])) for m in _STATS.finditer(self.text())]

    def odd_lines(self) -> list[str]:
        """Log lines other than the start and stop lines: warnings, errors, tracebacks."""
        return [
            ln
            for ln in self.text().splitlines()
            if ln.strip() and READY not in ln and not _STATS.search(ln) and not _SUPERVISOR.match(ln)
        ]


class Fleet:
    """Every worker process this benchmark starts; ``close`` ends the ones still running."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.procs: list[WorkerProc] = []
        env = {k: v for k, v in os.environ.items() if k not in {"PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX"}}
        env["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")  # as an installed package has .pyc files
        env["PYTHONPATH"] = os.pathsep.join([str(HERE), *filter(None, [env.get("PYTHONPATH")])])
        env["STATEWARD_AGENTS"] = "bench_workers:AGENTS"
        self.env = env

    def spawn(self, url: str, *flags: str, env: dict[str, str] | None = None) -> WorkerProc:
        log = self.tmp / f"worker-{len(self.procs)}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [*CLI, "worker", "--db", url, "--concurrency", "1", *flags],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**self.env, **(env or {})},
            )
        worker = WorkerProc(proc, log)
        self.procs.append(worker)
        return worker

    @staticmethod
    def kill(worker: WorkerProc) -> None:
        os.kill(worker.pid, signal.SIGKILL)
        worker.proc.wait()

    @staticmethod
    def wait_exit(workers: Sequence[WorkerProc], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for w in workers:
            try:
                w.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                w.proc.kill()
                w.proc.wait()

    def close(self) -> None:
        live = [w for w in self.procs if w.proc.poll() is None]
        for w in live:
            w.proc.send_signal(signal.SIGTERM)
        self.wait_exit(live, 10.0)


def wait_for(probe: Callable[[], T | None], what: str, timeout_s: float = TIMEOUT_S, every: float = POLL_S) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(every)


def owner_pid(owner: str) -> int:
    """The process id in a worker's lease owner ``host:pid:hex/slot`` (see ``runtime.default_owner``)."""
    return int(owner.rsplit("/", 1)[0].split(":")[-2])


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@contextmanager
def schema(server: Server) -> Iterator[tuple[str, Runtime]]:
    url = server.new_schema()
    runtime = Runtime.open(url)
    try:
        yield url, runtime
    finally:
        runtime.close()


# -- 1. runs completed per second ------------------------------------------------------------------------
def throughput(
    server: Server, pg_cpu: ServerCpu, fleet: Fleet, workers: int, runs: int, forked: bool = False
) -> dict[str, Any]:
    """Submit ``runs`` runs, start ``workers`` workers (``forked``: as one ``--processes`` command), time until
    every run is COMPLETED."""
    with schema(server) as (url, runtime):
        agent = build_agent()
        for _ in range(runs):
            runtime.submit(agent, GOAL)
        submitted = {r.run_id: r.last_seq for r in runtime.store.list_runs(limit=runs + 10)}
        cpu0, pg0, own0 = children_cpu(), pg_cpu.seconds(), time.process_time()
        t0 = time.perf_counter()
        if forked:
            procs = [fleet.spawn(url, "--idle-exit", "1", "--processes", str(workers))]
        else:
            procs = [fleet.spawn(url, "--idle-exit", "1") for _ in range(workers)]
        first_step: float | None = None
        deadline = t0 + TIMEOUT_S
        while True:
            rows = runtime.store.list_runs(limit=runs + 10)
            now = time.perf_counter()
            if first_step is None and any(r.last_seq > submitted[r.run_id] for r in rows):
                first_step = now
            failed = [f"{r.run_id} {r.status}: {r.terminal_reason}" for r in rows if r.status not in RUNNABLE_OR_DONE]
            if failed:
                raise RuntimeError(f"runs did not complete: {failed[:3]}")
            if sum(r.status == "COMPLETED" for r in rows) == runs:
                break
            if now > deadline or all(w.proc.poll() is not None for w in procs):
                logs = "\n".join(w.text()[-800:] for w in procs)
                raise RuntimeError(f"{workers} worker(s) did not complete {runs} runs:\n{logs}")
            time.sleep(POLL_S)
        elapsed = now - t0
        poller = time.process_time() - own0
        Fleet.wait_exit(procs, 15.0)  # --idle-exit 1: they leave about a second after the last run
        cpu, pg1 = children_cpu() - cpu0, pg_cpu.seconds()
        until_exit = time.perf_counter() - t0
    pg = None if pg0 is None or pg1 is None else pg1 - pg0
    stats = [s for w in procs for s in w.all_stats()]
    return {
        "workers": workers,
        "runs": runs,
        "elapsed_s": elapsed,
        "first_step_s": (first_step or now) - t0,
        "runs_per_s": runs / elapsed,
        "steady_runs_per_s": runs / max(1e-9, now - (first_step or t0)),
        "worker_cpu_ms_per_run": cpu * 1000 / runs,
        "server_cpu_ms_per_run": None if pg is None else pg * 1000 / runs,
        "cpus_busy": None if pg is None else (cpu + pg) / until_exit,
        "poller_cpus": poller / elapsed,
        "claims": [s[0] for s in stats] + [None] * (workers - len(stats)),  # None: a worker that did not stop cleanly
        "stale_leases": sum(s[1] for s in stats),
        "errors": sum(s[2] for s in stats),
        "unclean_exits": sum(1 for w in procs if w.proc.returncode != 0) + max(0, workers - len(stats)),
        "log_lines": [ln for w in procs for ln in w.odd_lines()],
    }


def idle_worker(
    server: Server, fleet: Fleet, env: dict[str, str] | None = None, processes: int = 1
) -> tuple[float, float, WorkerProc]:
    """(CPU s, wall s, the process) of a worker that starts, opens the store, finds nothing to claim and exits
    (``processes`` > 1: a supervisor that forks that many such workers; the CPU of all of them)."""
    with schema(server) as (url, _):
        cpu0, t0 = children_cpu(), time.perf_counter()
        worker = fleet.spawn(url, "--idle-exit", IDLE_EXIT_S, "--processes", str(processes), env=env)
        Fleet.wait_exit([worker], 30.0)
        cpu, wall = children_cpu() - cpu0, time.perf_counter() - t0
    if worker.proc.returncode != 0 or worker.all_stats() != [(0, 0, 0)] * processes:
        raise RuntimeError(f"the idle worker did not start, claim nothing and exit cleanly:\n{worker.text()[-800:]}")
    return cpu, wall, worker


def modules_imported(server: Server, fleet: Fleet) -> int:
    """How many modules an idle worker imports (``python -X importtime`` lists each one once)."""
    _, _, worker = idle_worker(server, fleet, env={"PYTHONPROFILEIMPORTTIME": "1"})
    return sum(1 for line in worker.text().splitlines() if _IMPORT_LINE.match(line))


Layout = tuple[int, bool]  # (workers, forked from one `--processes` supervisor)
LAYOUTS: tuple[Layout, ...] = (*((w, False) for w in WORKER_COUNTS), *((w, True) for w in FORKED_COUNTS))


def label(layout: Layout) -> str:
    workers, forked = layout
    return f"{workers} forked" if forked else str(workers)


def measure_throughput(server: Server, fleet: Fleet) -> tuple[dict[str, list[dict[str, Any]]], dict[str, Any]]:
    """Per layout, one measurement per round; and the cost of an idle worker process (median of 5) and of an
    idle forked fleet of the most workers (median of 3)."""
    pg_cpu = ServerCpu(urlsplit(server.admin_url).port or 5432)
    throughput(server, pg_cpu, fleet, 1, WARMUP_RUNS)  # warm-up: bytecode cache, server caches
    idle = [idle_worker(server, fleet) for _ in range(IDLE_WORKERS)]
    most = max(FORKED_COUNTS)
    idle_fleet = [idle_worker(server, fleet, processes=most)[0] for _ in range(3)]
    startup = {
        "cpu_ms": round(statistics.median(c for c, _, _ in idle) * 1000),
        "cpu_ms_all": [round(c * 1000) for c, _, _ in idle],
        "wall_ms": round(statistics.median(w for _, w, _ in idle) * 1000),
        "modules": modules_imported(server, fleet),
        "forked_processes": most,
        "forked_cpu_ms": round(statistics.median(idle_fleet) * 1000),
        "forked_cpu_ms_all": [round(c * 1000) for c in idle_fleet],
    }
    out: dict[str, list[dict[str, Any]]] = {label(k): [] for k in LAYOUTS}
    for r in range(ROUNDS):
        for workers, forked in LAYOUTS if r % 2 == 0 else reversed(LAYOUTS):
            out[label((workers, forked))].append(throughput(server, pg_cpu, fleet, workers, RUNS, forked))
    return out, startup


# -- 2. takeover after a kill ----------------------------------------------------------------------------
def takeover_once(url: str, runtime: Runtime, fleet: Fleet, live: list[WorkerProc], delay_s: float) -> dict[str, Any]:
    """Submit a blocking run, SIGKILL the worker that claimed it ``delay_s`` later, time the takeover."""
    run_id = runtime.submit(build_agent(steps=1, sleep_ms=BLOCK_MS), GOAL).run_id
    claimed = wait_for(lambda: runtime.store.lease_of(run_id), "a worker to claim the run", every=LEASE_POLL_S)
    victim = next((w for w in live if w.pid == owner_pid(claimed.owner)), None)
    if victim is None:
        raise RuntimeError(f"run {run_id} is leased by {claimed.owner}, not by one of this benchmark's workers")
    time.sleep(delay_s)
    wall_kill, t_kill = time.time(), time.perf_counter()
    fleet.kill(victim)
    live.remove(victim)
    left = runtime.store.lease_of(run_id)  # as the dead worker left it: its last renewal
    if left is None or owner_pid(left.owner) != victim.pid:
        raise RuntimeError(f"run {run_id} was not leased by the killed worker {victim.pid} at the kill: {left}")

    def taken() -> Lease | None:
        lease = runtime.store.lease_of(run_id)
        return lease if lease is not None and owner_pid(lease.owner) != victim.pid else None

    new = wait_for(taken, "another worker to take the run over", every=LEASE_POLL_S)
    takeover_s = time.perf_counter() - t_kill
    live.append(fleet.spawn(url, *TAKEOVER_FLAGS))  # back to two workers, once the takeover is seen
    status = wait_for(lambda: None if (s := runtime.get(run_id).status.value) == "RUNNING" else s, "the run to finish")
    wait_for(lambda: True if all(w.ready() for w in live) else None, "the replacement worker")
    remaining = left.expires_at - wall_kill
    return {
        "kill_delay_s": delay_s,
        "lease_left_at_kill_s": remaining,
        "takeover_s": takeover_s,
        "claim_lag_s": takeover_s - remaining,
        "new_owner": new.owner,
        "final_status": status,
        "fencing_tokens": [left.version, new.version],  # the dead worker's, the new owner's
    }


TAKEOVER_FLAGS = ("--lease-ttl", str(TTL_S), "--heartbeat", str(HEARTBEAT_S))


def measure_takeover(server: Server, fleet: Fleet) -> dict[str, Any]:
    rng = random.Random(SEED)
    first = len(fleet.procs)
    with schema(server) as (url, runtime):
        live = [fleet.spawn(url, *TAKEOVER_FLAGS) for _ in range(2)]
        wait_for(lambda: True if all(w.ready() for w in live) else None, "two workers to start")
        samples = [takeover_once(url, runtime, fleet, live, rng.uniform(*KILL_DELAY_S)) for _ in range(TAKEOVERS)]
        for w in live:
            w.proc.send_signal(signal.SIGTERM)
        Fleet.wait_exit(live, 10.0)
        logs = [ln for w in fleet.procs[first:] for ln in w.odd_lines()]
    return {"samples": samples, "log_lines": logs}


# -- the report ------------------------------------------------------------------------------------------
def p90(values: Sequence[float]) -> float:
    return statistics.quantiles(values, n=10, method="inclusive")[8] if len(values) > 1 else values[0]


def startup_bound_s(startup: dict[str, Any], layout: Layout, cpus: int | None) -> float:
    """The earliest first step if start-up is CPU-bound: W processes each needing an idle worker's CPU share the
    CPUs; forked, one import then W children (the idle fleet's CPU, the import alone at least)."""
    workers, forked = layout
    if forked:
        return max(startup["cpu_ms"], startup["forked_cpu_ms"] / (cpus or 1)) / 1000
    return startup["cpu_ms"] / 1000 * max(1.0, workers / (cpus or 1))


def _median_or_none(values: list[float | None], digits: int) -> float | None:
    known = [v for v in values if v is not None]
    return round(statistics.median(known), digits) if known else None


def summarize(
    tp: dict[str, list[dict[str, Any]]], startup: dict[str, Any], to: dict[str, Any], info: dict[str, Any]
) -> dict[str, Any]:
    base = statistics.median(m["runs_per_s"] for m in tp[label(LAYOUTS[0])])
    base_steady = statistics.median(m["steady_runs_per_s"] for m in tp[label(LAYOUTS[0])])
    rows = {}
    for layout in LAYOUTS:
        ms = tp[label(layout)]
        w = layout[0]
        rate = statistics.median(m["runs_per_s"] for m in ms)
        steady = statistics.median(m["steady_runs_per_s"] for m in ms)
        ideal = w * 1000 / (STEPS * SLEEP_MS)
        rows[label(layout)] = {
            "runs_per_s": round(rate, 2),
            "vs_1_worker": round(rate / base, 2),
            "steady_runs_per_s": round(steady, 2),
            "steady_vs_1_worker": round(steady / base_steady, 2),
            "sleep_bound_runs_per_s": round(ideal, 2),
            "steady_over_sleep_bound": round(steady / ideal, 2),
            "first_step_s": round(statistics.median(m["first_step_s"] for m in ms), 2),
            "startup_bound_s": round(startup_bound_s(startup, layout, info["cpus"]), 2),
            "worker_cpu_ms_per_run": round(statistics.median(m["worker_cpu_ms_per_run"] for m in ms), 1),
            "server_cpu_ms_per_run": _median_or_none([m["server_cpu_ms_per_run"] for m in ms], 1),
            "cpus_busy": _median_or_none([m["cpus_busy"] for m in ms], 2),
            "poller_cpus": round(statistics.median(m["poller_cpus"] for m in ms), 2),
            "all_runs_per_s": [round(m["runs_per_s"], 2) for m in ms],
            "claims_per_worker": [m["claims"] for m in ms],
            "stale_leases": sum(m["stale_leases"] for m in ms),
            "errors": sum(m["errors"] for m in ms),
            "unclean_exits": sum(m["unclean_exits"] for m in ms),
        }
    samples = to["samples"]
    takeovers = [s["takeover_s"] for s in samples]
    return {
        "benchmark": "workers",
        "machine": info,
        "throughput": {
            "runs": RUNS,
            "tool_nodes": STEPS,
            "tool_sleep_ms": SLEEP_MS,
            "rounds": ROUNDS,
            "by_workers": rows,
            "idle_worker_process": startup,
            "worker_log_lines": [ln for ms in tp.values() for m in ms for ln in m["log_lines"]],
        },
        "takeover": {
            "lease_ttl_s": TTL_S,
            "heartbeat_s": HEARTBEAT_S,
            "repeats": len(samples),
            "median_s": round(statistics.median(takeovers), 3),
            "p90_s": round(p90(takeovers), 3),
            "median_over_ttl": round(statistics.median(takeovers) / TTL_S, 2),
            "p90_over_ttl": round(p90(takeovers) / TTL_S, 2),
            "median_lease_left_at_kill_s": round(statistics.median(s["lease_left_at_kill_s"] for s in samples), 3),
            "median_claim_lag_s": round(statistics.median(s["claim_lag_s"] for s in samples), 3),
            "samples": [{k: round(v, 3) if isinstance(v, float) else v for k, v in s.items()} for s in samples],
            "worker_log_lines": to["log_lines"],
        },
    }


def _tables(result: dict[str, Any]) -> list[str]:
    tp, to = result["throughput"], result["takeover"]
    rows = [
        [
            w,
            r["runs_per_s"],
            f"{r['vs_1_worker']:.2f}x",
            r["steady_runs_per_s"],
            f"{r['steady_vs_1_worker']:.2f}x",
            r["sleep_bound_runs_per_s"],
            f"{r['steady_over_sleep_bound']:.0%}",
            r["first_step_s"],
            r["startup_bound_s"],
            r["worker_cpu_ms_per_run"],
            "?" if r["server_cpu_ms_per_run"] is None else r["server_cpu_ms_per_run"],
            "?" if r["cpus_busy"] is None else f"{r['cpus_busy']:.2f}",
            f"{r['poller_cpus']:.2f}",
            " | ".join(",".join(str(c) for c in claims) for claims in r["claims_per_worker"]),
        ]
        for w, r in tp["by_workers"].items()
    ]
    head = (
        "workers",
        "runs/s",
        "vs 1",
        "steady runs/s",
        "vs 1",
        "sleep-bound",
        "steady/bound",
        "1st step s",
        "start-up bound s",
        "worker CPU ms/run",
        "server CPU ms/run",
        "CPUs busy",
        "poller CPUs",
        "claims per worker",
    )
    title = (
        f"runs completed per second: {tp['runs']} runs x {tp['tool_nodes']} tool nodes sleeping"
        f" {tp['tool_sleep_ms']} ms, median of {tp['rounds']} rounds"
    )
    per_kill = [
        [
            i + 1,
            f"{s['kill_delay_s']:.2f}",
            f"{s['lease_left_at_kill_s']:.3f}",
            f"{s['takeover_s']:.3f}",
            f"{s['claim_lag_s']:.3f}",
            f"{s['takeover_s'] / to['lease_ttl_s']:.2f}x",
            s["final_status"],
        ]
        for i, s in enumerate(to["samples"])
    ]
    summary = [
        ["median takeover", f"{to['median_s']:.3f} s", f"{to['median_over_ttl']:.2f}x TTL"],
        ["p90 takeover", f"{to['p90_s']:.3f} s", f"{to['p90_over_ttl']:.2f}x TTL"],
        ["median lease left at the kill", f"{to['median_lease_left_at_kill_s']:.3f} s", ""],
        ["median claim lag after expiry", f"{to['median_claim_lag_s']:.3f} s", ""],
        ["lease TTL / heartbeat", f"{to['lease_ttl_s']:g} s / {to['heartbeat_s']:g} s", ""],
    ]
    out = [
        table(title, head, rows),
        _scaling_note(result) + "\n",
        table("takeover after SIGKILL, per kill (seconds)", TAKEOVER_COLUMNS, per_kill),
        table("takeover after SIGKILL", ("measure", "value", "vs TTL"), summary),
    ]
    lines = tp["worker_log_lines"] + to["worker_log_lines"]
    if lines:
        out.append(table("worker log lines (warnings, errors)", ("line",), [[ln[:150]] for ln in lines[:20]]))
    return out


TAKEOVER_COLUMNS = ("kill", "after claim", "lease left", "takeover", "claim lag", "takeover/TTL", "run")


def _scaling_note(result: dict[str, Any]) -> str:
    cpus = result["machine"]["cpus"] or 1
    most = str(max(WORKER_COUNTS))
    top = result["throughput"]["by_workers"][most]
    most_forked = label((max(FORKED_COUNTS), True))
    forked = result["throughput"]["by_workers"][most_forked]
    idle = result["throughput"]["idle_worker_process"]
    problems = [sum(r[k] for r in result["throughput"]["by_workers"].values()) for k in PROBLEMS]
    lines = [
        "runs/s: worker start -> last run COMPLETED (includes process start-up); steady: first committed step ->"
        " last run COMPLETED;",
        "sleep-bound: workers / time asleep per run (as if a step cost no CPU); CPUs busy: (workers' + server's"
        " CPU time) / (worker start -> workers exited); poller CPUs: this script's own, polling the runs every"
        f" {POLL_S * 1000:.0f} ms.",
        f"{most} workers: {top['vs_1_worker']:.2f}x of 1 worker from start, {top['steady_vs_1_worker']:.2f}x steady"
        f" (linear: {most}x).",
        f"Start-up per worker: an idle worker process (start, open the store, one empty claim, exit) used"
        f" {idle['cpu_ms']:.0f} ms CPU (median of {idle['cpu_ms_all']}), {idle['wall_ms']:.0f} ms wall, and imported"
        f" {idle['modules']} modules; worker CPU ms/run includes W x that / {RUNS} runs.",
        f"start-up bound: W x that CPU / {cpus} CPUs (at least that CPU): the earliest first step when W workers"
        " start at once.",
        f"W forked: one `stateward worker --processes W` (imports once, forks W workers): {forked['vs_1_worker']:.2f}x"
        f" of 1 worker from start with {most_forked}, {forked['steady_vs_1_worker']:.2f}x steady, first step after"
        f" {forked['first_step_s']:.2f} s; an idle forked fleet of {idle['forked_processes']} used"
        f" {idle['forked_cpu_ms']:.0f} ms CPU in all (median of {idle['forked_cpu_ms_all']}; as separate processes"
        f" {idle['forked_processes']} x {idle['cpu_ms']:.0f} ms).",
        f"stale leases {problems[0]}, worker errors {problems[1]}, unclean worker exits {problems[2]} (all rounds).",
    ]
    if cpus < max(WORKER_COUNTS):
        lines.append(
            f"This machine has {cpus} CPUs for {most} worker processes, PostgreSQL and this poller: expect"
            " sub-linear scaling."
        )
    busy = top["cpus_busy"]
    if busy is not None and busy >= 0.8 * cpus:
        lines.append(f"With {most} workers {busy:.2f} of {cpus} CPUs were busy: CPU, not the sleep, is the limit.")
    elif busy is not None:
        lines.append(
            f"With {most} workers {busy:.2f} of {cpus} CPUs were busy (by this benchmark; see the load average): the"
            f" gap from start is mostly start-up ({top['first_step_s']:.2f} s to the first step), the steady gap"
            " the CPU and round trips of each step."
        )
    return "\n".join(lines)


PROBLEMS = ("stale_leases", "errors", "unclean_exits")


def _machine_line(info: dict[str, Any]) -> str:
    return (
        f"machine: {info['cpus']} CPUs, load average {info['load_avg_1m']} (1 min; {info['load_avg_1m_at_start']}"
        f" at the start), PostgreSQL {info['postgres']}\n"
    )


def main() -> None:
    args = parse_args(__doc__)
    load_at_start = round(os.getloadavg()[0], 2)
    server = pg_server()
    with tempfile.TemporaryDirectory(prefix="bench_workers_") as name:
        fleet = Fleet(Path(name))
        try:
            server.start()
            server.create_session_database()
            version = server_version(server)
            tp, startup = measure_throughput(server, fleet)
            to = measure_takeover(server, fleet)
        finally:
            fleet.close()
            server.stop()
    info = {**machine(), "load_avg_1m_at_start": load_at_start, "postgres": version}
    info.pop("sqlite", None)
    result = summarize(tp, startup, to, info)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print("\n".join([*_tables(result), _machine_line(info)]))


if __name__ == "__main__":
    main()
