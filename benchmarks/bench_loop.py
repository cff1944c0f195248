"""Does the whole ReAct loop get slower per step as the run grows? A scripted model calls a no-op tool N times.

Each run is a real Runtime driving a ReActController over one no-op tool on a SQLite store at
``synchronous=FULL`` (WAL already wrapped, as in a database in use), for N = 100, 1,000 and 10,000 tool
steps (``--quick``: up to 1,000). Sizes up to 1,000 run ``--rounds`` times each (default 5), one of each
per round, the order reversed every other round; 10,000 runs once, last. A step is timed from one model
call to the next: decide (the model request), handle, the tool through the gateway, the commit. Targets:
mean ms/step at the largest N / at 100 <= 1.2x (the median of the rounds' own ratios); ms/step at 100 /
the store's own ``commit_step`` at FULL (timed in blocks between the runs) <= 3x. The floor beside it is
what a step cannot avoid, each safety mechanism's share measured in the same run: the commit of the
loop's own write (state, events and the call's attempt record: the journal of a call without side
effect is written with its step), the tool call under its timeout (a hand-off to a runner thread of
the call runner, core/calls.py, beside the same no-op called bare) and the model call under the step's
pause token (another hand-off), so that either can be abandoned. A tool with a side effect would add a
journal write of its own before the call (and one after); the no-op has none, so that write is printed
beside the floor, not in it. The step is reported against both the bare commit and that floor; what a
fresh thread per call cost (the mechanism before the runner) is printed beside it.
Time in Python's garbage collector per step is measured for every run (``gc.callbacks``): a history
the collector had to walk made a long run's steps slower. A cProfile of one run at NORMAL
(``--profile N``, default 1,000 steps) shows what remains, split by area (runtime, gateway, store,
model, thread, pydantic), and counts pydantic's validations, copies and dumps per step.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import gc
import itertools
import pstats
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchkit import (
    StepDriver,
    Target,
    emit,
    interleaved,
    machine,
    mean_us,
    median_us,
    step_write,
    table,
    targets_table,
    time_calls,
    warm_store,
)
from stateward import Agent, Budget, RunStatus, Runtime, ToolRegistry, tool
from stateward.controllers.react import ReActController
from stateward.core.calls import CallRunner
from stateward.core.interrupt import PauseToken, abandon_on_pause
from stateward.core.journal import SideEffectRecord, SideEffectStatus
from stateward.core.state import AgentRef
from stateward.models.base import ModelRequest
from stateward.models.scripted import ScriptedModel
from stateward.store.records import Lease, StepWrite
from stateward.store.sqlite import SQLiteStore
from stateward.tools.execution import run_with_timeout

SIZES = (100, 1_000, 10_000)
QUICK_MAX = 1_000
# Every size up to QUICK_MAX runs ROUNDS times, interleaved round by round (the order alternating), so a
# busy spell of the machine falls on all sizes alike; a larger size (10,000: tens of seconds) runs once, last.
ROUNDS = 5
COMMIT_BLOCK = 200  # commit_step calls timed between two runs
THREAD_CALLS = 1000  # calls of each kind timed for the hand-offs, in alternating blocks of CALL_BLOCK
CALL_BLOCK = 50
PROFILED_N = 1_000
TARGET_GROWTH = 1.2
TARGET_COMMIT = 3.0


def loop_agent(n: int, stamps: list[tuple[int, int]] | None = None, tracked: list[int] | None = None) -> Agent:
    """A ReAct agent whose script calls ``noop`` until it has seen ``n`` observations, then finishes;
    ``stamps`` gets (wall, CPU) ns at each model call, ``tracked`` the number of objects the garbage
    collector tracks at the last one. bench_tracing runs the same agent."""

    @tool(description="Do nothing.")
    def noop(i: int) -> dict[str, int]:
        return {"i": i}

    model: ScriptedModel

    def policy(request: ModelRequest) -> dict[str, Any]:
        if stamps is not None:
            stamps.append((time.perf_counter_ns(), time.process_time_ns()))
        model.calls.clear()  # a test's request history would keep every request of the run alive
        seen = len(request.observations)
        if seen >= n:
            if tracked is not None:
                tracked.append(len(gc.get_objects()))
            return {"type": "FINISH", "reason": "done"}
        return {"type": "EXECUTE_TOOL", "action": "noop", "args": {"i": seen}}

    model = ScriptedModel(policy)
    return Agent(
        name="loop",
        controller=ReActController(model),
        tools=ToolRegistry([noop]),
        ref=AgentRef(name="bench:loop"),
        budget=Budget(max_steps=n + 1),
    )


class GcClock:
    """Wall time spent in the garbage collector's collections while installed, and the full ones."""

    def __init__(self) -> None:
        self.ns = 0
        self.full = 0
        self._start = 0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._start = time.perf_counter_ns()
            return
        self.ns += time.perf_counter_ns() - self._start
        self.full += info["generation"] == 2


