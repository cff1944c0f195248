"""``agent_tool``: another registered agent, offered to a model as one tool. A call is a child run.

The call goes through the gateway like any other (permissions, approvals, scope, the call budget); its handler
only states what the child is asked (a goal, and bounds it may ask to be held to). The Runtime then starts the
child run, waits for it durably and gives its outcome back as the call's observation (runtime/children.py).
"""

from __future__ import annotations

from typing import Any

from stateward.core.budget import Budget
from stateward.core.errors import UserError
from stateward.core.run_inputs import check_goal
from stateward.core.state import ChildHandoff

from .errors import ToolInvalidArgument
from .spec import ChildAgent, ToolSpec

__all__ = ["ChildHandoff", "agent_tool"]


def agent_tool(
    agent: str,
    *,
    name: str | None = None,
    description: str | None = None,
    params: dict[str, Any] | None = None,
    budget: Budget | None = None,
    permission: str | None = None,
    requires_approval: bool = False,
    approver_role: str | None = None,
    on_handoff: ChildHandoff = ChildHandoff.ANSWER_IN_CHILD,
) -> ToolSpec:
    """A tool that runs the registered agent ``agent`` (built from ``params``) as a child run on the goal the
    model gives. ``budget``: the most the child may spend in each dimension (never more than the caller has
    left; None: all the caller has left); a call may ask for less (``max_steps`` and friends)."""

    def call(
        goal: str,
        max_steps: int | None = None,
        max_model_calls: int | None = None,
        max_tool_calls: int | None = None,
    ) -> dict[str, Any]:
        try:
            check_goal(goal)
        except UserError as exc:  # the model's call is wrong, not the tool: an INVALID_ARGUMENT it can see
            raise ToolInvalidArgument(exc.message) from None
        if any(v is not None and v < 0 for v in (max_steps, max_model_calls, max_tool_calls)):
            raise ToolInvalidArgument("a child run's bounds are 0 or more")
        asked = {"max_steps": max_steps, "max_model_calls": max_model_calls, "max_tool_calls": max_tool_calls}
        return {"goal": goal, "asked": {k: v for k, v in asked.items() if v is not None}}

    return ToolSpec(
        name=name or agent.replace("-", "_"),
        description=description or f"Ask the agent {agent!r} to do a goal; returns its outcome.",
        handler=call,
        permission=permission,
        requires_approval=requires_approval,
        approver_role=approver_role,
        child_agent=ChildAgent(agent=agent, params=dict(params or {}), budget=budget, on_handoff=on_handoff),
    )
