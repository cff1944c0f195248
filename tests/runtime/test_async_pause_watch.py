"""Under the async Runtime the pause watch is a timer on the event loop, not a thread per drive.

Many runs driven at once by one AsyncWorker, each blocked in a slow read-only call (an ``async def`` tool, a
blocking tool, or a blocking model), are all paused from another Runtime: each call gives way (its task is
cancelled, or its runner thread abandoned), each run reaches PAUSED, and no thread was started to watch
them. Checked in a fresh interpreter, so that no watcher thread a synchronous test started earlier in this
process can hide one, on a store whose reads stay on the loop (SQLite NORMAL) and one whose reads leave it
(SQLite FULL).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = r"""
import asyncio, json, sys, threading, time
from typing import Any

started: list[str] = []
_start = threading.Thread.start


def recording_start(self: threading.Thread) -> None:
    if threading.current_thread() is threading.main_thread():  # the event loop's thread, not the test's helpers
        started.append(self.name)
    _start(self)


threading.Thread.start = recording_start  # type: ignore[method-assign]

from stateward import Agent, AgentRegistry, Budget, EventType, ReActController, Runtime, ToolRegistry, tool
from stateward.models.base import ModelRequest
from stateward.models.scripted import ScriptedModel
from stateward.runtime.async_worker import AsyncWorker
from stateward.store.sqlite import SQLiteStore
from stateward.testing import AsyncScriptedModel

db, synchronous, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
WAIT_S = 20.0
release = threading.Event()
in_flight: list[str] = []


@tool(description="Read slowly (async).", timeout_s=60)
async def aread(page: int) -> dict[str, Any]:
    in_flight.append("aread")
    await asyncio.sleep(WAIT_S)
    return {"text": "late"}


@tool(description="Read slowly (blocking).", timeout_s=60)
def bread(page: int) -> dict[str, Any]:
    in_flight.append("bread")
    release.wait(WAIT_S)
    return {"text": "late"}


def caller(action: str):
    def policy(req: ModelRequest) -> dict[str, Any]:
        if action == "model":  # the model call itself is the slow one
            in_flight.append("model")
            release.wait(WAIT_S)
        return {"type": "EXECUTE_TOOL", "action": action if action != "model" else "aread", "args": {"page": 1}}
    return policy


AGENTS = AgentRegistry()
KINDS = ("aread", "bread", "model")


def build(kind: str) -> Agent:
    policy = caller(kind)
    model = ScriptedModel(policy) if kind == "model" else AsyncScriptedModel(policy)
    return Agent(name=f"slow-{kind}", controller=ReActController(model), tools=ToolRegistry([aread, bread]),
                 budget=Budget(max_steps=4))


for kind in KINDS:
    AGENTS.register(f"slow-{kind}", lambda kind=kind: build(kind))

runtime = Runtime(SQLiteStore(db, synchronous=synchronous), agents=AGENTS)
ids = [runtime.submit(build(KINDS[i % 3]), f"read {i}").run_id for i in range(runs)]
before = len(started)


async def main() -> None:
    worker = AsyncWorker(runtime, concurrency=runs, poll_s=0.02)
    driving = asyncio.create_task(worker.arun(idle_exit_s=0.5))
    deadline = time.monotonic() + WAIT_S
    while len(in_flight) < runs and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    other = Runtime(SQLiteStore(db, synchronous=synchronous))
    for run_id in ids:
        await asyncio.to_thread(other.pause, run_id, by="test")
    other.close()
    await asyncio.wait_for(driving, WAIT_S)
    during.extend(started[before:])


during: list[str] = []
asyncio.run(main())
release.set()
statuses = sorted({runtime.get(r).status.value for r in ids})
events = [e for r in ids for e in runtime.store.read_events(r)]
cancelled = sorted({e.payload["kind"] for e in events if e.type is EventType.CALL_CANCELLED})
print(json.dumps({"in_flight": sorted(in_flight), "statuses": statuses, "cancelled": cancelled,
                  "threads": during}))
"""


@pytest.mark.parametrize("synchronous", ["NORMAL", "FULL"])
def test_a_pause_reaches_many_async_runs_in_flight_without_a_watcher_thread(tmp_path: Path, synchronous: str) -> None:
    runs = 12
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "w.db"), synchronous, str(runs)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["in_flight"] == sorted(["aread", "bread", "model"] * (runs // 3))
    assert found["statuses"] == ["PAUSED"]
    assert found["cancelled"] == ["model", "tool"]
    # Threads the loop's thread started meanwhile: one runner thread per blocking call in flight (a blocking
    # tool or model), the store's pool (FULL: its calls leave the loop), the loop's executor (the test's own
    # to_thread, and FULL's watch reads). None watched a drive: no thread per run, none for the pause watch.
    # (The test's other Runtime may take over a run whose lease lapsed on a busy machine: its threads are not
    # the loop's.)
    kinds = {name.rstrip("0123456789").rstrip("-_") for name in found["threads"]}
    assert kinds <= {"stateward-call", "stateward-store", "asyncio", "stateward-wal-checkpoint"}, found["threads"]
    blocking_calls = 2 * runs // 3
    assert sum(name.startswith("stateward-call") for name in found["threads"]) <= blocking_calls
