"""Parents that start child runs from a workflow ``AgentNode`` and from a plan item of type AGENT (their
children are ``child_family``'s refund agent). ``main`` is what a process a test SIGKILLs runs."""

from __future__ import annotations

from typing import Any

from tests.runtime import child_family as family

from stateward import (
    Agent,
    AgentNode,
    AgentRegistry,
    Budget,
    FailNode,
    FinishNode,
    Runtime,
    ToolRegistry,
    WorkflowController,
)
from stateward.controllers.plan_run import PlanRunConfig, PlanRunController
from stateward.controllers.plan_support import plan_finish_policy, plan_run_tools
from stateward.core.contract import DecisionContext
from stateward.models.base import ModelRequest
from stateward.planning.budget import BudgetLimits
from stateward.planning.goal import GoalContract
from stateward.testing import ScriptedModel
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


PLAN = {
    "plan_id": "p1",
    "version": 1,
    "goal_id": "g1",
    "milestones": [{"milestone_id": "M1", "title": "all"}],
    "work_items": [
        {
            "work_item_id": "W1",
            "milestone_id": "M1",
            "title": "refund A-1",
            "task_type": "AGENT",
            "required_capabilities": ["refund_agent"],
            "output_spec": {"artifact_type": "refund"},
            "completion_criteria": ["refund recorded"],
            "max_react_steps": 4,
            "estimated_cost": {"tool_calls": 2, "model_calls": 0, "tokens": 0},
        }
    ],
}


def _no_worker(request: ModelRequest) -> dict[str, Any]:
    raise AssertionError("an AGENT item asks no model")


def plan_agent(guarded: bool = False, endless: bool = False, max_model_calls: int | None = None) -> Agent:
    """A plan run whose one work item (type AGENT) is done by a refund-agent child run (``endless``: a
    child that never finishes, until its carve ends it)."""
    goal = GoalContract(goal_id="g1", objective="refund A-1")
    config = PlanRunConfig(goal=goal, deliverable="refund", budget=BudgetLimits(max_model_calls=max_model_calls))
    controller = PlanRunController(ScriptedModel(lambda req: PLAN), ScriptedModel(_no_worker), config)
    child = agent_tool("refund-agent", params={"guarded": guarded, "endless": endless}, budget=Budget(max_steps=8))
    return Agent(
        name="refund-planner",
        controller=controller,
        tools=ToolRegistry([child, *plan_run_tools()]),
        finish_policy=plan_finish_policy,
        budget=Budget(max_steps=30),
    )


def registry() -> AgentRegistry:
    agents = family.registry()
    agents.register("refund-workflow", workflow_agent)
    agents.register("refund-planner", plan_agent)
    return agents


def main(url: str, kill_at: str, nth: int, agent: str = "refund-workflow") -> None:
    runtime = Runtime.open(url, agents=registry(), faults=family.KillAt(kill_at, nth), lease=family.LEASE)
    runtime.start(runtime.agents.create(agent), goal="refund order A-1", run_id="root")
    runtime.close()
