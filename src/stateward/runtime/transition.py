"""The one module that changes a run's status: every move goes through ``next_status`` here, and every
state_transition, pending_recorded and run_exited event is built here; request ids are minted here.
Everything else asks through a named operation that returns the new state and its events (``Moved``):

- ``handle``: a controller's decision -> a Transition (the five steps below);
- ``suspend``: RUNNING -> WAITING_FOR_USER on a pending request (every wait a run enters);
- ``resume_on_answer``: WAITING_FOR_USER -> RUNNING on an answer (a person's, or a timer's);
- ``escalate``: the same wait, re-asked of another role under a new request id;
- ``resume``: PAUSED -> RUNNING (an operator, or a due retry); an abandoned RUNNING run carries on;
- ``pause``: RUNNING -> PAUSING -> PAUSED;  ``end``: to a terminal status;  ``cancel``: to CANCELLED.

``handle``'s steps: 1. parse and type-check the signal;  2. check its preconditions against the
run's state;  3. move the status through the transition table;  4. record the pending request (with
the wait snapshot, in this same step);  5. return the Transition. Nothing here performs I/O: the
caller persists the result in one transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from pydantic import ValidationError

from stateward.core.budget import Usage
from stateward.core.canonical import action_digest, canonical_json
from stateward.core.contract import RefusalReason, Signal, SignalFailure, WaitCheck, WaitSpec
from stateward.core.decision import ControlDecision, DecisionType, SignalSource, non_finite_path, parse_decision
from stateward.core.errors import DecisionParseError, ErrorCode, IllegalTransitionError
from stateward.core.events import EventType, NewEvent
from stateward.core.state import (
    Answer,
    AnswerVerdict,
    ApprovalScope,
    AskedBy,
    DeferredCall,
    Grant,
    GuardedAction,
    PendingRequest,
    PersonOutcome,
    RequestKind,
    RunState,
    WaitSnapshot,
)
from stateward.core.status import RunStatus, TransitionKind, next_status
from stateward.models.base import Usage as ModelUsage
from stateward.runtime.agent import Agent, guard
from stateward.store.records import RequestAnswer

_KIND_BY_DECISION = {
    DecisionType.EXECUTE_TOOL: TransitionKind.CONTINUE,
    DecisionType.REQUEST_USER_INPUT: TransitionKind.SUSPEND,
    DecisionType.FINISH: TransitionKind.COMPLETE,
    DecisionType.FAIL: TransitionKind.FAIL,
}
_REASON_BY_KIND = {
    TransitionKind.SUSPEND: "wait_suspended",
    TransitionKind.COMPLETE: "completed",
    TransitionKind.PARTIAL: "partially_completed",
}
REJECTED_BY_APPROVER = "rejected_by_approver"
APPROVAL_REQUIRED = "approval_required"
_SHOWN_CHARS = 2000  # how much of a proposed call's arguments or the model's note a question repeats
_ASKS_CONSENT = frozenset({RequestKind.APPROVAL, RequestKind.INPUT})


class Moved(NamedTuple):
    """A run's state after a named operation, and the events that record the move (in order)."""

    state: RunState
    events: list[NewEvent]


@dataclass(frozen=True)
class Transition:
    kind: TransitionKind
    state_before: RunStatus
    state_after: RunStatus
    accepted: bool
    reason: str | None
    decision: ControlDecision | None
    state: RunState
    pending: PendingRequest | None = None
    events: list[NewEvent] = field(default_factory=list)


def _with_usage(state: RunState, usage: Sequence[ModelUsage], **changes: int) -> Usage:
    u = state.usage
    return u.model_copy(
        update={
            "steps": u.steps + 1,
            "model_calls": u.model_calls + len(usage),
            "input_tokens": u.input_tokens + sum(x.input_tokens for x in usage),
            "output_tokens": u.output_tokens + sum(x.output_tokens for x in usage),
            **{k: getattr(u, k) + v for k, v in changes.items()},
        }
    )


