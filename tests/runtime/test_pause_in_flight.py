"""PAUSING cancels the long calls that can be cancelled (source 11.2), and waits for the ones that cannot.

A pause asked while a model call or a read-only tool call is in flight cancels that call: the run reaches
PAUSED without waiting for it, the cancelled call is recorded (``call_cancelled``) and is neither a failure
nor a charged attempt, its late result is discarded, and a resume makes the call again. A side-effecting call
in flight is never cancelled: the run pauses once it has answered, and a resume does not repeat it.
The pause comes from outside the driving thread: another Runtime on the same store, or ``stateward pause``
in another process.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stateward import Agent, Budget, EventType, RunState, RunStatus, Runtime, ToolContext, ToolRegistry, tool
from stateward.controllers.react import ReActController
from stateward.core.state import AgentRef
from stateward.models.base import ModelRequest
from stateward.models.scripted import ScriptedModel

WAIT_S = 20.0  # how long a slow call would take: far longer than a pause may take to land


def _agent(tool_fn: Any, policy: Callable[[ModelRequest], Any]) -> Agent:
    return Agent(
        name="slow",
        controller=ReActController(ScriptedModel(policy)),
        tools=ToolRegistry([tool_fn]),
        ref=AgentRef(name="tests:slow"),
        budget=Budget(max_steps=6),
    )


def _read_then_finish(req: ModelRequest) -> dict[str, Any]:
    if req.observations:
        return {"type": "FINISH", "reason": "read"}
    return {"type": "EXECUTE_TOOL", "action": "read", "args": {"page": 1}}


def _start_in_thread(runtime: Runtime, agent: Agent) -> tuple[threading.Thread, dict[str, RunState]]:
    out: dict[str, RunState] = {}
    thread = threading.Thread(target=lambda: out.setdefault("state", runtime.start(agent, "read the page")))
    thread.start()
    return thread, out


def _events(runtime: Runtime, run_id: str, kind: EventType) -> list[dict[str, Any]]:
    return [e.payload for e in runtime.store.read_events(run_id) if e.type is kind]


def test_a_pause_cancels_a_slow_read_only_tool_call_and_a_resume_makes_it_again(tmp_path: Path) -> None:
    calls: list[int] = []
    in_flight, release, finished = threading.Event(), threading.Event(), threading.Event()

    @tool(description="Read a page (slowly, the first time).", timeout_s=60)
    def read(page: int, ctx: ToolContext) -> dict[str, Any]:
        calls.append(page)
        if len(calls) == 1:
            in_flight.set()
            release.wait(WAIT_S)  # a long read: the pause must not wait for it
            finished.set()
            return {"text": "late"}
        return {"text": "page one"}

    db = tmp_path / "r.db"
    runtime = Runtime.open(str(db))
    agent = _agent(read, _read_then_finish)
    runtime.agents.register("tests:slow", lambda: agent)
    thread, out = _start_in_thread(runtime, agent)
    try:
        assert in_flight.wait(WAIT_S)
        run_id = runtime.list_runs().items[0].run_id
        other = Runtime.open(str(db))  # as another process would: its own store connection
        other.pause(run_id, by="alice")
        thread.join(WAIT_S)
        assert not thread.is_alive()
        paused = out["state"]
        assert paused.status is RunStatus.PAUSED and not finished.is_set()  # paused before the read answered
        [cancelled] = _events(runtime, run_id, EventType.CALL_CANCELLED)
        assert (cancelled["kind"], cancelled["name"], cancelled["reason"]) == ("tool", "read", "pause_requested")
        assert cancelled["late_result"] == "discarded"
        # Not a failure and not a charged attempt: no tool_attempted, no tool attempt counted; the model call
        # that proposed the read did answer, so it is counted.
        assert _events(runtime, run_id, EventType.TOOL_ATTEMPTED) == []
        assert (paused.usage.tool_attempts, paused.usage.model_calls, paused.usage.steps) == (0, 1, 0)
        moves = _events(runtime, run_id, EventType.STATE_TRANSITION)
        transitions = [(t["state_before"], t["state_after"]) for t in moves]
        assert transitions[-2:] == [("RUNNING", "PAUSING"), ("PAUSING", "PAUSED")]
        other.close()
    finally:
        release.set()  # the abandoned read returns now; nobody takes its result
    assert finished.wait(WAIT_S)

    done = runtime.resume(run_id)
    assert done.status is RunStatus.COMPLETED and calls == [1, 1]  # the read was made again
    [attempt] = _events(runtime, run_id, EventType.TOOL_ATTEMPTED)
    assert attempt["observation"]["status"] == "SUCCESS" and attempt["observation"]["result"] == {"text": "page one"}
    assert done.usage.tool_attempts == 1
    runtime.close()


def test_a_pause_from_another_process_cancels_a_slow_model_call(tmp_path: Path) -> None:
    asked: list[int] = []
    in_flight, release = threading.Event(), threading.Event()

    def slow_first(req: ModelRequest) -> dict[str, Any]:
        asked.append(len(req.observations))
        if len(asked) == 1:
            in_flight.set()
            release.wait(WAIT_S)  # a long model call
        return _read_then_finish(req)

    @tool(description="Read a page.")
    def read(page: int) -> dict[str, Any]:
        return {"text": "page one"}

    db = tmp_path / "m.db"
    runtime = Runtime.open(str(db))
    agent = _agent(read, slow_first)
    runtime.agents.register("tests:slow", lambda: agent)
    thread, out = _start_in_thread(runtime, agent)
    try:
        assert in_flight.wait(WAIT_S)
        run_id = runtime.list_runs().items[0].run_id
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        cli = [sys.executable, "-m", "stateward.cli.main", "pause", run_id, "--db", str(db)]
        paused_by_cli = subprocess.run(cli, capture_output=True, text=True, env=env, timeout=120, check=False)
        assert paused_by_cli.returncode == 0, paused_by_cli.stderr
        thread.join(WAIT_S)
        assert not thread.is_alive() and not release.is_set()
        paused = out["state"]
        assert paused.status is RunStatus.PAUSED
        [cancelled] = _events(runtime, run_id, EventType.CALL_CANCELLED)
        assert (cancelled["kind"], cancelled["reason"]) == ("model", "pause_requested")
        assert paused.usage.model_calls == 0 and paused.usage.steps == 0  # no reply: nothing decided, nothing kept
    finally:
        release.set()

    done = runtime.resume(run_id)
    assert done.status is RunStatus.COMPLETED
    assert asked == [0, 0, 1]  # the cancelled call was made again, then the run went on
    runtime.close()


def test_a_side_effecting_call_in_flight_is_waited_for_not_cancelled(tmp_path: Path) -> None:
    executed: list[str] = []
    in_flight, pause_asked = threading.Event(), threading.Event()

    @tool(description="Send the page (a side effect).", side_effect=True, timeout_s=60)
    def read(page: int, ctx: ToolContext) -> dict[str, Any]:
        executed.append(ctx.idempotency_key)
        in_flight.set()
        pause_asked.wait(WAIT_S)
        threading.Event().wait(1.0)  # well past the pause watch's poll: it has seen the request by now
        return {"sent": page}

    db = tmp_path / "s.db"
    runtime = Runtime.open(str(db))
    agent = _agent(read, _read_then_finish)
    runtime.agents.register("tests:slow", lambda: agent)
    thread, out = _start_in_thread(runtime, agent)
    assert in_flight.wait(WAIT_S)
    run_id = runtime.list_runs().items[0].run_id
    other = Runtime.open(str(db))
    other.pause(run_id)
    pause_asked.set()
    thread.join(WAIT_S)
    paused = out["state"]
    assert paused.status is RunStatus.PAUSED
    assert _events(runtime, run_id, EventType.CALL_CANCELLED) == []
    [attempt] = _events(runtime, run_id, EventType.TOOL_ATTEMPTED)
    assert attempt["observation"]["status"] == "SUCCESS" and paused.usage.tool_attempts == 1
    other.close()

    done = runtime.resume(run_id)
    assert done.status is RunStatus.COMPLETED and len(executed) == 1  # not repeated on resume
    runtime.close()


def test_under_the_async_runtime_a_pause_cancels_the_async_tool_s_task(tmp_path: Path) -> None:
    started, cancelled = threading.Event(), threading.Event()
    calls: list[int] = []

    @tool(description="Read a page (slowly, the first time).", timeout_s=60)
    async def read(page: int) -> dict[str, Any]:
        calls.append(page)
        if len(calls) == 1:
            started.set()
            try:
                await asyncio.sleep(WAIT_S)
            except asyncio.CancelledError:
                cancelled.set()  # cooperative: the task was cancelled, not abandoned
                raise
        return {"text": "page one"}

    db = tmp_path / "a.db"
    runtime = Runtime.open(str(db))
    agent = _agent(read, _read_then_finish)
    runtime.agents.register("tests:slow", lambda: agent)

    async def scenario() -> RunState:
        run = asyncio.create_task(runtime.astart(agent, "read the page"))
        assert await asyncio.to_thread(started.wait, WAIT_S)
        run_id = runtime.list_runs().items[0].run_id
        other = Runtime.open(str(db))
        await asyncio.to_thread(other.pause, run_id)
        paused = await asyncio.wait_for(run, WAIT_S / 2)
        other.close()
        return paused

    paused = asyncio.run(scenario())
    assert paused.status is RunStatus.PAUSED and cancelled.is_set()
    [note] = _events(runtime, paused.run_id, EventType.CALL_CANCELLED)
    assert (note["kind"], note["name"]) == ("tool", "read")
    done = runtime.resume(paused.run_id)
    assert done.status is RunStatus.COMPLETED and calls == [1, 1]
    runtime.close()


def test_a_cancel_asked_during_a_slow_read_ends_the_run_without_waiting_for_it(tmp_path: Path) -> None:
    in_flight, release = threading.Event(), threading.Event()

    @tool(description="Read a page slowly.", timeout_s=60)
    def read(page: int) -> dict[str, Any]:
        in_flight.set()
        release.wait(WAIT_S)
        return {"text": "late"}

    db = tmp_path / "c.db"
    runtime = Runtime.open(str(db))
    thread, out = _start_in_thread(runtime, _agent(read, _read_then_finish))
    try:
        assert in_flight.wait(WAIT_S)
        run_id = runtime.list_runs().items[0].run_id
        other = Runtime.open(str(db))
        other.cancel(run_id, by="bob")
        thread.join(WAIT_S)
        assert not thread.is_alive() and not release.is_set()
        assert out["state"].status is RunStatus.CANCELLED
        [note] = _events(runtime, run_id, EventType.CALL_CANCELLED)
        assert (note["kind"], note["reason"]) == ("tool", "cancel_requested")
        other.close()
    finally:
        release.set()
    runtime.close()
