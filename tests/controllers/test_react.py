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
