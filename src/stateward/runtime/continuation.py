"""Answering a pending request from any process: check everything, change nothing on refusal."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from stateward.core.errors import RequestRefusedError, RunError
from stateward.core.events import EventType, NewEvent
from stateward.core.state import Answer, RunState
from stateward.core.status import RunStatus, TransitionKind, next_status
from stateward.store.base import Store
from stateward.store.records import RequestAnswer, StepWrite

_VERDICTS_BY_KIND = {
    "approval": {"approved", "rejected"},
    "reconciliation": {"approved", "rejected"},
    "input": {"replied", "approved", "rejected"},
}


@dataclass(frozen=True)
class AnswerResult:
    state: RunState
    already_answered: bool
    answer: RequestAnswer


def _refuse(code: str, message: str, run_id: str, request_id: str) -> RequestRefusedError:
    return RequestRefusedError(message, code=code, details={"run_id": run_id, "request_id": request_id})


def answer_request(
    store: Store, run_id: str, request_id: str, verdict: str, *, by: str, text: str | None, now: datetime
) -> AnswerResult:
    """Record the answer and move WAITING_FOR_USER -> RUNNING, or refuse with a named error.

    Answering the same request the same way twice returns the first answer and changes nothing.
    """
    state, seq = store.load_run_at(run_id)
    record = store.get_request(run_id, request_id)
    if record is None:
        raise _refuse("UNKNOWN_REQUEST", f"run {run_id} has no request {request_id!r}", run_id, request_id)
    if record.answer is not None:
        first = record.answer
        if first.verdict == "closed":
            raise _refuse(
                "REQUEST_CLOSED", f"{request_id} was closed ({first.text or 'run ended'})", run_id, request_id
            )
        if first.verdict != verdict:
            raise _refuse(
                "REQUEST_ALREADY_ANSWERED",
                f"{request_id} was already {first.verdict} by {first.by} at {first.at.isoformat()}",
                run_id,
                request_id,
            )
        return AnswerResult(state=state, already_answered=True, answer=first)
    if state.status.is_terminal:
        raise _refuse("RUN_ENDED", f"run {run_id} is {state.status.value}", run_id, request_id)
    if (
        state.status is not RunStatus.WAITING_FOR_USER
        or state.pending is None
        or state.pending.request_id != request_id
    ):
        raise _refuse(
            "STALE_REQUEST", f"{request_id} is not the request run {run_id} is waiting on", run_id, request_id
        )
    pending = state.pending
    allowed = _VERDICTS_BY_KIND.get(pending.kind, {"approved", "rejected", "replied"})
    if verdict not in allowed:
        raise _refuse(
            "WRONG_ANSWER_KIND",
            f"a {pending.kind} request takes {sorted(allowed)}, not {verdict!r}",
            run_id,
            request_id,
        )
    if pending.expires_at is not None and now >= pending.expires_at:
        raise _refuse(
            "REQUEST_EXPIRED", f"{request_id} expired at {pending.expires_at.isoformat()}", run_id, request_id
        )
    if not by.strip():
        raise _refuse("ANSWERER_REQUIRED", "an answer must say who gave it", run_id, request_id)

    answer = RequestAnswer(request_id=request_id, verdict=verdict, text=text, by=by, at=now)
    after = next_status(state.status, TransitionKind.RESUME)
    approvals = state.approvals
    if verdict == "approved" and pending.kind == "approval" and pending.guarded_action is not None:
        approvals = (*approvals, pending.guarded_action)
    resumed = state.model_copy(
        update={
            "status": after,
            "terminal_reason": None,
            "pending": None,
            "wait": None,
            "approvals": approvals,
            "last_answer": Answer(
                request_id=request_id, verdict=verdict, text=text, by=by, at=now, guarded_action=pending.guarded_action
            ),
        }
    )
    events = [
        NewEvent(
            type=EventType.REQUEST_ANSWERED,
            payload={
                "request_id": request_id,
                "verdict": verdict,
                "by": by,
                "at": now.isoformat(),
                "text": text,
                "guarded_digest": None if pending.guarded_action is None else pending.guarded_action.digest,
            },
        ),
        NewEvent(
            type=EventType.STATE_TRANSITION,
            payload={"state_before": state.status.value, "state_after": after.value, "reason": f"request_{verdict}"},
        ),
        NewEvent(type=EventType.RUN_RESUMED, payload={"request_id": request_id}),
    ]
    try:
        store.commit_step(run_id, seq, StepWrite(state=resumed, events=events, close_request=answer))
    except RunError as exc:
        if exc.code not in {"CONCURRENT_UPDATE", "REQUEST_NOT_OPEN"}:
            raise
        # Someone answered between our read and our write: their answer stands.
        return answer_request(store, run_id, request_id, verdict, by=by, text=text, now=now)
    return AnswerResult(state=resumed, already_answered=False, answer=answer)