def handle(
    signal: Signal,
    state: RunState,
    agent: Agent,
    *,
    source: SignalSource,
    visible_actions: frozenset[str],
    model_usage: Sequence[ModelUsage] = (),
    now: datetime,
    wait: WaitSpec | None = None,
) -> Transition:
    """Validate ``signal`` against ``state`` and compute the transition. Raises only IllegalTransitionError."""
    if state.status is not RunStatus.RUNNING:
        # Decisions move only running runs; a waiting, paused or ended run is moved from outside.
        raise IllegalTransitionError(
            f"a decision cannot move a {state.status.value} run",
            details={"from": state.status.value, "run_id": state.run_id},
        )
    received = NewEvent(
        type=EventType.SIGNAL_RECEIVED,
        payload={
            "signal_source": source.value,
            "step": state.usage.steps + 1,
            "model_calls": len(model_usage),
            "signal": signal.model_dump(mode="json", exclude_none=True) if not isinstance(signal, str) else signal,
        },
    )
    decision, rejection = _check(signal, state, agent, visible_actions)
    if rejection is not None:
        return _reject(state, agent, decision, rejection, received, model_usage)
    assert decision is not None
    kind = _KIND_BY_DECISION[decision.type]
    if kind is TransitionKind.COMPLETE and agent.finish_policy(decision, state).partial:
        kind = TransitionKind.PARTIAL
    if kind is TransitionKind.COMPLETE and state.refused_request is not None:
        # A person refused what the run needed and nobody approved anything since: that is no success.
        kind = TransitionKind.CANCEL if agent.on_refusal == "cancel" else TransitionKind.FAIL
        decision = decision.model_copy(update={"reason": REJECTED_BY_APPROVER})
    if kind is TransitionKind.CONTINUE and not reconciling(decision, state):
        unapproved = unapproved_action(decision, state, agent)
        if unapproved is not None:
            return _ask_approval(state, agent, decision, unapproved, received, model_usage, now)
    after = next_status(state.status, kind)
    usage = _with_usage(state, model_usage)
    validated = NewEvent(
        type=EventType.RUNTIME_VALIDATED,
        payload={
            "runtime_decision": "accepted",
            "decision_type": decision.type.value,
            "transition": kind.value,
        },
    )
    events = [received, validated]
    # One copy of the state per decision; an accepted decision ends any correction.
    if kind is TransitionKind.CONTINUE:
        new_state = state.model_copy(update={"usage": usage, "status": after, "correction": None})
        return Transition(kind, state.status, after, True, None, decision, new_state, events=events)

    reason = _REASON_BY_KIND.get(kind) or (decision.reason or "failed_by_decision")
    if kind is not TransitionKind.SUSPEND:
        update = {"usage": usage, "status": after, "terminal_reason": reason, "correction": None}
        new_state = state.model_copy(update=update)
        events.append(_moved(state, new_state))
        return Transition(kind, state.status, after, True, reason, decision, new_state, events=events)

    check = agent.wait_policy(decision, state)
    guarded = check.guarded_action or (wait.guard if wait is not None else None)
    pending = PendingRequest(
        request_id=mint_request_id(state),
        kind=RequestKind.APPROVAL if guarded is not None else (wait.kind if wait is not None else check.kind),
        question=(decision.question or "").strip(),
        state_before=state.status,
        guarded_action=guarded,
        options=() if wait is None else wait.options,
        approver_role=agent.approver_role_for(None if guarded is None else guarded.tool),
        created_at=now,
        expires_at=_expiry(agent, wait, now),
    )
    new_state, wait_events = suspend(state, pending, reason, usage=usage, correction=None)
    return Transition(kind, state.status, after, True, reason, decision, new_state, pending, [*events, *wait_events])


def mint_request_id(state: RunState) -> str:
    """The run's next request id (``approval_001``, ``approval_002``, ...): minted here and nowhere else."""
    return f"approval_{state.requests_issued + 1:03d}"


