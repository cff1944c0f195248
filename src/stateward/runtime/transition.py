"""The one module that changes a run's status: every move goes through ``next_status`` here, every
state_transition, pending_recorded and run_exited event is built here, and request ids are minted here.
Each named operation returns the whole write (``Write``: the new state, every event in order, the usage it
added, the requests it opens or closes, its checkpoint reason) and its caller only persists it. A move out of
RUNNING ends with ``run_exited`` (appended in ``_moved_write`` alone) unless the budget ran out (then
``budget_exhausted``); ``run_resumed`` is built in ``_resumed`` alone. Nothing here performs I/O.

- ``handle``: a decision -> a Transition: 1. parse and check the signal (``admission.py``);  2. check its
  preconditions;  3. move the status through the table;  4. record a wait with its snapshot, in this step;
- ``suspend``: RUNNING -> WAITING_FOR_USER on a pending request (every wait a run enters);
- ``resume_on_answer``: WAITING_FOR_USER -> RUNNING on an answer (a person's; ``fire_timer``: a timer's);
- ``resume``: PAUSED -> RUNNING (an operator, or a due retry); an abandoned RUNNING run carries on;
- ``pause``: RUNNING -> PAUSING -> PAUSED;  ``end``: to a terminal status;  ``cancel``: to CANCELLED;
- ``exhaust``: FAILED / budget_exhausted;  ``expire``: an expired request's policy (fail, cancel, escalate);
- ``await_child``: RUNNING -> WAITING_FOR_USER on a child run a call started;  ``child_returned``: back to
  RUNNING when it ended, its outcome the call's observation and its spend the parent's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from stateward.core.budget import Usage, UsageDelta, spent
from stateward.core.contract import Signal, WaitSpec
from stateward.core.decision import ControlDecision, DecisionType, SignalSource
from stateward.core.errors import IllegalTransitionError
from stateward.core.events import EventType, NewEvent
from stateward.core.state import (
    AnswerVerdict,
    AskedBy,
    ChildCall,
    DeferredCall,
    Grant,
    GuardedAction,
    PendingRequest,
    RequestKind,
    RunState,
    WaitSnapshot,
)
from stateward.core.status import RunStatus, TransitionKind, next_status
from stateward.models.base import Usage as ModelUsage
from stateward.runtime import admission
from stateward.runtime.agent import Agent, ExpiryPolicy
from stateward.runtime.answer_records import person_outcome, remembered_answer
from stateward.runtime.child_call import escalated
from stateward.runtime.write import Transition as Transition  # handle's answer; re-exported
from stateward.runtime.write import Write
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
_ASKS_CONSENT = frozenset({RequestKind.APPROVAL, RequestKind.INPUT})


def _step_delta(usage: Sequence[ModelUsage], **more: int) -> UsageDelta:
    """What one decision spends: a step, its model calls and their tokens (and ``more`` counters)."""
    return UsageDelta.of_model_calls(usage, steps=1, **more)


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
    decision, rejection = admission.check_signal(signal, state, agent, visible_actions)
    if rejection is not None:
        return _reject(state, agent, decision, rejection, received, model_usage)
    assert decision is not None
    kind, decision = _kind_of(decision, state, agent)
    if kind is TransitionKind.CONTINUE and not admission.reconciling(decision, state):
        unapproved = admission.unapproved_action(decision, state, agent)
        if unapproved is not None:
            return _ask_approval(state, agent, decision, unapproved, received, model_usage, now)
    return _accept(state, agent, decision, kind, (received,), model_usage, now, wait)


def _kind_of(decision: ControlDecision, state: RunState, agent: Agent) -> tuple[TransitionKind, ControlDecision]:
    """The move an admitted decision asks for, as the agent's finish policy and a standing refusal read it."""
    kind = _KIND_BY_DECISION[decision.type]
    if kind is TransitionKind.COMPLETE and agent.finish_policy(decision, state).partial:
        kind = TransitionKind.PARTIAL
    if kind is TransitionKind.COMPLETE and state.refused_request is not None:
        # A person refused what the run needed and nobody approved anything since: that is no success.
        kind = TransitionKind.CANCEL if agent.on_refusal == "cancel" else TransitionKind.FAIL
        decision = decision.model_copy(update={"reason": REJECTED_BY_APPROVER})
    return kind, decision


