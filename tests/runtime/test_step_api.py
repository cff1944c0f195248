"""Runtime.step(): one decision, one transaction, for callers who drive runs themselves."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stateward import Agent, ReActController, RunError, RunStatus, Runtime, ToolRegistry, is_run_suspended, tool
from stateward.models.base import ModelRequest
from stateward.testing import ScriptedModel, temporary_runtime


@tool
def ping(n: int) -> int:
    """A no-op tool."""
    return n


@tool(requires_approval=True)
def launch(n: int) -> int:
    """A guarded tool."""
    return n


def agent(calls: int, action: str = "ping") -> Agent:
    def policy(request: ModelRequest) -> dict[str, Any]:
        if len(request.observations) >= calls:
            return {"type": "FINISH", "reason": "done"}
        return {"type": "EXECUTE_TOOL", "action": action, "args": {"n": len(request.observations)}}

    return Agent(name="stepper", controller=ReActController(ScriptedModel(policy)), tools=ToolRegistry([ping, launch]))


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[Runtime]:
    rt = temporary_runtime(tmp_path)
    yield rt
    rt.close()


def test_each_step_is_one_decision_and_the_run_ends_as_drive_would_end_it(runtime: Runtime) -> None:
    stepped = runtime.submit(agent(3), "ping three times")
    seqs = [runtime.store.last_seq(stepped.run_id)]
    steps = []
    state = stepped
    for _ in range(10):
        if state.status.is_terminal:
            break
        state = runtime.step(stepped.run_id)
        steps.append(state.usage.steps)
        seqs.append(runtime.store.last_seq(stepped.run_id))
    assert steps == [1, 2, 3, 4] and state.status is RunStatus.COMPLETED
    assert all(later > earlier for earlier, later in itertools.pairwise(seqs))
    assert runtime.step(stepped.run_id) == state  # an ended run is returned as it is, nothing written
    assert runtime.store.last_seq(stepped.run_id) == seqs[-1]

    driven = runtime.start(agent(3), "ping three times")
    kinds = [e.type for e in runtime.store.read_events(stepped.run_id)]
    assert kinds == [e.type for e in runtime.store.read_events(driven.run_id)]


def test_a_step_that_asks_stops_there_and_a_waiting_run_takes_no_step(runtime: Runtime) -> None:
    run = runtime.submit(agent(1, action="launch"), "launch once")
    waiting = runtime.step(run.run_id)
    assert is_run_suspended(waiting) and waiting.usage.steps == 1
    assert runtime.step(run.run_id) == waiting
    runtime.approve(run.run_id, "approval_001", by="ann", drive=False)
    assert runtime.step(run.run_id).usage.tool_attempts == 1  # the approved call, before any model call
    assert runtime.step(run.run_id).status is RunStatus.COMPLETED


def test_a_run_another_process_holds_is_refused(runtime: Runtime) -> None:
    run = runtime.submit(agent(1), "ping once")
    runtime.store.acquire_lease(run.run_id, "someone-else", 30.0)
    with pytest.raises(RunError) as err:
        runtime.step(run.run_id)
    assert err.value.code == "LEASE_HELD"
    assert runtime.get(run.run_id).usage.steps == 0
