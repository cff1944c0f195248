"""``agent_tool``: another registered agent, offered to a model as one tool. A call is a child run.

The call goes through the gateway like any other (permissions, approvals, scope, the call budget); its handler
only states what the child is asked (a goal, and bounds it may ask to be held to). The Runtime then starts the
child run, waits for it durably and gives its outcome back as the call's observation (runtime/children.py).
"""

from __future__ import annotations

from collections.abc import Callable
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
    parallel: int = 1,
) -> ToolSpec:
    """A tool that runs the registered agent ``agent`` (built from ``params``) as a child run on the goal the
    model gives. ``budget``: the most the child may spend in each dimension (never more than the caller has
    left; None: all the caller has left); a call may ask for less (``max_steps`` and friends). ``on_handoff``: a child's
    handoff is answered by the child agent's approvers (ANSWER_IN_CHILD), or escalated to this (the calling)
    agent's approvers (ESCALATE_TO_PARENT): then only they answer it. ``parallel`` above 1: a call gives
    ``goals`` (1 to ``parallel`` of them), one child run each, run concurrently; the carve is shared equally
    and the call waits for every child."""
    declared = ChildAgent(
        agent=agent, params=dict(params or {}), budget=budget, on_handoff=on_handoff, parallel=parallel
    )
    return ToolSpec(
        name=name or agent.replace("-", "_"),
        description=description
        or (
            f"Ask the agent {agent!r} to do a goal; returns its outcome."
            if parallel == 1
            else f"Ask the agent {agent!r} to do up to {parallel} goals at once, one run each; returns their outcomes."
        ),
        handler=_one() if parallel == 1 else _many(parallel),
        permission=permission,
        requires_approval=requires_approval,
        approver_role=approver_role,
        child_agent=declared,
    )


def _asked(max_steps: int | None, max_model_calls: int | None, max_tool_calls: int | None) -> dict[str, int]:
    if any(v is not None and v < 0 for v in (max_steps, max_model_calls, max_tool_calls)):
        raise ToolInvalidArgument("a child run's bounds are 0 or more")
    asked = {"max_steps": max_steps, "max_model_calls": max_model_calls, "max_tool_calls": max_tool_calls}
    return {k: v for k, v in asked.items() if v is not None}


def _goal(goal: str) -> str:
    try:
        check_goal(goal)
    except UserError as exc:  # the model's call is wrong, not the tool: an INVALID_ARGUMENT it can see
        raise ToolInvalidArgument(exc.message) from None
    return goal


def _one() -> Callable[..., dict[str, Any]]:
    def call(
        goal: str,
        max_steps: int | None = None,
        max_model_calls: int | None = None,
        max_tool_calls: int | None = None,
    ) -> dict[str, Any]:
        return {"goal": _goal(goal), "asked": _asked(max_steps, max_model_calls, max_tool_calls)}

    return call


def _many(parallel: int) -> Callable[..., dict[str, Any]]:
    def call(
        goals: list[str],
        max_steps: int | None = None,
        max_model_calls: int | None = None,
        max_tool_calls: int | None = None,
    ) -> dict[str, Any]:
        if not 1 <= len(goals) <= parallel:
            raise ToolInvalidArgument(f"a call gives 1 to {parallel} goals, not {len(goals)}")
        return {"goals": [_goal(g) for g in goals], "asked": _asked(max_steps, max_model_calls, max_tool_calls)}

    return call