def _accept(
    state: RunState,
    agent: Agent,
    decision: ControlDecision,
    kind: TransitionKind,
    received: tuple[NewEvent, ...],
    model_usage: Sequence[ModelUsage],
    now: datetime,
    wait: WaitSpec | None,
) -> Transition:
    """An accepted decision's move (``handle``'s step 3, and 4 for a wait): on, to an end, or into a wait."""
    after = next_status(state.status, kind)
    delta = _step_delta(model_usage)
    usage = state.usage.plus(delta)
    events = (*received, _validated("accepted", decision_type=decision.type.value, transition=kind.value))
    # One copy of the state per decision; an accepted decision ends any correction.
    if kind is TransitionKind.CONTINUE:
        new_state = state.model_copy(update={"usage": usage, "status": after, "correction": None})
        return Transition(kind, state.status, after, True, None, decision, Write(new_state, events, delta))

    reason = _REASON_BY_KIND.get(kind) or (decision.reason or "failed_by_decision")
    if kind is not TransitionKind.SUSPEND:
        update = {"usage": usage, "status": after, "terminal_reason": reason, "correction": None}
        new_state = state.model_copy(update=update)
        write = _moved_write(state, new_state, [_moved(state, new_state)], usage=delta)
        return Transition(kind, state.status, after, True, reason, decision, write.after(*events))

    pending = admission.wait_request(state, agent, decision, wait, request_id=mint_request_id(state), now=now)
    pending = escalated(state, pending)  # a child's handoff, if its call escalates them to the parent's approvers
    write = suspend(state, pending, reason, usage=delta, correction=None)
    return Transition(kind, state.status, after, True, reason, decision, write.after(*events))


def _validated(verdict: str, **payload: Any) -> NewEvent:
    """``runtime_validated``: what the Runtime said of a signal (accepted, refused, or asked about first)."""
    return NewEvent(type=EventType.RUNTIME_VALIDATED, payload={"runtime_decision": verdict, **payload})


def mint_request_id(state: RunState) -> str:
    """The run's next request id (``approval_001``, ``approval_002``, ...): minted here and nowhere else."""
    return f"approval_{state.requests_issued + 1:03d}"


def suspend(
    state: RunState, pending: PendingRequest, reason: str, *, usage: UsageDelta | None = None, **changes: Any
) -> Write:
    """RUNNING -> WAITING_FOR_USER on ``pending``: every wait a run enters (a controller's, a guarded
    call's, an unknown outcome's) is built here, with its state_transition and pending_recorded events.
    ``usage``: what the step that enters the wait spent (counted before the snapshot).

    The wait snapshot is taken in this same step, so "calls after the wait" is measurable.
    """
    delta = usage or UsageDelta()
    counted = state.usage.plus(delta)
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
    recorded = _pending_recorded(pending)
    return _moved_write(state, new_state, [_moved(state, new_state), recorded], usage=delta, open_request=pending)


