"""Shared helpers for the benchmarks: a realistic step write, a bare SQLite baseline, timing and output.

Not a benchmark itself (``./scripts/dev bench`` runs only ``bench_*.py``). Every ratio a benchmark
prints is against a baseline measured in the same process run, so machine speed cancels out.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stateward.core.budget import Budget, Usage
from stateward.core.events import EventType, NewEvent
from stateward.core.state import AgentRef, RunState
from stateward.store.records import StepWrite
from stateward.store.sqlite import SQLiteStore

RUN_ID = "run_0123456789abcdef"
WARMUP_RUN_ID = "run_warmup000000000"
STEP_PAYLOAD_BYTES = 200
_GOAL = (
    "Write a grounded technical article brief about retry storms from the local materials, then stop and"
    " wait for the user's confirmation. Do not write the draft before it is confirmed."
)
_AGENT = AgentRef(
    name="blog",
    params={"controller": "react", "max_steps": 12, "materials": "default", "model_spec": None},
)


# -- the realistic step -----------------------------------------------------------------------------
def run_state(step: int, run_id: str = RUN_ID) -> RunState:
    """A RUNNING snapshot shaped like the blog run's after ``step`` tool steps (~1 KB of JSON)."""
    usage = Usage(steps=step, model_calls=step, tool_attempts=step, input_tokens=624 * step, output_tokens=31 * step)
    return RunState(
        run_id=run_id,
        agent=_AGENT,
        goal=_GOAL,
        usage=usage,
        budget=Budget(max_steps=100_000),
        requests_issued=1,
        artifacts={"brief": 1},
    )


def _payload_len(payload: dict[str, Any]) -> int:
    return len(json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode())


def step_events(step: int, payload_bytes: int = STEP_PAYLOAD_BYTES) -> list[NewEvent]:
    """The three events of an EXECUTE_TOOL step (signal, validation, attempt), payloads padded to the total."""
    signal = {"signal_source": "model", "step": step, "model_calls": 1}
    validated = {"runtime_decision": "accepted", "decision_type": "EXECUTE_TOOL", "transition": "CONTINUE"}
    observation: dict[str, Any] = {"step": step, "action": "lookup", "status": "SUCCESS", "result": ""}
    attempted = {"observation": observation}
    pad = payload_bytes - _payload_len(signal) - _payload_len(validated) - _payload_len(attempted)
    observation["result"] = "r" * max(0, pad)
    return [
        NewEvent(type=EventType.SIGNAL_RECEIVED, payload=signal),
        NewEvent(type=EventType.RUNTIME_VALIDATED, payload=validated),
        NewEvent(type=EventType.TOOL_ATTEMPTED, payload=attempted),
    ]


def observation_event(step: int, payload_bytes: int = STEP_PAYLOAD_BYTES) -> list[NewEvent]:
    """A single tool_attempted event whose payload is ``payload_bytes`` long."""
    observation: dict[str, Any] = {"step": step, "action": "lookup", "status": "SUCCESS", "result": ""}
    pad = payload_bytes - _payload_len({"observation": observation})
    observation["result"] = "r" * max(0, pad)
    return [NewEvent(type=EventType.TOOL_ATTEMPTED, payload={"observation": observation})]


def step_write(step: int, events: Callable[[int], list[NewEvent]] = step_events, run_id: str = RUN_ID) -> StepWrite:
    return StepWrite(state=run_state(step, run_id), events=events(step))


def write_bytes(write: StepWrite) -> tuple[int, int]:
    """(snapshot bytes, event payload bytes) of a step write, as the store serializes them."""
    snapshot = len(write.state.model_dump_json().encode())
    return snapshot, sum(_payload_len(ev.payload) for ev in write.events)


# -- stores and the bare baseline ---------------------------------------------------------------------
class StepDriver:
    """A store with one run, committing pre-built writes in order through ``commit_step``."""

    def __init__(self, path: Path, synchronous: str, writes: Sequence[StepWrite], run_id: str = RUN_ID):
        self.store = SQLiteStore(path, synchronous=synchronous)
        self.writes = writes
        self.run_id = run_id
        self.store.create_run(run_state(0, run_id), [NewEvent(type=EventType.RUN_STARTED, payload={"goal": _GOAL})])
        self.seq = self.store.last_seq(run_id)
        self.index = 0

    def step(self) -> None:
        write = self.writes[self.index % len(self.writes)]
        self.store.commit_step(self.run_id, self.seq, write)
        self.seq += len(write.events)
        self.index += 1

    def close(self) -> None:
        self.store.close()


