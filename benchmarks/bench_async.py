"""Async throughput: RUNS runs whose model call waits 100 ms, one AsyncWorker at concurrency 100 vs 1.

Each run is a ReAct agent over an async scripted model (``AsyncScriptedModel(latency_s=0.1)``: an
``await asyncio.sleep(0.1)`` per call, standing in for a provider's round trip) and one ``async def``
tool: the model calls the tool once, then finishes — two model calls, one tool call, three durable
steps per run. The runs are submitted first (not timed); then one in-process ``AsyncWorker`` (one
process, one event loop) claims and drives them, building each agent by its registered name as a
worker process would. runs/s = RUNS / (worker start -> the last run's ``run_exited`` event).
The two concurrencies are measured in the same run, each on a fresh SQLite file (WAL; ``synchronous``
NORMAL by default, ``--synchronous FULL`` for an fsync per commit). The ratio's floor is 50x; it is
printed, never asserted. ``--runs 40`` is a quick mode (about 10 s).

At concurrency 100 one event loop runs every run's share of the runtime (decide, handle, the tool call
through the gateway, the store's statements) one after another, so that time cannot be shorter than
RUNS x the loop's CPU per run, nor than the model waits (RUNS / 100 x 2 x 100 ms). Both are printed,
with the ratio they allow and the SQL statements per run (counted by a trace on the store's
connection), so a miss says where the time went. As the ``stateward worker`` process does after its
imports (cli/main.py), the objects built by importing are frozen out of the garbage collector's scans.
"""

from __future__ import annotations

import argparse
import gc
import json
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchkit import machine, machine_line, table
from stateward import Agent, AgentRegistry, ReActController, Runtime, ToolRegistry, tool
from stateward.core.budget import Budget
from stateward.core.events import EventType
from stateward.models.base import ModelRequest
from stateward.runtime.async_worker import AsyncWorker
from stateward.store.sqlite import SQLiteStore
from stateward.testing import AsyncScriptedModel

RUNS = 200
LATENCY_S = 0.1
CONCURRENCIES = (100, 1)
FLOOR = 50.0
NAME = "bench-async"


@tool
async def quote(sku: str) -> dict[str, Any]:
    """The price of a SKU (an async call that answers at once)."""
    return {"sku": sku, "cents": 1200}


def policy(request: ModelRequest) -> dict[str, Any]:
    if request.observations:
        return {"type": "FINISH", "reason": "quoted"}
    return {"type": "EXECUTE_TOOL", "action": "quote", "args": {"sku": "SKU-1"}}


AGENTS = AgentRegistry()


@AGENTS.agent(NAME)
def build() -> Agent:
    """A ReAct agent whose every model call waits LATENCY_S without blocking."""
    model = AsyncScriptedModel(policy, latency_s=LATENCY_S)
    return Agent(name=NAME, controller=ReActController(model), tools=ToolRegistry([quote]), budget=Budget(max_steps=10))