def _pending_recorded(pending: PendingRequest, **extra: Any) -> NewEvent:
    """``pending_recorded`` of a request a run now waits on (``extra``: where a re-opened one came from)."""
    guarded = pending.guarded_action
    return NewEvent(
        type=EventType.PENDING_RECORDED,
        payload={
            "pending_request_id": pending.request_id,
            **extra,
            "question": pending.question,
            "state_before": pending.state_before.value,
            "kind": pending.kind,
            "asked_by": pending.asked_by,
            "approval_scope": pending.approval_scope.value,
            "guarded_action": None if guarded is None else guarded.model_dump(mode="json"),
        },
    )


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
    delta = _step_delta(model_usage)
    call_step = state.usage.plus(delta).steps
    pending = admission.approval_request(state, agent, decision, action, mint_request_id(state), call_step, now)
    write = suspend(state, pending, APPROVAL_REQUIRED, usage=delta, correction=None)
    suspended = TransitionKind.SUSPEND.value
    validated = _validated(
        APPROVAL_REQUIRED, decision_type=decision.type.value, transition=suspended, action_digest=action.digest
    )
    after = write.state.status
    return Transition(
        TransitionKind.SUSPEND, state.status, after, True, APPROVAL_REQUIRED, decision, write.after(received, validated)
    )


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
    delta = _step_delta(model_usage, rejected_signals=1)
    usage = state.usage.plus(delta)
    decision_type = None if decision is None else decision.type.value
    validated = _validated("rejected", code=code, message=message, decision_type=decision_type)
    if agent.on_rejected_signal == "correct_once" and state.correction is None:
        correction = f"Your last reply was refused ({code}): {message}. Reply with exactly one valid decision."
        new_state = state.model_copy(update={"usage": usage, "correction": correction})
        write = Write(new_state, (received, validated), delta)
        return Transition(TransitionKind.CONTINUE, state.status, state.status, False, code, decision, write)
    after = next_status(state.status, TransitionKind.FAIL)
    new_state = state.model_copy(
        update={"usage": usage, "status": after, "terminal_reason": "rejected_signal", "correction": None}
    )
    write = _moved_write(state, new_state, [_moved(state, new_state)], usage=delta).after(received, validated)
    return Transition(TransitionKind.FAIL, state.status, after, False, code, decision, write)


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


def _moved_write(
    before: RunState, after: RunState, events: list[NewEvent], *, exits: bool = True, **write: Any
) -> Write:
    """The write of a move from ``before`` to ``after``: a move out of RUNNING ends the segment with
    ``run_exited`` (the one place it is appended), unless ``exits`` is False (an exhausted budget's)."""
    if exits and after.status is not RunStatus.RUNNING and after.status is not before.status:
        events = [*events, exit_event(after)]
    return Write(after, tuple(events), **write)


def end(state: RunState, kind: TransitionKind, reason: str, *, clear_pending: bool = False, **extra: Any) -> Write:
    """To the terminal status ``kind`` leads to (FAIL, CANCEL, ...) with ``reason``; ``extra`` goes into
    the state_transition event (e.g. ``message``, ``by``). ``clear_pending`` drops an open request."""
    new = _ended(state, kind, reason, clear_pending=clear_pending)
    return _moved_write(state, new, [_moved(state, new, **extra)])


def _ended(state: RunState, kind: TransitionKind, reason: str, *, clear_pending: bool = False) -> RunState:
    update: dict[str, Any] = {"status": next_status(state.status, kind), "terminal_reason": reason}
    if clear_pending:
        update["pending"] = None
    return state.model_copy(update=update)


def exhaust(state: RunState, dimension: str) -> Write:
    """Out of budget in ``dimension``: FAILED / budget_exhausted, ending with ``budget_exhausted`` (the
    usage and budget as they stood) rather than ``run_exited``."""
    new = _ended(state, TransitionKind.FAIL, "budget_exhausted")
    exhausted = NewEvent(
        type=EventType.BUDGET_EXHAUSTED,
        payload={"dimension": dimension, "usage": state.usage.model_dump(), "budget": state.budget.model_dump()},
    )
    return _moved_write(state, new, [_moved(state, new), exhausted], exits=False)


def _roles(roles: Iterable[str]) -> dict[str, Any]:
    """The asker's roles as a move records them (nothing when none were given)."""
    listed = sorted(roles)
    return {"roles": listed} if listed else {}


