"""Answering a pending request from any process: check everything, change nothing on refusal.

The checks, in order: the answer's text fits the size limit (8 KiB by default, STATEWARD_MAX_ANSWER_BYTES;
checked before anything is read or stored); the request exists for this run and tenant; it is still open (an identical
second answer returns the first outcome); the run is waiting on exactly it; the verdict fits the
request's kind; the answerer presents the digest of the action they saw (when given) and holds the
required role; the request has not expired.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from stateward.core.contract import OutcomeStatus
from stateward.core.errors import ErrorCode, RequestRefusedError, RunError, StatewardError
from stateward.core.events import EventType, NewEvent
from stateward.core.state import (
    AnswerVerdict,
    AskedBy,
    PendingRequest,
    RequestKind,
    RunState,
    chosen_option,
)
from stateward.core.status import RunStatus
from stateward.runtime.faults import NO_FAULTS, FaultInjector
from stateward.runtime.transition import resume_on_answer
from stateward.runtime.write import Write
from stateward.store.base import Store
from stateward.store.records import PendingRecord, RequestAnswer

_VERDICTS_BY_KIND = {
    RequestKind.APPROVAL: {AnswerVerdict.APPROVED, AnswerVerdict.REJECTED},
    RequestKind.RECONCILIATION: {AnswerVerdict.APPROVED, AnswerVerdict.REJECTED},
    RequestKind.INPUT: {AnswerVerdict.REPLIED, AnswerVerdict.APPROVED, AnswerVerdict.REJECTED},
    RequestKind.HANDOFF: {AnswerVerdict.REPLIED},
    RequestKind.TIMER: set(),  # nobody answers a timer; the expiry sweep fires it
    RequestKind.CHILD_RUN: set(),  # nobody answers a child run's wait; the child's end does
}


@dataclass(frozen=True)
class Answerer:
    """Who answers, and what they vouch for."""

    by: str
    tenant: str | None = None
    roles: frozenset[str] = frozenset()
    digest: str | None = None  # the guarded action's digest as shown to the answerer
    drive: bool = True  # resume the run in this process after answering
    expects: RequestKind | None = None  # the kind of request the answerer means to answer (``reconcile``'s)


@dataclass(frozen=True)
class AnswerResult:
    """The outcome of an answer: the run's state after it, whether it repeated an earlier answer (nothing was done
    again), and the recorded answer."""

    state: RunState
    already_answered: bool
    answer: RequestAnswer
    # The answer is recorded but this process could not drive the run (it cannot build the agent):
    # the run stays RUNNING for a worker, or for ``resume`` where the agent is registered.
    not_driven: StatewardError | None = None


def _refuse(code: ErrorCode, message: str, run_id: str, request_id: str) -> RequestRefusedError:
    return RequestRefusedError(message, code=code, details={"run_id": run_id, "request_id": request_id})


DEFAULT_MAX_ANSWER_BYTES = 8 * 1024  # an answer's text or comment


class _Unset(enum.Enum):
    FROM_ENV = "from_env"


FROM_ENV = _Unset.FROM_ENV  # "use STATEWARD_MAX_ANSWER_BYTES, else the default", as opposed to None: no limit
MAX_ANSWERER_BYTES = 256  # who answered


def answer_limit(env: Mapping[str, str] | None = None) -> int | None:
    """The answer size limit: STATEWARD_MAX_ANSWER_BYTES, else 8 KiB; 0 or less means none."""
    raw = (os.environ if env is None else env).get("STATEWARD_MAX_ANSWER_BYTES", "")
    try:
        limit = int(raw) if raw.strip() else DEFAULT_MAX_ANSWER_BYTES
    except ValueError:
        from stateward.core.errors import UserError

        raise UserError("STATEWARD_MAX_ANSWER_BYTES must be an integer", code=ErrorCode.CONFIGURATION_ERROR) from None
    return limit if limit > 0 else None


def check_answer_size(text: str | None, by: str, run_id: str, request_id: str, limit: int | None) -> None:
    """ANSWER_TOO_LARGE before anything is read or stored: a 10 MB comment never reaches the database."""
    size = 0 if text is None else len(text.encode("utf-8"))
    if limit is not None and size > limit:
        raise _refuse(
            ErrorCode.ANSWER_TOO_LARGE,
            f"the answer's text is {size} bytes, over the limit of {limit}",
            run_id,
            request_id,
        )
    if len(by.encode("utf-8")) > MAX_ANSWERER_BYTES:
        raise _refuse(
            ErrorCode.ANSWER_TOO_LARGE, f"the answerer's name is over {MAX_ANSWERER_BYTES} bytes", run_id, request_id
        )


@dataclass(frozen=True)
class _Asked:
    """One answer being checked against the request it names (the open one the run waits on)."""

    run_id: str
    request_id: str
    verdict: str
    text: str | None
    who: Answerer
    now: datetime
    pending: PendingRequest


Refusal = tuple[ErrorCode, str]  # (code, message)


def _kind_expected(a: _Asked) -> Refusal | None:
    expected = a.who.expects
    if expected is None or a.pending.kind is expected:
        return None
    return ErrorCode.WRONG_ANSWER_KIND, f"{a.request_id} is a {a.pending.kind} request, not a {expected}"


def _verdict_fits_kind(a: _Asked) -> Refusal | None:
    allowed = _VERDICTS_BY_KIND[a.pending.kind]
    if a.verdict in allowed:
        return None
    return ErrorCode.WRONG_ANSWER_KIND, f"a {a.pending.kind} request takes {sorted(allowed)}, not {a.verdict!r}"


def _names_an_option(a: _Asked) -> Refusal | None:
    options = a.pending.options
    if not options or chosen_option(a.text) in {o.lower() for o in options}:
        return None
    return ErrorCode.UNKNOWN_OPTION, f"{a.request_id} takes one of {list(options)}, not {a.text!r}"


def _digest_matches(a: _Asked) -> Refusal | None:
    guarded = a.pending.guarded_action
    if a.who.digest is None or (guarded is not None and guarded.digest == a.who.digest):
        return None
    return ErrorCode.ACTION_DIGEST_MISMATCH, f"{a.request_id} guards a different action than the one presented"


def _role_held(a: _Asked) -> Refusal | None:
    role = a.pending.approver_role
    if role is None or role in a.who.roles:
        return None
    return ErrorCode.ROLE_NOT_ALLOWED, f"{a.request_id} needs an answerer with role {role!r}"


def _not_expired(a: _Asked) -> Refusal | None:
    expires = a.pending.expires_at
    if expires is None or a.now < expires:
        return None
    return ErrorCode.REQUEST_EXPIRED, f"{a.request_id} expired at {expires.isoformat()}"


def _answerer_named(a: _Asked) -> Refusal | None:
    return None if a.who.by.strip() else (ErrorCode.ANSWERER_REQUIRED, "an answer must say who gave it")


# The checks an answer to the open request passes, in order, like the gateway's admission stages.
ANSWER_CHECKS = (
    _kind_expected,
    _verdict_fits_kind,
    _names_an_option,
    _digest_matches,
    _role_held,
    _not_expired,
    _answerer_named,
)


def _earlier_answer(first: RequestAnswer, verdict: str, text: str | None, run_id: str) -> None:
    """A request already closed or answered: the identical answer is a no-op, anything else is refused."""
    request_id = first.request_id
    if first.verdict is AnswerVerdict.CLOSED:
        raise _refuse(
            ErrorCode.REQUEST_CLOSED, f"{request_id} was closed ({first.text or 'run ended'})", run_id, request_id
        )
    if first.verdict != verdict or (text or None) != (first.text or None):
        raise _refuse(
            ErrorCode.REQUEST_ALREADY_ANSWERED,
            f"{request_id} was already {first.verdict} by {first.by} at {first.at.isoformat()}",
            run_id,
            request_id,
        )


def _open_request(state: RunState, run_id: str, request_id: str) -> PendingRequest:
    """The request the run waits on, which must be the one answered."""
    if state.status.is_terminal:
        raise _refuse(ErrorCode.RUN_ENDED, f"run {run_id} is {state.status.value}", run_id, request_id)
    pending = state.pending
    if state.status is not RunStatus.WAITING_FOR_USER or pending is None or pending.request_id != request_id:
        raise _refuse(
            ErrorCode.STALE_REQUEST, f"{request_id} is not the request run {run_id} is waiting on", run_id, request_id
        )
    return pending


def _answer_events(pending: PendingRequest, answer: RequestAnswer, roles: frozenset[str]) -> list[NewEvent]:
    """What an answer records before the move it makes: the answer, and a refusal the controller is to see."""
    guarded = pending.guarded_action
    answered: dict[str, Any] = {
        "request_id": answer.request_id,
        "verdict": answer.verdict.value,
        "by": answer.by,
        "at": answer.at.isoformat(),
        "text": answer.text,
        "guarded_digest": None if guarded is None else guarded.digest,
    }
    if roles:  # the roles the answerer held (an authenticated principal's, over HTTP)
        answered["roles"] = sorted(roles)
    events = [NewEvent(type=EventType.REQUEST_ANSWERED, payload=answered)]
    refusal = refusal_observation(pending, answer)
    if refusal is not None:
        events.append(NewEvent(type=EventType.ACTION_REFUSED, payload={"observation": refusal}))
    return events


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
    max_answer_bytes: int | Literal[_Unset.FROM_ENV] | None = FROM_ENV,
) -> AnswerResult:
    """Record the answer and move WAITING_FOR_USER -> RUNNING, or refuse with a named error.

    ``max_answer_bytes`` bounds the text (FROM_ENV: STATEWARD_MAX_ANSWER_BYTES or 8 KiB; None: no limit).
    """
    limit = answer_limit() if max_answer_bytes is FROM_ENV else max_answer_bytes
    check_answer_size(text, who.by, run_id, request_id, limit)
    state, seq = store.load_run_at(run_id)
    write, answer = decide_answer(
        state, store.get_request(run_id, request_id), request_id, verdict, who, text=text, now=now
    )
    if write is None:
        return AnswerResult(state=state, already_answered=True, answer=answer)
    faults.point("approval_before_commit")
    try:
        store.commit_step(run_id, seq, write.stored())
        faults.point("approval_after_commit")
    except RunError as exc:
        if exc.code not in {ErrorCode.CONCURRENT_UPDATE, ErrorCode.REQUEST_NOT_OPEN}:
            raise
        # Someone answered between our read and our write: their answer stands.
        return answer_request(
            store, run_id, request_id, verdict, who, text=text, now=now, faults=faults, max_answer_bytes=limit
        )
    return AnswerResult(state=write.state, already_answered=False, answer=answer)


def decide_answer(
    state: RunState,
    record: PendingRecord | None,
    request_id: str,
    verdict: str,
    who: Answerer,
    *,
    text: str | None,
    now: datetime,
) -> tuple[Write | None, RequestAnswer]:
    """The checks of an answer against the run's state and the request's record, with no I/O (every backend's
    answer path runs these same checks: a store's transaction, a Temporal Update's validator).

    Raises RequestRefusedError with the refusal's code; returns ``(None, first)`` for an identical repeat of an
    earlier answer (nothing to do again), else the write that records the answer and resumes the run."""
    run_id = state.run_id
    if record is None or (who.tenant is not None and who.tenant != state.tenant):
        # A request of another tenant is reported exactly like a missing one: nothing leaks.
        raise _refuse(ErrorCode.UNKNOWN_REQUEST, f"run {run_id} has no request {request_id!r}", run_id, request_id)
    if record.answer is not None:
        _earlier_answer(record.answer, verdict, text, run_id)
        return None, record.answer
    asked = _Asked(run_id, request_id, verdict, text, who, now, _open_request(state, run_id, request_id))
    for check in ANSWER_CHECKS:
        refused = check(asked)
        if refused is not None:
            raise _refuse(*refused, run_id, request_id)
    answer = RequestAnswer(request_id=request_id, verdict=AnswerVerdict(verdict), text=text, by=who.by, at=now)
    write = resume_on_answer(state, answer, f"request_{answer.verdict.value}")
    return write.after(*_answer_events(asked.pending, answer, who.roles)), answer


def refusal_observation(pending: PendingRequest, answer: RequestAnswer) -> dict[str, Any] | None:
    """A refused call the Runtime asked about is an outcome the controller sees, with the comment."""
    action = pending.guarded_action
    if pending.kind is not RequestKind.APPROVAL or answer.verdict is not AnswerVerdict.REJECTED:
        return None  # a reconciliation's answer is recorded by the gateway, as the call's own outcome
    if pending.asked_by is not AskedBy.RUNTIME or action is None:
        return None
    return {
        "step": pending.call_step or 0,
        "action": action.tool,
        "args": action.args,
        "status": OutcomeStatus.REJECTED.value,
        "result": {"rejected_by": answer.by, "comment": answer.text, "request_id": answer.request_id},
        "error_code": ErrorCode.REJECTED_BY_APPROVER.value,
        "artifacts": [],
    }