def measure(db: Path, runs: int, concurrency: int, synchronous: str) -> dict[str, Any]:
    submitter = Runtime(SQLiteStore(db, synchronous=synchronous), agents=AGENTS)
    ids = [submitter.submit(build(), goal=f"quote SKU-1 ({i})").run_id for i in range(runs)]
    submitter.close()
    store = SQLiteStore(db, synchronous=synchronous)
    statements = [0]
    store.trace(lambda _sql: statements.__setitem__(0, statements[0] + 1))
    runtime = Runtime(store, agents=AGENTS)  # builds agents by name
    worker = AsyncWorker(runtime, concurrency=concurrency, poll_s=0.05)
    started = datetime.now(UTC)
    t0, cpu0, loop0 = time.perf_counter(), time.process_time(), time.thread_time()
    stats = worker.run(idle_exit_s=0.5)  # the loop runs on this thread: its CPU is this thread's
    wall_s = time.perf_counter() - t0
    cpu_s, loop_s = time.process_time() - cpu0, time.thread_time() - loop0
    store.trace(None)
    ended = []
    statuses: dict[str, int] = {}
    for run_id in ids:
        state = runtime.get(run_id)
        statuses[state.status.value] = statuses.get(state.status.value, 0) + 1
        last = runtime.events(run_id, after=max(0, runtime.store.last_seq(run_id) - 1))[-1]
        assert last.type is EventType.RUN_EXITED, last.type
        ended.append(last.at)
    runtime.close()
    elapsed = (max(ended) - started).total_seconds()
    return {
        "concurrency": concurrency,
        "runs": runs,
        "seconds": round(elapsed, 3),
        "runs_per_s": round(runs / elapsed, 2),
        "worker_wall_s": round(wall_s, 3),
        "cpu_ms_per_run": round(cpu_s / runs * 1000, 3),  # the process, the 0.5 s idle exit included
        "loop_cpu_ms_per_run": round(loop_s / runs * 1000, 3),
        "loop_cpu_share": round(min(loop_s, elapsed) / elapsed, 3),  # how much of the time the loop had a CPU
        "sql_per_run": round(statements[0] / runs, 1),
        "statuses": statuses,
        "claimed": stats.claimed,
        "errors": stats.errors + stats.loop_errors + stats.stale_leases,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").strip().splitlines()[0])
    parser.add_argument("--runs", type=int, default=RUNS, help=f"runs per measurement (default {RUNS})")
    parser.add_argument("--synchronous", default="NORMAL", choices=("NORMAL", "FULL"), help="SQLite synchronous")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    args = parser.parse_args()
    gc.freeze()  # what was imported lives as long as the process (see the module docstring)
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench_async_") as tmp:
        for c in CONCURRENCIES:
            results[c] = measure(Path(tmp) / f"c{c}.db", args.runs, c, args.synchronous)
    high, low = results[CONCURRENCIES[0]], results[CONCURRENCIES[-1]]
    ratio = high["runs_per_s"] / low["runs_per_s"]
    ideal = args.runs * 2 * LATENCY_S  # every model wait in sequence, nothing else
    # At concurrency 100 the loop's CPU per run is spent one run after another, and the waits overlap.
    cpu_floor = args.runs * high["loop_cpu_ms_per_run"] / 1000
    wait_floor = max(args.runs / CONCURRENCIES[0], 1) * 2 * LATENCY_S  # two waits per run, 100 at a time
    floor_s = max(cpu_floor, wait_floor)
    out = {
        "benchmark": "async",
        "machine": machine(),
        "synchronous": args.synchronous,
        "model_latency_s": LATENCY_S,
        "results": [results[c] for c in CONCURRENCIES],
        "ratio": round(ratio, 2),
        "floor": FLOOR,
        "met": ratio >= FLOOR,
        "serial_floor_s": round(ideal, 2),
        "c100_cpu_floor_s": round(cpu_floor, 3),
        "c100_wait_floor_s": round(wait_floor, 3),
        "ratio_at_floor": round(low["seconds"] / floor_s, 1),
    }
    if args.json:
        print(json.dumps(out, indent=1))
        return
    rows = [
        [
            r["concurrency"],
            r["runs"],
            f"{r['seconds']:.2f}",
            f"{r['runs_per_s']:.1f}",
            f"{r['loop_cpu_ms_per_run']:.2f}",
            r["sql_per_run"],
            r["statuses"],
            r["errors"],
        ]
        for r in out["results"]
    ]
    header = ("concurrency", "runs", "s", "runs/s", "loop CPU ms/run", "SQL/run", "statuses", "errors")
    print(table("one AsyncWorker, one event loop", header, rows))
    verdict = "met" if out["met"] else "MISSED"
    print(f"throughput ratio (concurrency {CONCURRENCIES[0]} / 1): {ratio:.1f}x  (floor >= {FLOOR:g}x: {verdict})")
    print(
        f"concurrency {CONCURRENCIES[0]} cannot beat {floor_s:.2f} s: {args.runs} runs"
        f" x {high['loop_cpu_ms_per_run']:.2f} ms of the loop's CPU = {cpu_floor:.2f} s,"
        f" the model waits {wait_floor:.2f} s;"
        f" that floor against concurrency 1 is {out['ratio_at_floor']:.1f}x"
    )
    share = high["loop_cpu_share"]
    busy = "" if share >= 0.8 else " (far below 100%: other processes held the CPUs; the times are inflated)"
    print(f"the loop's thread was on a CPU {share:.0%} of the concurrency {CONCURRENCIES[0]} time{busy}")
    print(f"model waits alone at concurrency 1: {ideal:.1f} s; SQLite synchronous={args.synchronous}")
    print(machine_line(out["machine"]), end="")


if __name__ == "__main__":
    main()