def cancel(state: RunState, *, by: str, now: datetime, roles: Iterable[str] = ()) -> Write:
    """CANCELLED from any non-terminal status, by ``by`` (holding ``roles``): every open request closes with it
    and the cancel request is acknowledged."""
    new = _ended(state, TransitionKind.CANCEL, "cancelled", clear_pending=True)
    closed = RequestAnswer(request_id="*", verdict=AnswerVerdict.CLOSED, text="run cancelled", by=by, at=now)
    moved = [_moved(state, new, by=by, **_roles(roles))]
    return _moved_write(state, new, moved, close_all_requests=closed, clear_control=True)


def pause(
    state: RunState,
    reason: str,
    *,
    requested: str | None = None,
    by: str | None = None,
    roles: Iterable[str] = (),
    clear_control: bool = False,
) -> Write:
    """RUNNING (or PAUSING) -> PAUSED with ``reason``. From RUNNING the PAUSING step is recorded too,
    with ``requested`` as its reason (default: ``reason``). ``by`` (and ``roles``): who asked, on both moves.
    ``clear_control`` acknowledges the pause request (a pause the run takes by itself leaves one for whoever
    resumes it)."""
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
    return _moved_write(state, paused, events, clear_control=clear_control)


def resume(
    state: RunState,
    reason: str,
    *,
    by: str,
    roles: Iterable[str] | None = None,
    retrying: str | None = None,
    reconciled: list[dict[str, str]] | None = None,
    **changes: Any,
) -> Write:
    """PAUSED -> RUNNING, recorded with ``reason`` and ``by``, then ``run_resumed``. A RUNNING run (its process
    died) carries on with no move to record. ``changes`` are applied to the new state (e.g. a setback's retry
    spent); ``retrying``: the setback whose retry time came; ``reconciled``: calls left in flight, looked up."""
    update: dict[str, Any] = {"terminal_reason": None, **changes}
    resumed = _resumed(state, by=by, roles=roles, retrying=retrying, reconciled=reconciled)
    if state.status is RunStatus.RUNNING:
        return Write(state.model_copy(update=update), (resumed,))
    new = state.model_copy(update={**update, "status": next_status(state.status, TransitionKind.RESUME)})
    return _moved_write(state, new, [_moved(state, new, reason=reason, by=by, **_roles(roles or ())), resumed])


def _resumed(
    before: RunState,
    *,
    request_id: str | None = None,
    by: str | None = None,
    roles: Iterable[str] | None = None,
    retrying: str | None = None,
    reconciled: list[dict[str, str]] | None = None,
) -> NewEvent:
    """``run_resumed``, built here alone: on an answer (its request id) or by ``by`` (from the status the run
    was in), with the usage the run carries on from."""
    payload: dict[str, Any] = {} if request_id is None else {"request_id": request_id}
    if by is not None:
        payload["by"] = by
        if roles is not None:
            payload["roles"] = sorted(roles)
        payload["from_status"] = before.status.value
    if retrying is not None:
        payload["setback"] = retrying
    payload["usage"] = before.usage.model_dump()
    if reconciled is not None:
        payload["reconciled"] = reconciled
    return NewEvent(type=EventType.RUN_RESUMED, payload=payload)


def resume_on_answer(state: RunState, answer: RequestAnswer, reason: str) -> Write:
    """WAITING_FOR_USER -> RUNNING on ``answer``, which closes the request; an approval admits exactly the action it
    was asked for, once (unless the tool declared a run-long grant), and a call the Runtime asked about runs first."""
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
        said = person_outcome(answer, target)
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
            "last_answer": remembered_answer(answer, pending),
        }
    )
    events = [_moved(state, new, reason=reason), _resumed(state, request_id=answer.request_id)]
    return _moved_write(state, new, events, close_request=answer)


