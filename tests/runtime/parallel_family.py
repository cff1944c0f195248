"""A parent that hands two orders to two refund-agent children in one call (a ``parallel`` agent tool),
waits for both, and finishes with what they answered. ``main`` is what a process a test SIGKILLs runs."""

from __future__ import annotations

from typing import Any

from tests.runtime import child_family as family

from stateward import Agent, AgentRegistry, Budget, ReActController, Runtime, ToolRegistry
from stateward.models.base import ModelRequest
from stateward.testing import ScriptedModel
from stateward.tools import agent_tool


def _fan_out(request: ModelRequest) -> dict[str, Any]:
    if not request.observations:
        goals = [f"refund {o}" for o in family.ORDERS]
        return {"type": "EXECUTE_TOOL", "action": "refund_agents", "args": {"goals": goals}}
    outcome = request.observations[-1]
    said = "; ".join(str(c.get("answer")) for c in outcome["result"]["children"])
    return {"type": "FINISH", "reason": f"{outcome['status']}: {said}"}


def parallel_agent(guarded: bool = False, endless: bool = False, child_steps: int = 10, max_steps: int = 40) -> Agent:
    """Two children in one call, each carved half of at most ``child_steps`` steps."""
    both = agent_tool(
        "refund-agent",
        name="refund_agents",
        params={"guarded": guarded, "endless": endless},
        budget=Budget(max_steps=child_steps),
        parallel=2,
    )
    return Agent(
        name="fan-out",
        controller=ReActController(ScriptedModel(_fan_out)),
        tools=ToolRegistry([both]),
        budget=Budget(max_steps=max_steps, max_tool_calls=max_steps),
        approver_role="triage",
    )


def registry() -> AgentRegistry:
    agents = family.registry()
    agents.register("fan-out", parallel_agent)
    return agents


def main(url: str, kill_at: str, nth: int) -> None:
    runtime = Runtime.open(url, agents=registry(), faults=family.KillAt(kill_at, nth), lease=family.LEASE)
    runtime.start(runtime.agents.create("fan-out"), goal="refund every order", run_id="root")
    runtime.close()