def suspend(
    state: RunState, pending: PendingRequest, reason: str, *, usage: Usage | None = None, **changes: Any
) -> Moved:
    """RUNNING -> WAITING_FOR_USER on ``pending``: every wait a run enters (a controller's, a guarded
    call's, an unknown outcome's) is built here, with its state_transition and pending_recorded events.

    The wait snapshot is taken in this same step, so "calls after the wait" is measurable.
    """
    counted = usage or state.usage
    after = next_status(state.status, TransitionKind.SUSPEND)
    new_state = state.model_copy(
        update={
            "usage": counted,
            "status": after,
            "terminal_reason": reason,
            "pending": pending,
            "requests_issued": state.requests_issued + 1,
            "wait": WaitSnapshot(
                step=counted.steps, model_calls=counted.model_calls, tool_attempts=counted.tool_attempts
            ),
            **changes,
        }
    )
    recorded = NewEvent(
        type=EventType.PENDING_RECORDED,
        payload={
            "pending_request_id": pending.request_id,
            "question": pending.question,
            "state_before": pending.state_before.value,
            "kind": pending.kind,
            "asked_by": pending.asked_by,
            "approval_scope": pending.approval_scope.value,
            "guarded_action": None if (guarded := pending.guarded_action) is None else guarded.model_dump(mode="json"),
        },
    )
    return Moved(new_state, [_moved(state, new_state), recorded])


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


def _ask_approval(
    state: RunState,
    agent: Agent,
    decision: ControlDecision,
    action: GuardedAction,
    received: NewEvent,
    model_usage: Sequence[ModelUsage],
    now: datetime,
) -> Transition:
    """A guarded call without a matching approval: the Runtime suspends the run and asks, by itself.

    The question is the Runtime's own, written from the action; the model's reason, if any, goes with
    it labelled as the model's words. On approval exactly this call runs first (``RunState.next_call``).
    """
    spec = agent.tools.get(action.tool)
    assert spec is not None
    usage = _with_usage(state, model_usage)
    shown = canonical_json(action.args)
    if len(shown) > _SHOWN_CHARS:
        shown = shown[:_SHOWN_CHARS] + "…"
    scope = spec.approval_scope
    pending = PendingRequest(
        request_id=mint_request_id(state),
        kind=RequestKind.APPROVAL,
        question=(
            f"Approve {action.tool} with arguments {shown}? "
            + (
                "One approval admits this exact call once."
                if scope is ApprovalScope.ONCE
                else "One approval admits this exact call for the rest of the run."
            )
        ),
        state_before=state.status,
        guarded_action=action,
        approval_scope=scope,
        asked_by=AskedBy.RUNTIME,
        model_text=(decision.reason or "")[:_SHOWN_CHARS] or None,
        call_step=usage.steps,
        approver_role=agent.approver_role_for(action.tool),
        created_at=now,
        expires_at=None if agent.request_ttl is None else now + agent.request_ttl,
    )
    new_state, wait_events = suspend(state, pending, APPROVAL_REQUIRED, usage=usage, correction=None)
    events = [
        received,
        NewEvent(
            type=EventType.RUNTIME_VALIDATED,
            payload={
                "runtime_decision": APPROVAL_REQUIRED,
                "decision_type": decision.type.value,
                "transition": TransitionKind.SUSPEND.value,
                "action_digest": action.digest,
            },
        ),
        *wait_events,
    ]
    after = new_state.status
    return Transition(
        TransitionKind.SUSPEND, state.status, after, True, APPROVAL_REQUIRED, decision, new_state, pending, events
    )


def _expiry(agent: Agent, wait: WaitSpec | None, now: datetime) -> datetime | None:
    if wait is not None and wait.expires_in_s is not None:
        return now + timedelta(seconds=wait.expires_in_s)
    return None if agent.request_ttl is None else now + agent.request_ttl


