"""The transition module's named operations: each returns the whole write (the new state, exactly the events that
record the move, ``run_exited`` last when it leaves RUNNING, the usage it added, the requests it opens or closes,
its checkpoint reason); every status change goes through the table, and request ids are minted in order."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest

from stateward import IllegalTransitionError, RunStatus, TransitionKind
from stateward.core.budget import UsageDelta
from stateward.core.events import CheckpointReason, EventType, NewEvent
from stateward.core.state import AgentRef, AnswerVerdict, PendingRequest, RequestKind, RunState
from stateward.runtime import transition
from stateward.runtime import write as write_ops
from stateward.store.records import RequestAnswer

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def _state(status: RunStatus = RunStatus.RUNNING, **changes: object) -> RunState:
    base = RunState(run_id="run_ops", agent=AgentRef(name="ops"), goal="g", status=status)
    return base.model_copy(update=changes)


def _moves(events: Sequence[NewEvent]) -> list[tuple[str, str, str]]:
    return [
        (e.payload["state_before"], e.payload["state_after"], e.payload["reason"])
        for e in events
        if e.type is EventType.STATE_TRANSITION
    ]


def _waiting() -> RunState:
    running = _state()
    pending = PendingRequest(
        request_id=transition.mint_request_id(running),
        kind=RequestKind.INPUT,
        question="Which one?",
        state_before=RunStatus.RUNNING,
        created_at=NOW,
    )
    return transition.suspend(running, pending, "wait_suspended").state


def _types(write: transition.Write) -> list[EventType]:
    return [e.type for e in write.events]


def test_suspend_records_the_move_and_the_request_and_counts_it() -> None:
    running = _state()
    pending = PendingRequest(
        request_id=transition.mint_request_id(running), question="Go?", state_before=RunStatus.RUNNING, created_at=NOW
    )
    write = transition.suspend(running, pending, "wait_suspended", usage=UsageDelta(steps=1, model_calls=2))
    state, events = write.state, write.events
    assert state.status is RunStatus.WAITING_FOR_USER and state.pending == pending
    assert pending.request_id == "approval_001" and state.requests_issued == 1
    assert transition.mint_request_id(state) == "approval_002"
    assert _types(write) == [EventType.STATE_TRANSITION, EventType.PENDING_RECORDED, EventType.RUN_EXITED]
    assert _moves(events) == [("RUNNING", "WAITING_FOR_USER", "wait_suspended")]
    assert events[1].payload["pending_request_id"] == "approval_001"
    # The whole write: the request it opens, why it is a checkpoint, what it spent (counted in the snapshot).
    assert (write.open_request, write.checkpoint) == (pending, CheckpointReason.WAIT)
    assert write.usage == UsageDelta(steps=1, model_calls=2)
    assert state.wait is not None and (state.wait.step, state.wait.model_calls) == (1, 2)


def test_pause_from_running_records_both_steps() -> None:
    write = transition.pause(_state(), "paused", requested="pause_requested", clear_control=True)
    assert (write.state.status, write.state.terminal_reason) == (RunStatus.PAUSED, "paused")
    assert _moves(write.events) == [("RUNNING", "PAUSING", "pause_requested"), ("PAUSING", "PAUSED", "paused")]
    assert (_types(write)[-1], write.checkpoint, write.clear_control) == (
        EventType.RUN_EXITED,
        CheckpointReason.PAUSE,
        True,
    )


def test_pause_from_pausing_records_one_step_with_the_reason() -> None:
    write = transition.pause(_state(RunStatus.PAUSING), "model_unavailable")
    assert write.state.status is RunStatus.PAUSED
    assert _moves(write.events) == [("PAUSING", "PAUSED", "model_unavailable")]
    assert not write.clear_control  # a pause the run takes by itself leaves the control request standing


def test_resume_moves_a_paused_run_and_leaves_an_abandoned_running_one_where_it_is() -> None:
    paused = _state(RunStatus.PAUSED, terminal_reason="paused")
    write = transition.resume(paused, "resumed", by="ops", roles=frozenset({"b", "a"}), reconciled=[])
    assert (write.state.status, write.state.terminal_reason) == (RunStatus.RUNNING, None)
    assert _moves(write.events) == [("PAUSED", "RUNNING", "resumed")] and write.events[0].payload["by"] == "ops"
    assert _types(write) == [EventType.STATE_TRANSITION, EventType.RUN_RESUMED]
    assert write.events[1].payload == {
        "by": "ops",
        "roles": ["a", "b"],
        "from_status": "PAUSED",
        "usage": paused.usage.model_dump(),
        "reconciled": [],
    }
    assert write.checkpoint is None
    write = transition.resume(_state(terminal_reason="stale"), "resumed", by="ops")
    assert (write.state.status, write.state.terminal_reason) == (RunStatus.RUNNING, None)
    assert _types(write) == [EventType.RUN_RESUMED]
    assert write.events[0].payload["from_status"] == "RUNNING" and "roles" not in write.events[0].payload


def test_resume_refuses_a_run_the_table_does_not_resume() -> None:
    with pytest.raises(IllegalTransitionError):
        transition.resume(_state(RunStatus.COMPLETED), "resumed", by="ops")


def test_end_and_cancel_close_the_run_through_the_table() -> None:
    waiting = _waiting()
    write = transition.end(waiting, TransitionKind.FAIL, "request_expired", clear_pending=True)
    assert (write.state.status, write.state.pending) == (RunStatus.FAILED, None)
    assert _moves(write.events) == [("WAITING_FOR_USER", "FAILED", "request_expired")]
    assert (_types(write)[-1], write.checkpoint) == (EventType.RUN_EXITED, CheckpointReason.TERMINAL)
    write = transition.cancel(waiting, by="ops", now=NOW)
    state = write.state
    assert (state.status, state.terminal_reason, state.pending) == (RunStatus.CANCELLED, "cancelled", None)
    assert write.events[0].payload["by"] == "ops" and _types(write)[-1] is EventType.RUN_EXITED
    assert write.close_all_requests is not None and write.close_all_requests.verdict is AnswerVerdict.CLOSED
    assert write.clear_control
    with pytest.raises(IllegalTransitionError):
        transition.cancel(state, by="ops", now=NOW)


def test_an_exhausted_budget_ends_with_budget_exhausted_not_run_exited() -> None:
    write = transition.exhaust(_state(), "steps")
    assert write.state.status is RunStatus.FAILED and write.checkpoint is CheckpointReason.TERMINAL
    assert _types(write) == [EventType.STATE_TRANSITION, EventType.BUDGET_EXHAUSTED]
    assert write.events[1].payload["dimension"] == "steps"


def test_an_answer_resumes_the_run_and_a_timer_is_recorded_as_such() -> None:
    waiting = _waiting()
    answer = RequestAnswer(request_id="approval_001", verdict=AnswerVerdict.REPLIED, text="the first", by="ann", at=NOW)
    write = transition.resume_on_answer(waiting, answer, "request_replied")
    state = write.state
    assert (state.status, state.pending, state.wait) == (RunStatus.RUNNING, None, None)
    assert state.last_answer is not None and state.last_answer.text == "the first"
    assert _moves(write.events) == [("WAITING_FOR_USER", "RUNNING", "request_replied")]
    assert write.events[1].payload == {"request_id": "approval_001", "usage": waiting.usage.model_dump()}
    assert (write.close_request, write.checkpoint) == (answer, None)
    fired = transition.fire_timer(waiting, NOW)
    assert _types(fired) == [EventType.REQUEST_ANSWERED, EventType.STATE_TRANSITION, EventType.RUN_RESUMED]
    assert fired.close_request is not None and fired.close_request.verdict is AnswerVerdict.TIMER_FIRED


def test_escalation_mints_the_next_id_and_keeps_the_run_waiting() -> None:
    waiting = _waiting()
    later = NOW + timedelta(hours=1)
    write = transition.expire(waiting, "escalate", role="lead", now=later, expires_at=None)
    state = write.state
    assert state.status is RunStatus.WAITING_FOR_USER and state.requests_issued == 2
    assert state.pending is not None
    assert (state.pending.request_id, state.pending.replaces, state.pending.approver_role) == (
        "approval_002",
        "approval_001",
        "lead",
    )
    assert _types(write) == [EventType.REQUEST_ANSWERED, EventType.PENDING_RECORDED]
    assert write.events[1].payload["escalated_from"] == "approval_001"
    # The old request closes, the new one opens; a wait that goes on is no new checkpoint and no exit.
    assert write.close_request is not None and write.close_request.request_id == "approval_001"
    assert (write.open_request, write.checkpoint) == (state.pending, None)


def test_an_expired_request_fails_or_cancels_the_run_as_the_policy_says() -> None:
    failed = transition.expire(_waiting(), "fail", now=NOW)
    assert (failed.state.status, failed.state.terminal_reason) == (RunStatus.FAILED, "request_expired")
    assert failed.close_request is not None and failed.close_request.text == "expired"
    cancelled = transition.expire(_waiting(), "cancel", now=NOW)
    assert cancelled.state.status is RunStatus.CANCELLED and cancelled.close_all_requests is not None
    for write in (failed, cancelled):
        assert _types(write)[0] is EventType.REQUEST_ANSWERED and _types(write)[-1] is EventType.RUN_EXITED


def test_usage_only_operations_count_and_move_nothing() -> None:
    state = _state()
    attempt = write_ops.model_attempt_failed(state, {"error": "RATE_LIMITED"})
    assert (attempt.state.usage.model_calls, attempt.state.status) == (1, RunStatus.RUNNING)
    assert _types(attempt) == [EventType.MODEL_CALL_FAILED] and attempt.usage == UsageDelta(model_calls=1)
    counted = write_ops.illegal(state, IllegalTransitionError("no"))
    assert counted.state.usage.illegal_transitions == 1 and _types(counted) == [EventType.ILLEGAL_TRANSITION]


def test_nothing_follows_a_write_that_stops_the_run() -> None:
    with pytest.raises(ValueError):
        transition.end(_state(), TransitionKind.FAIL, "x").then(transition.Write(_state()))


def test_exit_event_names_the_status_and_reason() -> None:
    write = transition.end(_state(), TransitionKind.FAIL, "failed_by_decision")
    event = transition.exit_event(write.state)
    assert (event.type, event.payload) == (
        EventType.RUN_EXITED,
        {"status": "FAILED", "terminal_reason": "failed_by_decision"},
    )
    assert write.events[-1] == event  # appended by the operation itself
