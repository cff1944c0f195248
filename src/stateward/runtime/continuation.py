"""Answering a pending request from any process: check everything, change nothing on refusal.

The checks, in order: the request exists for this run and tenant; it is still open (an identical
second answer returns the first outcome); the run is waiting on exactly it; the verdict fits the
request's kind; the answerer presents the digest of the action they saw (when given) and holds the
required role; the request has not expired.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from stateward.core.errors import RequestRefusedError, RunError, StatewardError
from stateward.core.events import EventType, NewEvent
from stateward.core.state import Answer, RunState
from stateward.core.status import RunStatus, TransitionKind, next_status
from stateward.runtime.faults import NO_FAULTS, FaultInjector
from stateward.store.base import Store
from stateward.store.records import RequestAnswer, StepWrite

_VERDICTS_BY_KIND = {
    "approval": {"approved", "rejected"},
    "reconciliation": {"approved", "rejected"},
    "input": {"replied", "approved", "rejected"},
    "handoff": {"replied"},
    "timer": set(),  # nobody answers a timer; the expiry sweep fires it
}


@dataclass(frozen=True)
class Answerer:
    """Who answers, and what they vouch for."""

    by: str
    tenant: str | None = None
    roles: frozenset[str] = frozenset()
    digest: str | None = None  # the guarded action's digest as shown to the answerer
    drive: bool = True  # resume the run in this process after answering


@dataclass(frozen=True)
class AnswerResult:
    state: RunState
    already_answered: bool
    answer: RequestAnswer
    # The answer is recorded but this process could not drive the run (it cannot build the agent):
    # the run stays RUNNING for a worker, or for ``resume`` where the agent is registered.
    not_driven: StatewardError | None = None


def _refuse(code: str, message: str, run_id: str, request_id: str) -> RequestRefusedError:
    return RequestRefusedError(message, code=code, details={"run_id": run_id, "request_id": request_id})


def answer_request(
    store: Store,
    run_id: str,
    request_id: str,
    verdict: str,
    who: Answerer,
    *,
    text: str | None,
    now: datetime,
    faults: FaultInjector = NO_FAULTS,
) -> AnswerResult:
    """Record the answer and move WAITING_FOR_USER -> RUNNING, or refuse with a named error."""
    state, seq = store.load_run_at(run_id)
    record = store.get_request(run_id, request_id)
    if record is None or (who.tenant is not None and who.tenant != state.tenant):
        # A request of another tenant is reported exactly like a missing one: nothing leaks.
        raise _refuse("UNKNOWN_REQUEST", f"run {run_id} has no request {request_id!r}", run_id, request_id)
    if record.answer is not None:
        first = record.answer
        if first.verdict == "closed":
            raise _refuse(
                "REQUEST_CLOSED", f"{request_id} was closed ({first.text or 'run ended'})", run_id, request_id
            )
        if first.verdict != verdict or (text or None) != (first.text or None):
            raise _refuse(
                "REQUEST_ALREADY_ANSWERED",
                f"{request_id} was already {first.verdict} by {first.by} at {first.at.isoformat()}",
                run_id,
                request_id,
            )
        return AnswerResult(state=state, already_answered=True, answer=first)
    if state.status.is_terminal:
        raise _refuse("RUN_ENDED", f"run {run_id} is {state.status.value}", run_id, request_id)
    pending = state.pending
    if state.status is not RunStatus.WAITING_FOR_USER or pending is None or pending.request_id != request_id:
        raise _refuse(
            "STALE_REQUEST", f"{request_id} is not the request run {run_id} is waiting on", run_id, request_id
        )
    allowed = _VERDICTS_BY_KIND.get(pending.kind, {"approved", "rejected", "replied"})
    if verdict not in allowed:
        raise _refuse(
            "WRONG_ANSWER_KIND",
            f"a {pending.kind} request takes {sorted(allowed)}, not {verdict!r}",
            run_id,
            request_id,
        )
    if pending.options and (text or "").strip().lower() not in {o.lower() for o in pending.options}:
        raise _refuse(
            "UNKNOWN_OPTION", f"{request_id} takes one of {list(pending.options)}, not {text!r}", run_id, request_id
        )
    guarded = pending.guarded_action
    if who.digest is not None and (guarded is None or guarded.digest != who.digest):
        raise _refuse(
            "ACTION_DIGEST_MISMATCH",
            f"{request_id} guards a different action than the one presented",
            run_id,
            request_id,
        )
    if pending.approver_role is not None and pending.approver_role not in who.roles:
        raise _refuse(
            "ROLE_NOT_ALLOWED",
            f"{request_id} needs an answerer with role {pending.approver_role!r}",
            run_id,
            request_id,
        )
    if pending.expires_at is not None and now >= pending.expires_at:
        raise _refuse(
            "REQUEST_EXPIRED", f"{request_id} expired at {pending.expires_at.isoformat()}", run_id, request_id
        )
    if not who.by.strip():
        raise _refuse("ANSWERER_REQUIRED", "an answer must say who gave it", run_id, request_id)

    answer = RequestAnswer(request_id=request_id, verdict=verdict, text=text, by=who.by, at=now)
    resumed = resumed_state(state, answer)
    events = [
        NewEvent(
            type=EventType.REQUEST_ANSWERED,
            payload={
                "request_id": request_id,
                "verdict": verdict,
                "by": who.by,
                "at": now.isoformat(),
                "text": text,
                "guarded_digest": None if guarded is None else guarded.digest,
            },
        ),
        NewEvent(
            type=EventType.STATE_TRANSITION,
            payload={
                "state_before": state.status.value,
                "state_after": resumed.status.value,
                "reason": f"request_{verdict}",
            },
        ),
        NewEvent(type=EventType.RUN_RESUMED, payload={"request_id": request_id, "usage": state.usage.model_dump()}),
    ]
    faults.point("approval_before_commit")
    try:
        store.commit_step(run_id, seq, StepWrite(state=resumed, events=events, close_request=answer))
        faults.point("approval_after_commit")
    except RunError as exc:
        if exc.code not in {"CONCURRENT_UPDATE", "REQUEST_NOT_OPEN"}:
            raise
        # Someone answered between our read and our write: their answer stands.
        return answer_request(store, run_id, request_id, verdict, who, text=text, now=now, faults=faults)
    return AnswerResult(state=resumed, already_answered=False, answer=answer)


def resumed_state(state: RunState, answer: RequestAnswer) -> RunState:
    """The run after an accepted answer; an approval admits exactly the action it was asked for."""
    pending = state.pending
    assert pending is not None
    approvals = state.approvals
    if answer.verdict == "approved" and pending.kind == "approval" and pending.guarded_action is not None:
        approvals = (*approvals, pending.guarded_action)
    return state.model_copy(
        update={
            "status": next_status(state.status, TransitionKind.RESUME),
            "terminal_reason": None,
            "pending": None,
            "wait": None,
            "approvals": approvals,
            "last_answer": Answer(
                request_id=answer.request_id,
                verdict=answer.verdict,
                text=answer.text,
                by=answer.by,
                at=answer.at,
                guarded_action=pending.guarded_action,
                replaces=pending.replaces,
            ),
        }
    )