def _check(
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


def _reject(
    state: RunState,
    agent: Agent,
    decision: ControlDecision | None,
    rejection: tuple[str, str],
    received: NewEvent,
    model_usage: Sequence[ModelUsage],
) -> Transition:
    """A refused signal is counted and, by default, fails the run explicitly; it never goes unnoticed.

    An agent may instead declare ``on_rejected_signal="correct_once"``: the run stays RUNNING and the
    next request to the model names the error. A second rejection in a row fails the run.
    """
    code, message = rejection
    usage = _with_usage(state, model_usage, rejected_signals=1)
    validated = NewEvent(
        type=EventType.RUNTIME_VALIDATED,
        payload={
            "runtime_decision": "rejected",
            "code": code,
            "message": message,
            "decision_type": None if decision is None else decision.type.value,
        },
    )
    if agent.on_rejected_signal == "correct_once" and state.correction is None:
        correction = f"Your last reply was refused ({code}): {message}. Reply with exactly one valid decision."
        new_state = state.model_copy(update={"usage": usage, "correction": correction})
        return Transition(
            TransitionKind.CONTINUE,
            state.status,
            state.status,
            False,
            code,
            decision,
            new_state,
            events=[received, validated],
        )
    after = next_status(state.status, TransitionKind.FAIL)
    new_state = state.model_copy(
        update={"usage": usage, "status": after, "terminal_reason": "rejected_signal", "correction": None}
    )
    events = [received, validated, _moved(state, new_state)]
    return Transition(TransitionKind.FAIL, state.status, after, False, code, decision, new_state, events=events)


def _moved(before: RunState, after: RunState, **extra: Any) -> NewEvent:
    """The state_transition event of a move (its reason is the new state's, unless ``extra`` names one)."""
    return NewEvent(
        type=EventType.STATE_TRANSITION,
        payload={
            "state_before": before.status.value,
            "state_after": after.status.value,
            "reason": after.terminal_reason,
            **extra,
        },
    )


def exit_event(state: RunState) -> NewEvent:
    """``run_exited``: the last event of a segment that leaves the run not RUNNING (not after budget_exhausted)."""
    return NewEvent(
        type=EventType.RUN_EXITED,
        payload={
            "status": state.status.value,
            "terminal_reason": state.terminal_reason,
        },
    )


def end(state: RunState, kind: TransitionKind, reason: str, *, clear_pending: bool = False, **extra: Any) -> Moved:
    """To the terminal status ``kind`` leads to (FAIL, CANCEL, ...) with ``reason``; ``extra`` goes into
    the state_transition event (e.g. ``message``, ``by``). ``clear_pending`` drops an open request."""
    update: dict[str, Any] = {"status": next_status(state.status, kind), "terminal_reason": reason}
    if clear_pending:
        update["pending"] = None
    new = state.model_copy(update=update)
    return Moved(new, [_moved(state, new, **extra)])


def _roles(roles: Iterable[str]) -> dict[str, Any]:
    """The asker's roles as a move records them (nothing when none were given)."""
    listed = sorted(roles)
    return {"roles": listed} if listed else {}


def cancel(state: RunState, *, by: str, roles: Iterable[str] = ()) -> Moved:
    """CANCELLED from any non-terminal status, by ``by`` (holding ``roles``); the run's open request goes with it."""
    return end(state, TransitionKind.CANCEL, "cancelled", clear_pending=True, by=by, **_roles(roles))


def pause(
    state: RunState, reason: str, *, requested: str | None = None, by: str | None = None, roles: Iterable[str] = ()
) -> Moved:
    """RUNNING (or PAUSING) -> PAUSED with ``reason``. From RUNNING the PAUSING step is recorded too,
    with ``requested`` as its reason (default: ``reason``). ``by`` (and ``roles``): who asked, on both moves."""
    events: list[NewEvent] = []
    asked = {} if by is None else {"by": by, **_roles(roles)}
    pausing = state
    if pausing.status is RunStatus.RUNNING:
        pausing = pausing.model_copy(update={"status": next_status(pausing.status, TransitionKind.PAUSE)})
        events.append(_moved(state, pausing, reason=requested or reason, **asked))
    paused = pausing.model_copy(
        update={"status": next_status(pausing.status, TransitionKind.PAUSED), "terminal_reason": reason}
    )
    events.append(_moved(pausing, paused, reason=reason, **asked))
    return Moved(paused, events)


def resume(state: RunState, reason: str, *, by: str, roles: Iterable[str] = (), **changes: Any) -> Moved:
    """PAUSED -> RUNNING, recorded with ``reason`` and ``by``. A RUNNING run (its process died) carries
    on with no move to record. ``changes`` are applied to the new state (e.g. a setback's retry spent)."""
    update: dict[str, Any] = {"terminal_reason": None, **changes}
    if state.status is RunStatus.RUNNING:
        return Moved(state.model_copy(update=update), [])
    new = state.model_copy(update={**update, "status": next_status(state.status, TransitionKind.RESUME)})
    return Moved(new, [_moved(state, new, reason=reason, by=by, **_roles(roles))])


def resume_on_answer(state: RunState, answer: RequestAnswer, reason: str) -> Moved:
    """WAITING_FOR_USER -> RUNNING on ``answer``; an approval admits exactly the action it was asked
    for, once (unless the tool declared a run-long grant), and a call the Runtime asked about runs first."""
    pending = state.pending
    assert pending is not None
    approvals, granted = state.approvals, state.granted
    next_call, refused = state.next_call, state.refused_request
    action = pending.guarded_action
    if pending.kind in _ASKS_CONSENT:
        # A person's latest yes or no stands: a run may not complete on a "no" nobody took back.
        refused = {AnswerVerdict.APPROVED: None, AnswerVerdict.REJECTED: answer.request_id}.get(answer.verdict, refused)
    if pending.kind is RequestKind.APPROVAL and action is not None and answer.verdict is AnswerVerdict.APPROVED:
        grant = Grant(request_id=answer.request_id, action=action, scope=pending.approval_scope, by=answer.by)
        approvals, granted = (*approvals, grant), (*granted, action.digest)
        if pending.asked_by is AskedBy.RUNTIME:
            next_call = DeferredCall(request_id=answer.request_id, action=action, step=pending.call_step or 0)
    target = pending.reconciles
    if pending.kind is RequestKind.RECONCILIATION and action is not None and target is not None:
        # The person's word decides the call's outcome: the Runtime has the gateway record it before anything else.
        said = PersonOutcome(
            happened=answer.verdict is AnswerVerdict.APPROVED,
            by=answer.by,
            at=answer.at,
            comment=answer.text,
            request_id=answer.request_id,
            idempotency_key=target.idempotency_key,
            key_step=target.key_step,
            retry_spent=target.retry_spent,
        )
        next_call = DeferredCall(
            request_id=answer.request_id, action=action, step=pending.call_step or 0, reconciled=said
        )
    new = state.model_copy(
        update={
            "status": next_status(state.status, TransitionKind.RESUME),
            "terminal_reason": None,
            "pending": None,
            "wait": None,
            "approvals": approvals,
            "granted": granted,
            "next_call": next_call,
            "refused_request": refused,
            "last_answer": Answer(
                request_id=answer.request_id,
                verdict=answer.verdict,
                text=answer.text,
                by=answer.by,
                at=answer.at,
                guarded_action=pending.guarded_action,
                replaces=pending.replaces,
                kind=pending.kind,
            ),
        }
    )
    return Moved(new, [_moved(state, new, reason=reason)])


def reopen(state: RunState, *, now: datetime) -> Moved:
    """A fork's copy of the request its source waited on at the fork point, under a new request id (an answer
    given to the source after that point is not the fork's): the same question, action and roles, asked
    ``now`` with the same time to live. No status change: the fork waits as its source did."""
    request = state.pending
    assert request is not None
    ttl = None if request.expires_at is None else request.expires_at - request.created_at
    reopened = request.model_copy(
        update={
            "request_id": mint_request_id(state),
            "replaces": None,
            "created_at": now,
            "expires_at": None if ttl is None else now + ttl,
        }
    )
    new = state.model_copy(update={"pending": reopened, "requests_issued": state.requests_issued + 1})
    recorded = NewEvent(
        type=EventType.PENDING_RECORDED,
        payload={
            "pending_request_id": reopened.request_id,
            "reopened_from": request.request_id,
            "question": reopened.question,
            "state_before": reopened.state_before.value,
            "kind": reopened.kind,
            "asked_by": reopened.asked_by,
            "approval_scope": reopened.approval_scope.value,
            "guarded_action": None if (guarded := reopened.guarded_action) is None else guarded.model_dump(mode="json"),
        },
    )
    return Moved(new, [recorded])


def escalate(state: RunState, *, role: str | None, now: datetime, expires_at: datetime | None) -> Moved:
    """The open request, expired, re-asked of ``role`` under a new request id: the run keeps waiting
    (no status change) and the new request is recorded with the one it replaces."""
    request = state.pending
    assert request is not None
    escalated = request.model_copy(
        update={
            "request_id": mint_request_id(state),
            "replaces": request.replaces or request.request_id,
            "approver_role": role,
            "created_at": now,
            "expires_at": expires_at,
        }
    )
    new = state.model_copy(update={"pending": escalated, "requests_issued": state.requests_issued + 1})
    recorded = NewEvent(
        type=EventType.PENDING_RECORDED,
        payload={
            "pending_request_id": escalated.request_id,
            "escalated_from": request.request_id,
            "approver_role": role,
        },
    )
    return Moved(new, [recorded])
