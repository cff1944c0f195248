"""Does a large plan in a run's state make its steps cost more? The payment run's steps, replayed.

The payment-migration demo agent (built by its registered name, as a worker would) runs to its
approval wait on a recording SQLite store: its ~90 step writes are kept exactly as the Runtime made
them. Their state carries the plan-run controller's memo: the 18-item plan (~12 KB of JSON), the
per-item trackers, the budget ledger, the recent history (~19 KB in all). The writes are then replayed
with ``commit_step`` into fresh stores, in alternating order each round: as recorded ("plan in
state"), with the plan left out of every state's memo ("without the plan": what the plan itself
costs a step), and with every memo emptied ("minimal state": the trackers and history, which change
at every step, go too); the same events, requests, artifacts, attempts and checkpoints. Target: mean
µs per step with the plan / each of the other two <= 1.3x, at ``synchronous=FULL`` (the default) and
NORMAL. Also printed: the process's CPU µs per step beside the wall time (a busy machine inflates the
wall time much more), what a step stores (the run row's snapshot; the controller seals its plan and
each work item's record, core/sealed.py, and an unchanged one is a part of the run written once, see
store/parts.py), the parts written, the database's size after the run, and what the recorded run
itself cost a step (one run: the whole loop, controller and store, on a busy machine a rough figure).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchkit import Target, emit, machine, stored_bytes, table, targets_table
from stateward import Runtime
from stateward.core.errors import UserError
from stateward.core.events import Event, NewEvent
from stateward.core.state import RunState
from stateward.runtime.agent_registry import AgentRegistry, process_agents
from stateward.store.parts import split_state
from stateward.store.records import Lease, StepWrite
from stateward.store.sqlite import SQLiteStore

AGENT = "payment-migration"
ROUNDS = 9
TARGET = 1.3
BASES = ("without the plan", "minimal state")


class RecordingStore(SQLiteStore):
    """A SQLite store that keeps every run it creates and every step write it commits."""

    def __init__(self, path: Path):
        super().__init__(path, synchronous="NORMAL")
        self.created: tuple[RunState, list[NewEvent]] | None = None
        self.writes: list[StepWrite] = []

    def create_run(self, state: RunState, events: list[NewEvent]) -> list[Event]:
        self.created = (state, list(events))
        return super().create_run(state, events)

    def commit_step(self, run_id: str, expected_seq: int, write: StepWrite, lease: Lease | None = None) -> int:
        seq = super().commit_step(run_id, expected_seq, write, lease)
        self.writes.append(write)
        return seq


def agents() -> AgentRegistry:
    """The process's registered agents; an entry point that cannot load is left out (and said)."""
    try:
        return process_agents()
    except UserError as exc:
        print(f"note: {exc.message}; using the agents registered without entry points")
        return process_agents(use_entry_points=False)


def record(tmp: Path) -> tuple[tuple[RunState, list[NewEvent]], list[StepWrite], RunState]:
    tmp.mkdir(exist_ok=True)
    store = RecordingStore(tmp / "recorded.db")
    registry = agents()
    runtime = Runtime(store, agents=registry)
    try:
        agent = registry.create(AGENT)
        state = runtime.start(agent, "Assess and migrate the payment SDK call sites")
    finally:
        runtime.close()
    assert store.created is not None
    return store.created, store.writes, state


def run_cost(tmp: Path, runs: int) -> dict[str, float]:
    """The whole loop's cost per step (controller, runtime, store) of the run recorded ``runs`` more times
    after the first (which pays for lazy imports): median CPU and wall ms per step."""
    cpu, wall = [], []
    for n in range(runs):
        cpu0, wall0 = time.process_time(), time.perf_counter()
        _, writes, _ = record(tmp / f"again-{n}")
        cpu.append((time.process_time() - cpu0) * 1000 / len(writes))
        wall.append((time.perf_counter() - wall0) * 1000 / len(writes))
    return {"cpu_ms_per_step": statistics.median(cpu), "wall_ms_per_step": statistics.median(wall)}


def without_plan(state: RunState) -> RunState:
    return state.model_copy(update={"memo": {k: v for k, v in state.memo.items() if k != "plan"}})


