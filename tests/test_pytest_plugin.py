"""The fixtures stateward ships to its users' test suites, used the way a user would (no import)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from stateward import Agent, ReActController, RunStatus, Runtime, ToolRegistry, is_run_suspended, tool
from stateward.models.base import ModelRequest
from stateward.models.scripted import ScriptedModel


def test_the_fixtures_run_an_agent_to_its_approval(
    stateward_runtime: Runtime, scripted_model: Callable[[Any], ScriptedModel]
) -> None:
    @tool(requires_approval=True)
    def refund(order: str) -> str:
        """Refund an order."""
        return order

    def policy(request: ModelRequest) -> dict[str, Any]:
        if request.observations:
            return {"type": "FINISH", "reason": "refunded"}
        return {"type": "EXECUTE_TOOL", "action": "refund", "args": {"order": "o-1"}}

    model = scripted_model(policy)
    agent = Agent(name="refunds", controller=ReActController(model), tools=ToolRegistry([refund]))
    run = stateward_runtime.start(agent, goal="refund o-1")
    assert is_run_suspended(run) and len(model.calls) == 1
    done = stateward_runtime.approve(run.run_id, "approval_001", by="qa")
    assert done.state.status is RunStatus.COMPLETED
