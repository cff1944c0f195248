"""What a signal must satisfy before anything moves (``handle``'s steps 1 and 2): it parses, every value in it
can be stored, and it meets its type's preconditions against the run's state and the agent's policies; and, for a
guarded call, whether an approval bound to exactly that action is already held; and the request a wait opens
(its question, kind, approver and expiry), as a value. Read-only: nothing here builds an event or changes a state
(``runtime/transition.py`` does, with what this module answers, and mints the request ids)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError

from stateward.core.canonical import action_digest, canonical_json
from stateward.core.contract import RefusalReason, Signal, SignalFailure, WaitCheck, WaitSpec
from stateward.core.decision import ControlDecision, DecisionType, non_finite_path, parse_decision
from stateward.core.errors import DecisionParseError, ErrorCode
from stateward.core.state import (
    ApprovalScope,
    AskedBy,
    ChildCall,
    GuardedAction,
    PendingRequest,
    RequestKind,
    RunState,
)
from stateward.runtime.agent import Agent, guard

SHOWN_CHARS = 2000  # how much of a proposed call's arguments or the model's note a question repeats


def check_signal(
    signal: Signal, state: RunState, agent: Agent, visible: frozenset[str]
) -> tuple[ControlDecision | None, tuple[str, str] | None]:
    """Steps 1-2: the decision, or (code, message) saying why it is refused."""
    if isinstance(signal, SignalFailure):
        return None, (signal.code, signal.message)
    parsed = isinstance(signal, str)  # the parser refuses every non-finite number itself
    if isinstance(signal, str):
        try:
            decision = parse_decision(signal)
        except DecisionParseError as exc:
            return None, (exc.code, exc.message)
    else:
        decision = signal
    return decision, _storable(decision, agent, parsed=parsed) or _precondition(decision, state, agent, visible)


def _storable(decision: ControlDecision, agent: Agent, *, parsed: bool) -> tuple[str, str] | None:
    """Values the runtime cannot store are refused at the door, whoever built the decision."""
    found = None if parsed else non_finite_path(decision.args)  # one built around the constructor's own check
    if found is not None:
        return ErrorCode.NON_FINITE_NUMBER, f"{found} is not a finite number"
    asked = len(decision.question or "")
    if decision.type is DecisionType.REQUEST_USER_INPUT and asked > agent.max_question_chars:
        return ErrorCode.QUESTION_TOO_LARGE, f"a question may hold {agent.max_question_chars} characters, not {asked}"
    return None


def _precondition(
    decision: ControlDecision, state: RunState, agent: Agent, visible: frozenset[str]
) -> tuple[str, str] | None:
    """Step 2: what each decision type requires of the run's state and the agent's policies."""
    if decision.type is DecisionType.EXECUTE_TOOL:
        if not decision.action:
            return RefusalReason.TOOL_DECISION_WITHOUT_ACTION, "EXECUTE_TOOL names no action"
        if decision.action not in visible:
            return RefusalReason.ACTION_NOT_VISIBLE, f"{decision.action!r} is not visible at this step"
    if decision.type is DecisionType.REQUEST_USER_INPUT:
        check: WaitCheck = agent.wait_policy(decision, state)
        if check.rejected is not None:
            return check.rejected, f"wait refused: {check.rejected}"
    if decision.type is DecisionType.FINISH:
        finish = agent.finish_policy(decision, state)
        if finish.rejected is not None:
            return finish.rejected, f"finish refused: {finish.rejected}"
    return None


def reconciling(decision: ControlDecision, state: RunState) -> bool:
    """Whether ``decision`` is the call a person just reconciled, which the Runtime runs next: it needs no new
    approval (the gateway records the person's answer under the call's journalled key, or retries it there)."""
    call = state.next_call
    return (
        call is not None
        and call.reconciled is not None
        and decision.action == call.action.tool
        and (decision.args or {}) == call.action.args
    )


def unapproved_action(decision: ControlDecision, state: RunState, agent: Agent) -> GuardedAction | None:
    """The exact action a proposed guarded call needs an approval for, or None.

    None also when the gateway would refuse the call anyway (unknown tool, invalid arguments, missing
    permission): nobody is asked to approve a call that cannot run.
    """
    spec = agent.tools.get(decision.action or "")
    if spec is None or not spec.requires_approval:
        return None
    if spec.permission is not None and spec.permission not in agent.permissions:
        return None
    try:
        args = spec.canonical_args(spec.validate_args(decision.args or {}))
    except (ValidationError, TypeError, ValueError):
        return None
    action = guard(spec.name, args)
    raw = _raw_digest(spec.name, decision.args or {})
    if any(g.digest in (action.digest, raw) for g in state.approvals):
        return None
    return action


def _raw_digest(tool: str, args: dict[str, Any]) -> str | None:
    try:
        return action_digest(tool, args, None)
    except (TypeError, ValueError):
        return None


def approval_question(action: GuardedAction, scope: ApprovalScope) -> str:
    """The Runtime's own question about a guarded call it was proposed (no model wrote it): the exact call,
    its arguments (cut at SHOWN_CHARS), and what one approval admits."""
    shown = canonical_json(action.args)
    if len(shown) > SHOWN_CHARS:
        shown = shown[:SHOWN_CHARS] + "…"
    admits = "once." if scope is ApprovalScope.ONCE else "for the rest of the run."
    return f"Approve {action.tool} with arguments {shown}? One approval admits this exact call {admits}"


def wait_expiry(agent: Agent, wait: WaitSpec | None, now: datetime) -> datetime | None:
    """When a wait a decision enters expires: the wait's own deadline, else the agent's request TTL, else never."""
    if wait is not None and wait.expires_in_s is not None:
        return now + timedelta(seconds=wait.expires_in_s)
    return None if agent.request_ttl is None else now + agent.request_ttl


def wait_request(
    state: RunState, agent: Agent, decision: ControlDecision, wait: WaitSpec | None, *, request_id: str, now: datetime
) -> PendingRequest:
    """The request an accepted REQUEST_USER_INPUT opens: an approval when the agent's wait policy (or the
    controller's wait) guards an action, else the wait's kind; asked of the role that answers it."""
    check = agent.wait_policy(decision, state)
    guarded = check.guarded_action or (wait.guard if wait is not None else None)
    return PendingRequest(
        request_id=request_id,
        kind=RequestKind.APPROVAL if guarded is not None else (wait.kind if wait is not None else check.kind),
        question=(decision.question or "").strip(),
        state_before=state.status,
        guarded_action=guarded,
        options=() if wait is None else wait.options,
        approver_role=agent.approver_role_for(None if guarded is None else guarded.tool),
        created_at=now,
        expires_at=wait_expiry(agent, wait, now),
    )


def approval_request(
    state: RunState,
    agent: Agent,
    decision: ControlDecision,
    action: GuardedAction,
    request_id: str,
    call_step: int,
    now: datetime,
) -> PendingRequest:
    """The approval the Runtime asks by itself for a guarded call without one: its question is the Runtime's,
    written from the action; the model's reason goes with it, labelled as the model's words."""
    spec = agent.tools.get(action.tool)
    assert spec is not None
    return PendingRequest(
        request_id=request_id,
        kind=RequestKind.APPROVAL,
        question=approval_question(action, spec.approval_scope),
        state_before=state.status,
        guarded_action=action,
        approval_scope=spec.approval_scope,
        asked_by=AskedBy.RUNTIME,
        model_text=(decision.reason or "")[:SHOWN_CHARS] or None,
        call_step=call_step,
        approver_role=agent.approver_role_for(action.tool),
        created_at=now,
        expires_at=None if agent.request_ttl is None else now + agent.request_ttl,
    )


def child_wait_request(
    state: RunState, calls: tuple[ChildCall, ...], *, request_id: str, call_step: int, now: datetime
) -> PendingRequest:
    """The CHILD_RUN request a parent waits under while its call's children run (nobody answers it: the end
    of the last child does); the first child is named, a parallel call's others are its siblings."""
    child, siblings = calls[0], calls[1:]
    return PendingRequest(
        request_id=request_id,
        kind=RequestKind.CHILD_RUN,
        question=(
            f"waiting for child run {child.run_id} of agent {child.agent}: {child.goal}"
            + (f" (and {len(siblings)} more)" if siblings else "")
        )[:SHOWN_CHARS],
        state_before=state.status,
        asked_by=AskedBy.RUNTIME,
        call_step=call_step,
        created_at=now,
        child=child,
        siblings=siblings,
    )
