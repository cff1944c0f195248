"""A new run as every backend creates it: checked inputs, at least one bound, and its ``run_started`` event."""

from __future__ import annotations

import uuid

from stateward.core.budget import Budget
from stateward.core.errors import ErrorCode, UserError
from stateward.core.events import NewEvent
from stateward.core.run_inputs import check_goal, check_run_id, check_tenant
from stateward.core.state import RunState
from stateward.runtime import children
from stateward.runtime.agent import Agent


def new_run_id() -> str:
    """A fresh, random run id."""
    return f"run_{uuid.uuid4().hex[:16]}"


def new_run(
    agent: Agent, goal: str, *, run_id: str | None = None, budget: Budget | None = None, tenant: str = "default"
) -> tuple[RunState, NewEvent]:
    """A new RUNNING run of ``agent`` and its ``run_started`` event, every backend's: a run without any bound
    (steps, model or tool calls, tokens) is refused, so are a blank or oversized goal, a malformed tenant or
    run id (UNBOUNDED_RUN, INVALID_GOAL, INVALID_TENANT, INVALID_RUN_ID)."""
    check_goal(goal)
    check_tenant(tenant)
    if run_id is not None:
        check_run_id(run_id)
    limits = budget or agent.budget
    if all(value is None for value in limits.model_dump().values()):
        raise UserError(
            "a run needs at least one bound (max_steps, max_model_calls, max_tool_calls or tokens)",
            code=ErrorCode.UNBOUNDED_RUN,
        )
    state = RunState(run_id=run_id or new_run_id(), tenant=tenant, agent=agent.agent_ref, goal=goal, budget=limits)
    return state, children.run_started(agent, state)