def loop_run(
    tmp: Path, n: int, index: int, synchronous: str = "FULL", profiler: cProfile.Profile | None = None
) -> dict[str, float]:
    """One run of ``n`` tool steps: mean and median µs per step (model call to model call), the
    mean CPU µs per step of the whole process (a busy machine inflates wall time much more), and the
    µs per step spent in garbage collections."""
    path = tmp / f"loop-{n}-{index}.db"
    warm = warm_store(path)
    runtime = Runtime(SQLiteStore(path, synchronous=synchronous))
    stamps: list[tuple[int, int]] = []
    clock = GcClock()
    tracked: list[int] = []
    agent = loop_agent(n, stamps, tracked)
    gc.callbacks.append(clock)
    if profiler is not None:
        profiler.enable()  # the run only: not the store's warm-up
    try:
        state = runtime.start(agent, "call noop until done")
        assert state.usage.tool_attempts == n, state
    finally:
        if profiler is not None:
            profiler.disable()
        gc.callbacks.remove(clock)
        runtime.close()
        warm.close()
    steps = [b[0] - a[0] for a, b in itertools.pairwise(stamps)]
    cpu = (stamps[-1][1] - stamps[0][1]) / (len(stamps) - 1)
    return {
        "mean_us": mean_us(steps),
        "median_us": median_us(steps),
        "cpu_us": cpu / 1000,
        "gc_us": clock.ns / n / 1000,
        "full_gcs": clock.full,
        "gc_tracked": tracked[0],
    }


class RecordingStore(SQLiteStore):
    """A SQLite store that keeps every StepWrite it commits (the loop's own writes, replayed below)."""

    def __init__(self, path: Path, **kwargs: Any) -> None:
        super().__init__(path, **kwargs)
        self.writes: list[tuple[str, StepWrite]] = []

    def commit_step(self, run_id: str, expected_seq: int, write: StepWrite, lease: Lease | None = None) -> int:
        self.writes.append((run_id, write))
        return super().commit_step(run_id, expected_seq, write, lease)


def loop_writes(tmp: Path, n: int = 50) -> tuple[str, list[StepWrite]]:
    """The tool steps' writes of a short loop run (state, events and the call's attempt record), to be
    replayed with ``commit_step``: what the store charges for this loop's own step."""
    store = RecordingStore(tmp / "record.db", synchronous="NORMAL")
    runtime = Runtime(store)
    try:
        runtime.start(loop_agent(n), "call noop until done")
    finally:
        runtime.close()
    run_id = store.writes[0][0]
    return run_id, [w for _, w in store.writes if w.attempts and w.state.status is RunStatus.RUNNING]


class JournalWriter:
    """A side-effecting tool's journal write before its call (STARTED, ``put_side_effect``: a transaction of
    its own), each under a new idempotency key, into the store of the loop's own writes."""

    def __init__(self, driver: StepDriver) -> None:
        self.store = driver.store
        self.run_id = driver.run_id
        self.count = itertools.count()

    def write(self) -> None:
        self.store.put_side_effect(
            SideEffectRecord(
                idempotency_key=f"idem_bench_{next(self.count)}",
                run_id=self.run_id,
                tool="noop",
                status=SideEffectStatus.STARTED.value,
                updated_at=datetime.now(UTC),
            )
        )


Commits = dict[str, list[int]]  # ns per commit: "standard", "own" (the loop's write), "journal"