def minimal(state: RunState) -> RunState:
    return state.model_copy(update={"memo": {}})


def replay(
    path: Path, synchronous: str, created: tuple[RunState, list[NewEvent]], writes: list[StepWrite]
) -> tuple[float, float]:
    """Mean wall and CPU µs per ``commit_step`` of ``writes`` replayed into a new store at ``path``."""
    store = SQLiteStore(path, synchronous=synchronous)
    try:
        state, events = created
        store.create_run(state, events)
        seq = len(events)
        samples = []
        cpu0 = time.process_time_ns()
        for write in writes:
            t0 = time.perf_counter_ns()
            seq = store.commit_step(state.run_id, seq, write)
            samples.append(time.perf_counter_ns() - t0)
        cpu = (time.process_time_ns() - cpu0) / len(writes) / 1000
    finally:
        store.close()
    return statistics.fmean(samples) / 1000, cpu


def variants(
    created: tuple[RunState, list[NewEvent]], writes: list[StepWrite]
) -> dict[str, tuple[tuple[RunState, list[NewEvent]], list[StepWrite]]]:
    out: dict[str, tuple[tuple[RunState, list[NewEvent]], list[StepWrite]]] = {"plan in state": (created, writes)}
    for name, change in (("without the plan", without_plan), ("minimal state", minimal)):
        changed = [w.model_copy(update={"state": change(w.state)}) for w in writes]
        out[name] = ((change(created[0]), created[1]), changed)
    return out


def measure(tmp: Path, synchronous: str, runs: dict[str, Any], rounds: int) -> dict[str, dict[str, Any]]:
    """Each variant replayed ``rounds`` times in alternating order (after one untimed replay each). Per
    variant: median wall and CPU µs per step; per base variant also the ratios plan / base taken within
    each round (the replays a few hundred ms apart see the same load), as median and spread."""
    names = list(runs)
    samples: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    sizes: dict[str, int] = {}
    for r in range(-1, rounds):
        for name in names if r % 2 else reversed(names):
            path = tmp / f"{synchronous}-{name.replace(' ', '_')}-{r + 1}.db"
            mean, cpu_us = replay(path, synchronous, *runs[name])
            if r >= 0:
                samples[name].append(mean)
                cpu[name].append(cpu_us)
            sizes[name] = stored_bytes(path)
            path.unlink()
    out: dict[str, dict[str, Any]] = {
        name: {
            "us_per_step": statistics.median(samples[name]),
            "cpu_us": statistics.median(cpu[name]),
            "bytes": sizes[name],
        }
        for name in names
    }
    for base in BASES:
        wall = [p / b for p, b in zip(samples[names[0]], samples[base], strict=True)]
        cpus = [p / b for p, b in zip(cpu[names[0]], cpu[base], strict=True)]
        out[base]["ratio"] = spread(wall)
        out[base]["cpu_ratio"] = spread(cpus)
    return out


