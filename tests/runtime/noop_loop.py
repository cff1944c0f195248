"""The loop tests' agent: a scripted ReAct model that calls a no-op tool ``steps`` times, then finishes."""

from __future__ import annotations

from typing import Any

from stateward import Agent, Budget, ToolRegistry, tool
from stateward.controllers.react import ReActController
from stateward.core.state import AgentRef
from stateward.models.base import ModelRequest
from stateward.models.scripted import ScriptedModel


def noop_agent(steps: int) -> tuple[Agent, ScriptedModel]:
    """The agent and its model (whose ``calls`` hold every request it was sent)."""

    @tool(description="Do nothing.")
    def noop(i: int) -> dict[str, int]:
        return {"i": i}

    def policy(request: ModelRequest) -> dict[str, Any]:
        seen = len(request.observations)
        if seen >= steps:
            return {"type": "FINISH", "reason": "done"}
        return {"type": "EXECUTE_TOOL", "action": "noop", "args": {"i": seen}}

    model = ScriptedModel(policy)
    agent = Agent(
        name="noop",
        controller=ReActController(model),
        tools=ToolRegistry([noop]),
        ref=AgentRef(name="tests:none"),
        budget=Budget(max_steps=steps + 1),
    )
    return agent, model
