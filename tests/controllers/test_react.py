"""ReAct sees only the actions it was given; anything else it proposes is refused before any tool runs."""

from __future__ import annotations

from typing import Any

from stateward import Agent, Budget, RunStatus, Runtime, ToolRegistry, tool
from stateward.controllers.react import ReActController
from stateward.core.events import EventType
from stateward.core.state import AgentRef
from stateward.models.base import ModelRequest
from stateward.models.scripted import ScriptedModel


def test_an_action_outside_the_controllers_subset_is_neither_shown_nor_run(runtime: Runtime) -> None:
    shown: list[set[str]] = []
    deleted: list[str] = []

    @tool(description="Read a record.")
    def read(key: str) -> dict[str, str]:
        return {"value": key}

    @tool(description="Delete a record.")
    def delete(key: str) -> dict[str, str]:
        deleted.append(key)
        return {"deleted": key}

    def model(request: ModelRequest) -> dict[str, Any]:
        shown.append({a.name for a in request.visible_actions})
        if len(shown) == 1:
            return {"type": "EXECUTE_TOOL", "action": "delete", "args": {"key": "everything"}}
        return {"type": "FINISH", "reason": "done"}

    agent = Agent(
        name="reader",
        controller=ReActController(ScriptedModel(model), actions=["read"]),
        tools=ToolRegistry([read, delete]),
        ref=AgentRef(name="tests:none"),
        budget=Budget(max_steps=5),
    )
    state = runtime.start(agent, "look, do not touch")
    assert shown[0] == {"read"}
    assert deleted == []
    events = runtime.store.read_events(state.run_id)
    assert not [e for e in events if e.type is EventType.TOOL_ATTEMPTED]
    refused = [e.payload for e in events if e.type is EventType.RUNTIME_VALIDATED]
    assert (refused[0]["runtime_decision"], refused[0]["code"]) == ("rejected", "action_not_visible")
    assert (state.status, state.terminal_reason, state.usage.rejected_signals) == (
        RunStatus.FAILED,
        "rejected_signal",
        1,
    )


def _looping_agent(model: ScriptedModel, read: Any, **controller: Any) -> Agent:
    return Agent(
        name="looper",
        controller=ReActController(model, **controller),
        tools=ToolRegistry([read]),
        ref=AgentRef(factory="tests:none"),
        budget=Budget(max_steps=20),
    )


def test_the_same_call_with_the_same_result_three_times_ends_the_run_as_no_progress(runtime: Runtime) -> None:
    @tool(description="Read a record.")
    def read(key: str) -> dict[str, str]:
        return {"value": "unchanged"}

    model = ScriptedModel(lambda r: {"type": "EXECUTE_TOOL", "action": "read", "args": {"key": "a"}})
    state = runtime.start(_looping_agent(model, read), "loop")
    assert (state.status, state.terminal_reason) == (RunStatus.FAILED, "no_progress")
    assert (state.usage.tool_attempts, len(model.calls)) == (3, 3)  # the fourth model call is never made
    events = runtime.store.read_events(state.run_id)
    received = [e.payload for e in events if e.type is EventType.SIGNAL_RECEIVED]
    assert received[-1]["signal_source"] == "controller"


def test_repeating_a_call_whose_result_changes_is_progress(runtime: Runtime) -> None:
    seen: list[int] = []

    @tool(description="Poll a job.")
    def read(key: str) -> dict[str, int]:
        seen.append(1)
        return {"done_percent": len(seen) * 20}

    def policy(request: ModelRequest) -> dict[str, Any]:
        if len(request.observations) < 5:
            return {"type": "EXECUTE_TOOL", "action": "read", "args": {"key": "job"}}
        return {"type": "FAIL", "reason": "gave up"}

    state = runtime.start(_looping_agent(ScriptedModel(policy), read), "poll")
    assert (state.terminal_reason, state.usage.tool_attempts) == ("gave up", 5)


def test_the_repeat_limit_is_configurable(runtime: Runtime) -> None:
    @tool(description="Read a record.")
    def read(key: str) -> dict[str, str]:
        return {"value": "unchanged"}

    model = ScriptedModel(lambda r: {"type": "EXECUTE_TOOL", "action": "read", "args": {"key": "a"}})
    state = runtime.start(_looping_agent(model, read, max_repeats=5), "loop")
    assert (state.terminal_reason, state.usage.tool_attempts) == ("no_progress", 5)
    unguarded = runtime.start(_looping_agent(model, read, max_repeats=None), "loop")
    assert unguarded.terminal_reason == "budget_exhausted"


def test_a_nan_in_a_models_arguments_is_a_named_rejection_not_a_crash(runtime: Runtime) -> None:
    @tool(description="Pay.")
    def read(key: str, amount: float) -> dict[str, str]:
        raise AssertionError("never reached")

    text = '{"type": "EXECUTE_TOOL", "action": "read", "args": {"key": "a", "amount": NaN}}'
    state = runtime.start(_looping_agent(ScriptedModel(lambda r: text), read), "pay")
    assert (state.status, state.terminal_reason, state.usage.rejected_signals) == (
        RunStatus.FAILED,
        "rejected_signal",
        1,
    )
    refused = [e.payload for e in runtime.store.read_events(state.run_id) if e.type is EventType.RUNTIME_VALIDATED]
    assert refused[-1]["code"] == "NON_FINITE_NUMBER"