def expire(
    state: RunState,
    policy: ExpiryPolicy,
    *,
    now: datetime,
    role: str | None = None,
    expires_at: datetime | None = None,
) -> Write:
    """The open request expired: the agent's ``policy`` applied (fail the run, cancel it, or re-ask ``role``
    with a new expiry ``expires_at``)."""
    request = state.pending
    assert request is not None
    note = NewEvent(
        type=EventType.REQUEST_ANSWERED,
        payload={"request_id": request.request_id, "verdict": "expired", "policy": policy},
    )
    if policy == "cancel":
        return cancel(state, by="stateward:expiry", now=now).after(note)
    closed = RequestAnswer(
        request_id=request.request_id, verdict=AnswerVerdict.CLOSED, text="expired", by="stateward", at=now
    )
    if policy == "escalate":
        write = escalate(state, role=role, now=now, expires_at=expires_at)
    else:
        write = end(state, TransitionKind.FAIL, "request_expired", clear_pending=True)
    return dataclasses.replace(write, close_request=closed).after(note)


def fire_timer(state: RunState, now: datetime) -> Write:
    """A timer's deadline passed: the run resumes exactly as if a person had answered."""
    request = state.pending
    assert request is not None
    fired = RequestAnswer(
        request_id=request.request_id, verdict=AnswerVerdict.TIMER_FIRED, by="stateward:timer", at=now
    )
    note = NewEvent(
        type=EventType.REQUEST_ANSWERED,
        payload={"request_id": request.request_id, "verdict": "timer_fired", "by": fired.by, "at": now.isoformat()},
    )
    return resume_on_answer(state, fired, "timer_fired").after(note)


def reopen(state: RunState, *, now: datetime) -> Write:
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
    return Write(new, (_pending_recorded(reopened, reopened_from=request.request_id),))


def escalate(state: RunState, *, role: str | None, now: datetime, expires_at: datetime | None) -> Write:
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
    return Write(new, (recorded,), open_request=escalated)


AWAITING_CHILD = "awaiting_child_run"
CHILD_RETURNED = "child_run_returned"


def await_child(state: RunState, calls: tuple[ChildCall, ...], *, call_step: int, now: datetime) -> Write:
    """The call started child runs (one, or a parallel call's several): the parent waits for them durably
    (no thread held) under a CHILD_RUN request nobody answers; the end of the last of them does
    (``child_returned``)."""
    request_id = mint_request_id(state)
    pending = admission.child_wait_request(state, calls, request_id=request_id, call_step=call_step, now=now)
    return suspend(state, pending, AWAITING_CHILD)


def child_returned(
    state: RunState, child_run_id: str, child_usage: Usage | None, observation: dict[str, Any], *, now: datetime
) -> Write:
    """WAITING_FOR_USER -> RUNNING: the child run the parent waits on ended (or could not start:
    ``child_usage`` None). Its outcome is the call's observation (``child_run_returned``) and what it spent
    in the budget's dimensions is the parent's too."""
    pending = state.pending
    assert pending is not None and pending.kind is RequestKind.CHILD_RUN and pending.child is not None
    answer = RequestAnswer(
        request_id=pending.request_id,
        verdict=AnswerVerdict.CHILD_RETURNED,
        text=str(observation.get("status")),
        by=f"run:{child_run_id}",
        at=now,
    )
    delta = UsageDelta() if child_usage is None else spent(child_usage)
    # Counted before the resume, so the run_resumed event carries the usage the parent goes on with.
    counted = state.model_copy(update={"usage": state.usage.plus(delta)})
    resumed = resume_on_answer(counted, answer, CHILD_RETURNED)
    returned = NewEvent(
        type=EventType.CHILD_RUN_RETURNED,
        payload={
            "child_run_id": child_run_id,
            **({"child_run_ids": [c.run_id for c in (pending.child, *pending.siblings)]} if pending.siblings else {}),
            "idempotency_key": pending.child.idempotency_key,
            "observation": observation,
            "usage": delta.counts(),
        },
    )
    return dataclasses.replace(resumed, usage=resumed.usage + delta).after(returned)
