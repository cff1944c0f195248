"""The synchronous Runtime's pause watch: one watcher thread per process reads each step in flight once due.

It serves every run of the process, so a read that fails (a store closed as its drive ended) must not end
it: the next step's pause is still noticed. A short step is never read for at all.
"""

from __future__ import annotations

import time
from pathlib import Path

from stateward import Agent, Budget, Runtime, ToolRegistry, tool
from stateward.controllers.react import ReActController
from stateward.core.state import AgentRef
from stateward.models.scripted import ScriptedModel
from stateward.runtime.control import ControlRequest
from stateward.runtime.pause_watch import PauseWatch
from stateward.store.sqlite import SQLiteStore

WAIT_S = 20.0


@tool(description="Nothing.")
def noop() -> dict[str, int]:
    return {}


def _run(runtime: Runtime) -> str:
    agent = Agent(
        name="idle",
        controller=ReActController(ScriptedModel(lambda req: {"type": "FINISH", "reason": "done"})),
        tools=ToolRegistry([noop]),
        ref=AgentRef(name="tests:idle"),
        budget=Budget(max_steps=2),
    )
    return runtime.submit(agent, "wait").run_id


def _set_within(token_set: object, deadline_s: float = WAIT_S) -> bool:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if token_set():  # type: ignore[operator]
            return True
        time.sleep(0.005)
    return False


def test_a_failed_read_leaves_the_watcher_serving_the_next_step(tmp_path: Path) -> None:
    runtime = Runtime(SQLiteStore(tmp_path / "w.db"))
    run_id = _run(runtime)
    closed = SQLiteStore(tmp_path / "w.db")
    closed.close()
    failing = PauseWatch(closed, run_id, poll_s=0.01)
    broken = failing.arm()  # its reads fail: the store is closed
    time.sleep(0.1)
    assert not broken.is_set()
    failing.stop()

    runtime.store.set_control(run_id, ControlRequest("pause", "tester").encode())
    watch = PauseWatch(runtime.store, run_id, poll_s=0.01)
    token = watch.arm()
    assert _set_within(token.is_set)  # the same watcher thread, still serving
    watch.stop()
    runtime.close()


def test_a_step_disarmed_before_it_is_due_is_never_read(tmp_path: Path) -> None:
    runtime = Runtime(SQLiteStore(tmp_path / "s.db"))
    run_id = _run(runtime)
    runtime.store.set_control(run_id, ControlRequest("pause", "tester").encode())
    watch = PauseWatch(runtime.store, run_id, poll_s=0.2)
    token = watch.arm()
    watch.disarm()  # a short step: over before its first read was due
    time.sleep(0.4)
    assert not token.is_set()
    runtime.close()
