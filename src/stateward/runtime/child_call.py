"""A call to another agent, as data: the child run it names and the observation its end makes. Nothing here
performs I/O; ``children.py`` starts the child and hands its outcome back (through ``transition.py``).

The child's run id is derived from the parent's run id and the call's idempotency key, so a parent that
crashes or is resumed and makes the same call again names the same child: starting it is idempotent.
"""

from __future__ import annotations

from typing import Any

from stateward.core.budget import Budget, Usage, carve, spent, split
from stateward.core.canonical import sha256_hex
from stateward.core.contract import Observation, OutcomeStatus
from stateward.core.decision import ControlDecision
from stateward.core.errors import ErrorCode
from stateward.core.state import (
    ChildCall,
    ChildHandoff,
    HandoffEscalation,
    PendingRequest,
    RequestKind,
    RunState,
)
from stateward.core.status import RunStatus
from stateward.tools.spec import ChildAgent
from stateward.tools.types import ToolOutcome

DELIVERED = frozenset({RunStatus.COMPLETED, RunStatus.PARTIALLY_COMPLETED})
_FAILURE_BY_STATUS = {RunStatus.CANCELLED: ErrorCode.CHILD_RUN_CANCELLED, RunStatus.FAILED: ErrorCode.CHILD_RUN_FAILED}


def child_run_id(parent_run_id: str, idempotency_key: str) -> str:
    """The child run of the parent's call with ``idempotency_key``: the same call, the same child."""
    return f"run_{sha256_hex(f'{parent_run_id}:{idempotency_key}')[:24]}"


def child_calls(
    state: RunState,
    declared: ChildAgent,
    decision: ControlDecision,
    outcome: ToolOutcome,
    parent_role: str | None = None,
) -> tuple[ChildCall, ...]:
    """The child runs an agent tool's call starts: one per goal the call gave (one, unless the tool is
    ``parallel``), their budget carved from what ``state`` (the parent, this step counted) has left, held to
    what the tool declares and the call asked, and shared equally between them; ``parent_role``, the parent
    agent's approver role, answers their handoffs if the tool escalates them. One goal keeps the call's own
    idempotency key; several take ``key#i``, so each child is the same child on every replay of the call."""
    result: dict[str, Any] = outcome.result if isinstance(outcome.result, dict) else {}
    key = outcome.idempotency_key or ""
    asked = Budget(**{"max_steps": None, **result.get("asked", {})})
    goals = [str(g) for g in result["goals"]] if "goals" in result else [str(result.get("goal", ""))]
    carved = split(carve(state.budget, state.usage, declared.budget, asked), len(goals))
    keys = [key] if "goals" not in result else [f"{key}#{i}" for i in range(len(goals))]
    return tuple(
        ChildCall(
            run_id=child_run_id(state.run_id, each),
            agent=declared.agent,
            params=declared.params,
            goal=goal,
            budget=carved,
            tool=outcome.tool,
            args=decision.args or {},
            idempotency_key=each,
            on_handoff=declared.on_handoff,
            parent_role=parent_role,
        )
        for goal, each in zip(goals, keys, strict=True)
    )


def escalated(state: RunState, pending: PendingRequest) -> PendingRequest:
    """``pending`` as the run asks it: a child's HANDOFF request, when the call that started the child
    escalates its handoffs, goes to the parent's approver role (and says so); every other request as it is."""
    link = state.parent
    if (
        pending.kind is not RequestKind.HANDOFF
        or link is None
        or link.on_handoff is not ChildHandoff.ESCALATE_TO_PARENT
    ):
        return pending
    escalation = HandoffEscalation(parent_run_id=link.run_id, child_role=pending.approver_role)
    return pending.model_copy(update={"approver_role": link.parent_role, "escalation": escalation})


def child_observation(
    call: ChildCall, step: int, child: RunState | None, *, answer: str | None = None, error: str | None = None
) -> dict[str, Any]:
    """The call's observation once the child ended: SUCCESS with its result when it completed (or delivered
    part: ``partial``), else FAILED with CHILD_RUN_FAILED or CHILD_RUN_CANCELLED (CHILD_AGENT_UNAVAILABLE when
    no child could start: ``child`` is None and ``error`` says why)."""
    code: str | None
    if child is None:
        result: dict[str, Any] = {"child_run_id": call.run_id, "agent": call.agent, "error": error}
        status, code = OutcomeStatus.FAILED, ErrorCode.CHILD_AGENT_UNAVAILABLE.value
    else:
        delivered = child.status in DELIVERED
        status = OutcomeStatus.SUCCESS if delivered else OutcomeStatus.FAILED
        failure = _FAILURE_BY_STATUS.get(child.status, ErrorCode.CHILD_RUN_FAILED)
        code = None if delivered else failure.value
        result = {
            "child_run_id": child.run_id,
            "agent": call.agent,
            "status": child.status.value,
            "terminal_reason": child.terminal_reason,
            "partial": child.status is RunStatus.PARTIALLY_COMPLETED,
            "answer": answer,
            "facts": child.facts,
            "artifacts": child.artifacts,
            "usage": spent(child.usage).counts(),
        }
    observation = Observation(
        step=step, action=call.tool, args=call.args, status=status, result=result, error_code=code
    )
    return observation.model_dump(mode="json")


def children_observation(
    calls: tuple[ChildCall, ...], step: int, ended: list[tuple[RunState, str | None]]
) -> dict[str, Any]:
    """A parallel call's observation once every child ended: each child's outcome (in the call's order) under
    ``children``, their spend summed under ``usage``; SUCCESS when every child delivered, else FAILED with the
    first failure's code. One child's call observes as ``child_observation`` says."""
    if len(calls) == 1:
        ((child, answer),) = ended
        return child_observation(calls[0], step, child, answer=answer)
    each = [
        child_observation(call, step, child, answer=answer) for call, (child, answer) in zip(calls, ended, strict=True)
    ]
    failed = next((o for o in each if o["status"] != OutcomeStatus.SUCCESS), None)
    usage: dict[str, int] = {}
    for child, _ in ended:
        for name, n in spent(child.usage).counts().items():
            usage[name] = usage.get(name, 0) + n
    result = {"child_run_ids": [c.run_id for c in calls], "children": [o["result"] for o in each], "usage": usage}
    observation = Observation(
        step=step,
        action=calls[0].tool,
        args=calls[0].args,
        status=OutcomeStatus.FAILED if failed is not None else OutcomeStatus.SUCCESS,
        result=result,
        error_code=None if failed is None else failed["error_code"],
    )
    return observation.model_dump(mode="json")


def total_usage(states: list[RunState]) -> Usage:
    """What some runs used, together (a parallel call's children: what their parent's usage goes up by)."""
    fields = Usage.model_fields
    return Usage(**{name: sum(getattr(s.usage, name) for s in states) for name in fields})
