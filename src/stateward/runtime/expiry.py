"""The periodic sweep: expired requests (the agent's declared policy: fail, cancel, or escalate), due
timers, and PAUSED runs whose retry time came."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING

from stateward.core.errors import ErrorCode, RunError
from stateward.core.events import EventType, NewEvent
from stateward.core.setback import without_retry
from stateward.core.state import AnswerVerdict, RequestKind, RunState
from stateward.core.status import RunStatus, TransitionKind
from stateward.runtime import transition
from stateward.runtime.driver import cancel_write
from stateward.runtime.recovery import RETRY_BY
from stateward.store.records import RequestAnswer, StepWrite

log = logging.getLogger("stateward.expiry")

if TYPE_CHECKING:
    from stateward.runtime.runtime import Runtime


def expire_due(runtime: Runtime) -> list[tuple[str, str, str]]:
    """Apply each expired request's policy; returns (run id, request id, what happened) for each."""
    store, now = runtime.store, runtime.clock()
    expired: list[tuple[str, str, str]] = []
    for record in store.list_requests(None, open_only=True):
        request = record.request
        if request.expires_at is None or now < request.expires_at:
            continue
        state, seq = store.load_run_at(record.run_id)
        if state.status is not RunStatus.WAITING_FOR_USER or state.pending != request:
            continue
        if request.kind is RequestKind.TIMER:
            write = _fire_timer(state, request.request_id, now)
            try:
                store.commit_step(record.run_id, seq, write)
            except RunError as exc:
                if exc.code in {ErrorCode.CONCURRENT_UPDATE, ErrorCode.LEASE_HELD}:
                    continue
                raise
            expired.append((record.run_id, request.request_id, "timer_fired"))
            continue
        try:
            agent = runtime.agent_for(state)
        except Exception as exc:  # one run whose agent cannot be built here must not stop the sweep
            log.warning("run %s: cannot apply its expiry policy here: %s", record.run_id, exc)
            continue
        closed = RequestAnswer(
            request_id=request.request_id, verdict=AnswerVerdict.CLOSED, text="expired", by="stateward", at=now
        )
        note = NewEvent(
            type=EventType.REQUEST_ANSWERED,
            payload={"request_id": request.request_id, "verdict": "expired", "policy": agent.on_request_expiry},
        )
        if agent.on_request_expiry == "cancel":
            write = cancel_write(state, by="stateward:expiry", now=now)
            write = write.model_copy(update={"events": [note, *write.events]})
        elif agent.on_request_expiry == "escalate":
            new, moved = transition.escalate(
                state,
                role=agent.escalation_role,
                now=now,
                expires_at=None if agent.request_ttl is None else now + agent.request_ttl,
            )
            write = StepWrite(state=new, close_request=closed, open_request=new.pending, events=[note, *moved])
        else:
            new, moved = transition.end(state, TransitionKind.FAIL, "request_expired", clear_pending=True)
            write = StepWrite(
                state=new,
                close_request=closed,
                checkpoint="terminal",
                events=[note, *moved, transition.exit_event(new)],
            )
        try:
            store.commit_step(record.run_id, seq, write)
        except RunError as exc:
            if exc.code in {ErrorCode.CONCURRENT_UPDATE, ErrorCode.LEASE_HELD}:
                continue  # answered or moved on meanwhile: the next sweep looks again
            raise
        expired.append((record.run_id, request.request_id, agent.on_request_expiry))
    return expired


def _fire_timer(state: RunState, request_id: str, now: datetime) -> StepWrite:
    """A timer's deadline passed: the run resumes exactly as if a person had answered."""
    fired = RequestAnswer(request_id=request_id, verdict=AnswerVerdict.TIMER_FIRED, by="stateward:timer", at=now)
    resumed, moved = transition.resume_on_answer(state, fired, "timer_fired")
    return StepWrite(
        state=resumed,
        close_request=fired,
        events=[
            NewEvent(
                type=EventType.REQUEST_ANSWERED,
                payload={"request_id": request_id, "verdict": "timer_fired", "by": fired.by, "at": now.isoformat()},
            ),
            *moved,
            NewEvent(type=EventType.RUN_RESUMED, payload={"request_id": request_id, "usage": state.usage.model_dump()}),
        ],
    )


def resume_due(runtime: Runtime) -> list[str]:
    """PAUSED runs whose retry time came -> RUNNING, through the table, recorded as stateward's doing.

    A worker claims them next. Counts of setbacks and the budget's usage carry on unchanged.
    """
    store, now = runtime.store, runtime.clock()
    resumed: list[str] = []
    for run_id in store.due_runs(RunStatus.PAUSED.value, now):
        state, seq = store.load_run_at(run_id)
        setback = state.setback
        if state.status is not RunStatus.PAUSED or setback is None or setback.retry_at is None:
            continue
        if now < setback.retry_at:
            continue
        running, moved = transition.resume(state, "retry_due", by=RETRY_BY, setback=without_retry(setback))
        events = [
            *moved,
            NewEvent(
                type=EventType.RUN_RESUMED,
                payload={
                    "by": RETRY_BY,
                    "from_status": state.status.value,
                    "setback": setback.kind.value,
                    "usage": state.usage.model_dump(),
                },
            ),
        ]
        try:
            store.commit_step(run_id, seq, StepWrite(state=running, events=events))
        except RunError as exc:
            if exc.code in {ErrorCode.CONCURRENT_UPDATE, ErrorCode.LEASE_HELD}:
                continue  # resumed or cancelled meanwhile
            raise
        resumed.append(run_id)
    return resumed