class BareInsert:
    """The baseline: one autocommitted ``INSERT`` of ``size`` bytes into a one-table WAL database."""

    def __init__(self, path: Path, synchronous: str, size: int):
        self.path = path
        self.synchronous = synchronous
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute(f"PRAGMA synchronous={synchronous}")
        self.db.execute("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, body TEXT NOT NULL)")
        self.body = "x" * size

    def step(self) -> None:
        self.db.execute("INSERT INTO t(body) VALUES (?)", (self.body,))

    def warm(self) -> None:
        """Insert (without fsyncs) until the WAL has wrapped, as in a database that has been in use."""
        self.db.execute("PRAGMA synchronous=NORMAL")
        until_wal_wraps(self.step, self.path)
        self.db.execute(f"PRAGMA synchronous={self.synchronous}")

    def close(self) -> None:
        self.db.close()


def warm_store(path: Path) -> StepDriver:
    """Another run's steps (at NORMAL) until the store's WAL has wrapped; keep it open while measuring.

    A fresh WAL grows with every commit, and extending a file costs more than overwriting it (at FULL an
    fsync of a growing file also flushes its size), so both sides of a comparison start wrapped.
    """
    writes = [step_write(i, run_id=WARMUP_RUN_ID) for i in range(1, 101)]
    driver = StepDriver(path, "NORMAL", writes, WARMUP_RUN_ID)
    until_wal_wraps(driver.step, path)
    return driver


def until_wal_wraps(step: Callable[[], object], path: Path, limit: int = 5000) -> int:
    """Call ``step`` until the -wal file has stopped growing for 10 calls (it restarted after a checkpoint)."""
    last, still = wal_bytes(path), 0
    for n in range(1, limit + 1):
        step()
        size = wal_bytes(path)
        still = still + 1 if size == last else 0
        last = size
        if still >= 10:
            return n
    return limit


def stored_bytes(path: Path) -> int:
    """File size of a SQLite database plus its -wal, after a ``wal_checkpoint(TRUNCATE)``."""
    db = sqlite3.connect(path)
    try:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        wal = Path(f"{path}-wal")
        return path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)
    finally:
        db.close()


def wal_bytes(path: Path) -> int:
    wal = Path(f"{path}-wal")
    return wal.stat().st_size if wal.exists() else 0


# -- timing -------------------------------------------------------------------------------------------
def time_calls(fn: Callable[[], object], n: int) -> list[int]:
    """Nanoseconds of each of ``n`` calls of ``fn``."""
    samples = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        fn()
        samples.append(time.perf_counter_ns() - t0)
    return samples


def interleaved(fns: dict[str, Callable[[], object]], rounds: int, per_round: int) -> dict[str, list[int]]:
    """Alternate blocks of ``per_round`` calls of each function, so machine noise hits all of them alike."""
    out: dict[str, list[int]] = {name: [] for name in fns}
    names = list(fns)
    for r in range(rounds):
        for name in names if r % 2 == 0 else reversed(names):
            out[name] += time_calls(fns[name], per_round)
    return out


def median_us(samples_ns: Iterable[int | float]) -> float:
    return statistics.median(samples_ns) / 1000


def mean_us(samples_ns: Iterable[int | float]) -> float:
    return statistics.fmean(samples_ns) / 1000


# -- output -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Target:
    """One measured ratio against its target (lower is better)."""

    name: str
    value: float
    limit: float

    @property
    def met(self) -> bool:
        return self.value <= self.limit

    def row(self) -> list[str]:
        return [self.name, f"{self.value:.2f}x", f"<= {self.limit:g}x", "met" if self.met else "MISSED"]

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "value": round(self.value, 4), "target": self.limit, "met": self.met}


def parse_args(doc: str | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(doc or "").strip().splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    return parser.parse_args()


def table(title: str, header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(c) for c in header], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = [
        "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))
        for row in cells
    ]
    rule = "-" * len(lines[0])
    return "\n".join([f"== {title}", lines[0], rule, *lines[1:], ""])


def targets_table(targets: Sequence[Target]) -> str:
    return table("targets", ("measure", "ratio", "target", ""), [t.row() for t in targets])


def emit(as_json: bool, result: dict[str, Any], tables: Sequence[str]) -> None:
    """Print the result as JSON, or the tables followed by the machine line."""
    if as_json:
        print(json.dumps(result, indent=2))
    else:
        print("\n".join([*tables, machine_line(result["machine"])]))


def machine() -> dict[str, Any]:
    """What the numbers were measured on, including how busy the machine was (1-minute load average)."""
    return {"cpus": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2), "sqlite": sqlite3.sqlite_version}


def machine_line(info: dict[str, Any]) -> str:
    return f"machine: {info['cpus']} CPUs, load average {info['load_avg_1m']} (1 min), SQLite {info['sqlite']}\n"