def commit_block(driver: StepDriver, own: StepDriver, journal: JournalWriter, samples: Commits) -> None:
    """COMMIT_BLOCK commits of the standard step, as many of the loop's own and of journal writes, in
    alternating tens."""
    for _ in range(COMMIT_BLOCK // 10):
        samples["standard"] += time_calls(driver.step, 10)
        samples["own"] += time_calls(own.step, 10)
        samples["journal"] += time_calls(journal.write, 10)


def noop() -> None:
    return None


def call_costs() -> dict[str, float]:
    """Median µs of a no-op called bare, under the gateway's timeout (``run_with_timeout``: the tool's
    hand-off to a runner thread), under a step's pause token (``abandon_on_pause``: the model call's
    hand-off) and on a fresh thread per call (a runner that keeps no idle thread), in alternating blocks."""
    token = PauseToken()
    fresh = CallRunner(max_idle=0)
    calls = {
        "bare": noop,
        "timeout": lambda: run_with_timeout(noop, 30.0),
        "pause_token": lambda: abandon_on_pause(noop, "model", "bench", token),
        "fresh_thread": lambda: fresh.run(noop, 30.0),
    }
    interleaved(calls, 2, CALL_BLOCK)  # warm: the runner's idle thread
    samples = interleaved(calls, THREAD_CALLS // CALL_BLOCK, CALL_BLOCK)
    return {name: median_us(s) for name, s in samples.items()}


Runs = dict[int, list[dict[str, float]]]


def measure(tmp: Path, sizes: tuple[int, ...], rounds: int) -> tuple[Runs, Commits]:
    """Every run of each size, with a block of commits (the standard step's, the loop's own write's and a
    journal write's) before each run and after the last.

    Sizes up to QUICK_MAX run ``rounds`` times, one run of each per round, the order reversed every other
    round; larger sizes once each, after the rounds."""
    writes = [step_write(i) for i in range(1, 501)]
    warm = warm_store(tmp / "commit.db")
    driver = StepDriver(tmp / "commit.db", "FULL", writes)
    own_run, own_writes = loop_writes(tmp)
    own_warm = warm_store(tmp / "own.db")
    own = StepDriver(tmp / "own.db", "FULL", own_writes, run_id=own_run)
    journal = JournalWriter(own)
    commits: Commits = {"standard": [], "own": [], "journal": []}
    small = [n for n in sizes if n <= QUICK_MAX]
    runs: Runs = {n: [] for n in sizes}
    block = functools.partial(commit_block, driver, own, journal, commits)
    try:
        time_calls(driver.step, 30)
        time_calls(own.step, 30)
        time_calls(journal.write, 30)
        for r in range(rounds):
            for n in small if r % 2 == 0 else small[::-1]:
                block()
                runs[n].append(loop_run(tmp, n, r))
        for n in sizes:
            if n > QUICK_MAX:
                block()
                runs[n].append(loop_run(tmp, n, 0))
        block()
    finally:
        for d in (driver, warm, own, own_warm):
            d.close()
    return runs, commits


def summary(runs: list[dict[str, float]]) -> dict[str, float]:
    """The median over a size's runs of each figure, with the number of runs and the range of their means."""
    out = {k: statistics.median(run[k] for run in runs) for k in runs[0]}
    out.update(runs=len(runs), mean_min_us=min(r["mean_us"] for r in runs), mean_max_us=max(r["mean_us"] for r in runs))
    return out


def growth_of(all_runs: dict[int, list[dict[str, float]]], first: int, last: int, key: str = "mean_us") -> float:
    """Mean (or ``key``) per step at ``last`` / at ``first``: the median of the rounds' own ratios when both
    sizes ran in every round (a round's runs met the same machine), else against the median at ``first``."""
    a, b = all_runs[first], all_runs[last]
    if len(a) == len(b) > 1:
        return statistics.median(y[key] / x[key] for x, y in zip(a, b, strict=True))
    return statistics.median(y[key] for y in b) / statistics.median(x[key] for x in a)


AREAS = (  # where a function's self time is charged, first match on its file (or built-in's name) wins
    ("waiting on runner threads (the calls run there)", ("threading.py", "_thread.", "core/calls.py")),
    ("store + SQLite", ("stateward/store/", "sqlite3")),
    ("gateway (tools/)", ("stateward/tools/",)),
    ("model (scripted) + bench policy", ("stateward/models/", "bench_loop.py", "process_time_ns")),
    ("pydantic", ("pydantic",)),
    ("runtime, core, controllers", ("stateward/runtime/", "stateward/core/", "stateward/controllers/")),
)


# What a step asks of pydantic, per step of the profiled run: validations (a model built, arguments or a
# result checked), copies of a model, serializations. Counted, so a copy or a re-validation added to the
# hot path shows whatever the machine's speed.
PYDANTIC_COUNTS = {
    "validations": ("<method 'validate_python' of 'pydantic_core._pydantic_core.SchemaValidator' objects>",),
    "model_copy": ("model_copy",),
    "dumps (model_dump, model_dump_json)": ("model_dump", "model_dump_json"),
}


def area_of(file: str, fn: str) -> str:
    where = f"{file}:{fn}"
    return next((name for name, marks in AREAS if any(m in where for m in marks)), "other (stdlib, json, ...)")


def profile_run(tmp: Path, n: int) -> dict[str, Any]:
    """cProfile of one ``n``-step run at NORMAL: self time per area and per step, top self times and
    the pydantic dump calls."""
    loop_run(tmp, n, 98, synchronous="NORMAL")  # warm: imports, schemas, caches of a first run
    profiler = cProfile.Profile()
    loop_run(tmp, n, 99, synchronous="NORMAL", profiler=profiler)
    stats = pstats.Stats(profiler)
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    rows = []
    dumps = 0
    counted = dict.fromkeys(PYDANTIC_COUNTS, 0)
    areas: dict[str, float] = {}
    for (file, line, fn), (_cc, calls, tottime, cumtime, _callers) in raw.items():
        if fn in ("model_dump", "model_dump_json"):
            dumps += calls
        for name, marks in PYDANTIC_COUNTS.items():
            counted[name] += calls if fn in marks and (file == "~" or "pydantic" in file) else 0
        rows.append((tottime, calls, cumtime, f"{Path(file).name}:{line}({fn})"))
        area = area_of(file, fn)
        areas[area] = areas.get(area, 0.0) + tottime
    rows.sort(reverse=True)
    total = sum(r[0] for r in rows)
    top = [
        {"function": name, "calls": calls, "self_ms": round(t * 1000, 1), "share": round(t / total, 3)}
        for t, calls, _cum, name in rows[:15]
    ]
    by_area = {
        name: {"us_per_step": round(t / n * 1e6, 1), "share": round(t / total, 3)}
        for name, t in sorted(areas.items(), key=lambda kv: -kv[1])
    }
    return {
        "steps": n,
        "model_dump_calls": dumps,
        "pydantic_per_step": {name: round(c / n, 2) for name, c in counted.items()},
        "total_ms": round(total * 1000, 1),
        "by_area": by_area,
        "top_self": top,
    }


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").strip().splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    parser.add_argument("--quick", action="store_true", help=f"stop at N = {QUICK_MAX:,} (for CI)")
    parser.add_argument("--sizes", help="comma-separated N to run instead (the first is the baseline)")
    parser.add_argument("--profile", type=int, default=PROFILED_N, help="steps of the profiled run at NORMAL")
    parser.add_argument(
        "--rounds", type=int, default=ROUNDS, help=f"runs of each size up to {QUICK_MAX:,}, interleaved (larger: once)"
    )
    return parser.parse_args()


def main() -> None:
    args = parse()
    sizes = tuple(int(s) for s in args.sizes.split(",")) if args.sizes else SIZES
    if args.quick:
        sizes = tuple(n for n in sizes if n <= QUICK_MAX)
    with tempfile.TemporaryDirectory(prefix="bench_loop_") as name:
        tmp = Path(name)
        all_runs, commits = measure(tmp, sizes, max(1, args.rounds))
        calls = call_costs()
        profile = profile_run(tmp, args.profile)
    runs = {n: summary(r) for n, r in all_runs.items()}
    commit_us, own_us, journal_us = (median_us(commits[k]) for k in ("standard", "own", "journal"))
    first, last = sizes[0], sizes[-1]
    floor_us = own_us + calls["timeout"] + calls["pause_token"]
    growth = growth_of(all_runs, first, last)
    targets = [
        Target(f"mean ms/step at N={last:,} / at N={first:,}", growth, TARGET_GROWTH),
        Target(f"ms/step at N={first:,} / commit_step at FULL", runs[first]["mean_us"] / commit_us, TARGET_COMMIT),
        Target(
            f"ms/step at N={first:,} / floor (commit + hand-offs)", runs[first]["mean_us"] / floor_us, TARGET_COMMIT
        ),
    ]
    result = {
        "benchmark": "loop",
        "machine": machine(),
        "steps_us": {str(n): {k: round(v, 1) for k, v in r.items()} for n, r in runs.items()},
        "commit_step_full_us": round(commit_us, 1),
        "own_write_full_us": round(own_us, 1),
        "journal_write_full_us": round(journal_us, 1),
        "calls_us": {name: round(us, 2) for name, us in calls.items()},
        "floor_us": round(floor_us, 1),
        "floor_ratio": round(floor_us / commit_us, 3),
        "median_growth": round(growth_of(all_runs, first, last, "median_us"), 3),
        "cpu_growth": round(growth_of(all_runs, first, last, "cpu_us"), 3),
        "step_over_floor": round(runs[first]["mean_us"] / floor_us, 3),
        "profile_normal": profile,
        "targets": [t.as_dict() for t in targets],
    }
    emit(args.json, result, _tables(result, targets))


def _tables(result: dict[str, Any], targets: list[Target]) -> list[str]:
    commit = result["commit_step_full_us"]
    rows = [
        [
            f"{int(n):,}",
            int(r["runs"]),
            f"{r['mean_us'] / 1000:.3f}",
            f"{r['mean_min_us'] / 1000:.3f}-{r['mean_max_us'] / 1000:.3f}",
            f"{r['median_us'] / 1000:.3f}",
            f"{r['cpu_us'] / 1000:.3f}",
            f"{r['gc_us'] / 1000:.3f}",
            int(r["full_gcs"]),
            f"{int(r['gc_tracked']):,}",
            f"{r['mean_us'] / commit:.2f}x",
            f"{r['mean_us'] / result['floor_us']:.2f}x",
        ]
        for n, r in result["steps_us"].items()
    ]
    calls = result["calls_us"]
    floor = [
        ["commit_step at FULL (the standard step write; µs, median)", commit],
        [
            "the commit: the loop's own write at FULL (state, events, the call's attempt record; µs, median)",
            result["own_write_full_us"],
        ],
        ["the tool call: the no-op under its timeout, on a runner thread (µs, median)", calls["timeout"]],
        ["  the same no-op called bare, no timeout (µs, median)", calls["bare"]],
        ["  the same on a fresh thread per call (µs, median; before the runner)", calls["fresh_thread"]],
        ["the model call's hand-off: a no-op under the step's pause token (µs, median)", calls["pause_token"]],
        ["floor = own write + tool call under its timeout + model hand-off (µs)", result["floor_us"]],
        ["floor / commit_step", f"{result['floor_ratio']:.2f}x"],
        [
            "not in the floor: a side-effecting tool's journal write before its call (put_side_effect at FULL, µs)",
            result["journal_write_full_us"],
        ],
        ["median ms/step, largest N / smallest (median of the rounds' ratios)", f"{result['median_growth']:.2f}x"],
        ["CPU ms/step, largest N / smallest (median of the rounds' ratios)", f"{result['cpu_growth']:.2f}x"],
    ]
    prof = result["profile_normal"]
    area_rows = [[name, a["us_per_step"], f"{a['share'] * 100:.1f}%"] for name, a in prof["by_area"].items()]
    area_rows += [[f"pydantic {name} per step (calls)", c, ""] for name, c in prof["pydantic_per_step"].items()]
    prof_rows = [[p["function"], p["calls"], p["self_ms"], f"{p['share'] * 100:.1f}%"] for p in prof["top_self"]]
    return [
        table(
            "the ReAct loop at FULL: ms per step (model call to model call)",
            (
                "N",
                "runs",
                "mean",
                "range of the runs' means",
                "median",
                "CPU mean",
                "in GC",
                "full GCs",
                "GC-tracked at end",
                "mean / commit",
                "mean / floor",
            ),
            rows,
        ),
        table("the floor beside it", ("measure", "value"), floor),
        table(
            f"cProfile of a {prof['steps']:,}-step run at NORMAL: self time by area (cProfile inflates Python calls)",
            ("area", "µs/step", "share"),
            area_rows,
        ),
        table(
            f"cProfile of a {prof['steps']:,}-step run at NORMAL ({prof['total_ms']} ms;"
            f" model_dump calls: {prof['model_dump_calls']:,}), top self time",
            ("function", "calls", "self ms", "share"),
            prof_rows,
        ),
        targets_table(targets),
    ]


if __name__ == "__main__":
    main()
