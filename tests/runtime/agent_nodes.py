"""Parents that start child runs from a workflow ``AgentNode`` and from a plan item of type AGENT (their
children are ``child_family``'s refund agent). ``main`` is what a process a test SIGKILLs runs."""

from __future__ import annotations

from tests.runtime import child_family as family

from stateward import Agent, AgentRegistry, Budget, FailNode, FinishNode, Runtime, ToolRegistry, WorkflowController
from stateward.controllers.workflow import AgentNode, DecisionContext
from stateward.tools import agent_tool


def _goal(ctx: DecisionContext) -> str:
    return f"refund {ctx.state.goal.split()[-1]}"


def workflow_agent(guarded: bool = False, child_steps: int = 5) -> Agent:
    """Refund the order the goal names by a refund-agent child, then finish (or fail when the child did)."""
    nodes = [
        AgentNode("refund", "refund_agent", goal=_goal, next="done", on_failure="failed", max_steps=child_steps),
        FinishNode("done", reason="refunded by the refund agent"),
        FailNode("failed", reason="the refund agent failed"),
    ]
    return Agent(
        name="refund-workflow",
        controller=WorkflowController(nodes),
        tools=ToolRegistry([agent_tool("refund-agent", params={"guarded": guarded}, budget=Budget(max_steps=8))]),
        budget=Budget(max_steps=20),
        approver_role="ops",
    )


def registry() -> AgentRegistry:
    agents = family.registry()
    agents.register("refund-workflow", workflow_agent)
    return agents


def main(url: str, kill_at: str, nth: int) -> None:
    runtime = Runtime.open(url, agents=registry(), faults=family.KillAt(kill_at, nth), lease=family.LEASE)
    runtime.start(runtime.agents.create("refund-workflow"), goal="refund order A-1", run_id="root")
    runtime.close()