def spread(values: list[float]) -> dict[str, float]:
    """Median and range of per-round ratios."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def detection_cost(writes: list[StepWrite]) -> dict[str, float]:
    """CPU µs per step of store/parts.py's ``split_state`` alone, over the recorded states in order (as a
    store that committed each one sees them): what finding the unchanged memo entries costs a step, for
    each variant's states (median of 5 passes)."""
    out: dict[str, float] = {}
    for name, change in (("plan in state", None), ("without the plan", without_plan), ("minimal state", minimal)):
        states = [w.state if change is None else change(w.state) for w in writes]
        passes = []
        for _ in range(5):
            known = None
            t0 = time.process_time_ns()
            for state in states:
                known = split_state(state, known).known
            passes.append((time.process_time_ns() - t0) / len(states) / 1000)
        out[name] = statistics.median(passes)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").strip().splitlines()[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS, help=f"replays of each variant (default {ROUNDS})")
    parser.add_argument("--runs", type=int, default=3, help="timed recordings of the whole run (default 3)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    args = parser.parse_args()
    load_at_start = round(os.getloadavg()[0], 2)
    with tempfile.TemporaryDirectory(prefix="bench_plan_state_") as name:
        tmp = Path(name)
        created, writes, final = record(tmp)
        recorded = run_cost(tmp, args.runs)
        runs = variants(created, writes)
        shape = inspect_parts(tmp, created, writes)
        detection = detection_cost(writes)
        results = {sync: measure(tmp, sync, runs, args.rounds) for sync in ("FULL", "NORMAL")}
    targets = [
        Target(f"µs/step with the plan / {base} ({sync})", res[base]["ratio"]["median"], TARGET)
        for base in BASES
        for sync, res in results.items()
    ]
    info = {**machine(), "load_avg_1m_at_start": load_at_start}
    out = {
        "benchmark": "plan_state",
        "machine": info,
        "steps": len(writes),
        "run_status": final.status.value,
        "shape": shape,
        "recorded_run": recorded,
        "split_state_cpu_us_per_step": detection,
        "results": results,
        "targets": [t.as_dict() for t in targets],
    }
    rows = [
        [
            sync,
            name,
            f"{res[name]['us_per_step']:.1f}",
            f"{res[name]['cpu_us']:.1f}",
            f"{res[name]['bytes'] / 1024:.0f}",
        ]
        for sync, res in results.items()
        for name in res
    ]
    ratio_rows = [
        [
            sync,
            f"plan / {base}",
            _ratio_text(res[base]["ratio"]),
            _ratio_text(res[base]["cpu_ratio"]),
        ]
        for sync, res in results.items()
        for base in BASES
    ]
    tables = [
        table(
            f"the payment run's {len(writes)} step writes replayed (median of {args.rounds} replays' means)",
            ("synchronous", "state", "µs/step", "CPU µs/step", "database KiB"),
            rows,
        ),
        table(
            f"ratios within each round: median [min - max] of {args.rounds}",
            ("synchronous", "ratio", "wall µs/step", "CPU µs/step"),
            ratio_rows,
        ),
        table(
            "finding unchanged memo entries: split_state alone (sealed ones by their text, others serialized)",
            ("state", "CPU µs/step"),
            [[name, f"{us:.1f}"] for name, us in detection.items()],
        ),
        table("what the run stores", ("measure", "value"), [[k, v] for k, v in shape.items()]),
        table(
            f"the payment run itself, recorded again: median of {args.runs} (the whole loop per step)",
            ("measure", "ms/step"),
            [["CPU", f"{recorded['cpu_ms_per_step']:.2f}"], ["wall", f"{recorded['wall_ms_per_step']:.2f}"]],
        ),
        targets_table(targets),
        f"load average {info['load_avg_1m_at_start']} at the start (1 min; the machine line: at the end):"
        " at NORMAL a step is CPU-bound, and a busy machine widens the wall-time ratios; the CPU ratios move less.",
    ]
    emit(args.json, out, tables)


def _ratio_text(r: dict[str, float]) -> str:
    return f"{r['median']:.2f}x [{r['min']:.2f} - {r['max']:.2f}]"


def inspect_parts(tmp: Path, created: tuple[RunState, list[NewEvent]], writes: list[StepWrite]) -> dict[str, Any]:
    """One replay at NORMAL, then what it stored: the memo's size, the row's, the parts written."""
    path = tmp / "inspect.db"
    replay(path, "NORMAL", created, writes)
    db = sqlite3.connect(path)
    try:
        row = db.execute("SELECT length(snapshot) FROM runs").fetchone()[0]
        checkpoints = db.execute("SELECT count(*), coalesce(sum(length(snapshot)), 0) FROM checkpoints").fetchone()
        try:
            parts = db.execute("SELECT count(*), coalesce(sum(length(body)), 0) FROM state_parts").fetchone()
        except sqlite3.OperationalError:  # a store from before parts (for a before/after comparison)
            parts = (0, 0)
    finally:
        db.close()
    last = writes[-1].state
    return {
        "state JSON per step, whole (bytes)": len(last.model_dump_json()),
        "memo JSON (bytes)": len(last.model_dump_json(include={"memo"})),
        "run row snapshot at the end (bytes)": row,
        "parts written (count / bytes)": f"{parts[0]} / {parts[1]}",
        "checkpoints (count / snapshot bytes)": f"{checkpoints[0]} / {checkpoints[1]}",
    }


if __name__ == "__main__":
    main()
