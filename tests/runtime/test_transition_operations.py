"""The transition module's named operations: each returns the new state and exactly the events that
record the move, every status change goes through the table, and request ids are minted in order."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from stateward import IllegalTransitionError, RunStatus, TransitionKind
from stateward.core.events import EventType, NewEvent
from stateward.core.state import AgentRef, AnswerVerdict, PendingRequest, RequestKind, RunState
from stateward.runtime import transition
from stateward.store.records import RequestAnswer

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def _state(status: RunStatus = RunStatus.RUNNING, **changes: object) -> RunState:
    base = RunState(run_id="run_ops", agent=AgentRef(name="ops"), goal="g", status=status)
    return base.model_copy(update=changes)


def _moves(events: list[NewEvent]) -> list[tuple[str, str, str]]:
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


def test_suspend_records_the_move_and_the_request_and_counts_it() -> None:
    running = _state()
    pending = PendingRequest(
        request_id=transition.mint_request_id(running), question="Go?", state_before=RunStatus.RUNNING, created_at=NOW
    )
    state, events = transition.suspend(running, pending, "wait_suspended")
    assert state.status is RunStatus.WAITING_FOR_USER and state.pending == pending
    assert pending.request_id == "approval_001" and state.requests_issued == 1
    assert transition.mint_request_id(state) == "approval_002"
    assert [e.type for e in events] == [EventType.STATE_TRANSITION, EventType.PENDING_RECORDED]
    assert _moves(events) == [("RUNNING", "WAITING_FOR_USER", "wait_suspended")]
    assert events[1].payload["pending_request_id"] == "approval_001"


def test_pause_from_running_records_both_steps() -> None:
    state, events = transition.pause(_state(), "paused", requested="pause_requested")
    assert (state.status, state.terminal_reason) == (RunStatus.PAUSED, "paused")
    assert _moves(events) == [("RUNNING", "PAUSING", "pause_requested"), ("PAUSING", "PAUSED", "paused")]


def test_pause_from_pausing_records_one_step_with_the_reason() -> None:
    state, events = transition.pause(_state(RunStatus.PAUSING), "model_unavailable")
    assert state.status is RunStatus.PAUSED
    assert _moves(events) == [("PAUSING", "PAUSED", "model_unavailable")]


def test_resume_moves_a_paused_run_and_leaves_an_abandoned_running_one_where_it_is() -> None:
    paused = _state(RunStatus.PAUSED, terminal_reason="paused")
    state, events = transition.resume(paused, "resumed", by="ops")
    assert (state.status, state.terminal_reason) == (RunStatus.RUNNING, None)
    assert _moves(events) == [("PAUSED", "RUNNING", "resumed")] and events[0].payload["by"] == "ops"
    state, events = transition.resume(_state(terminal_reason="stale"), "resumed", by="ops")
    assert (state.status, state.terminal_reason, events) == (RunStatus.RUNNING, None, [])


def test_resume_refuses_a_run_the_table_does_not_resume() -> None:
    with pytest.raises(IllegalTransitionError):
        transition.resume(_state(RunStatus.COMPLETED), "resumed", by="ops")


def test_end_and_cancel_close_the_run_through_the_table() -> None:
    waiting = _waiting()
    state, events = transition.end(waiting, TransitionKind.FAIL, "request_expired", clear_pending=True)
    assert (state.status, state.pending) == (RunStatus.FAILED, None)
    assert _moves(events) == [("WAITING_FOR_USER", "FAILED", "request_expired")]
    state, events = transition.cancel(waiting, by="ops")
    assert (state.status, state.terminal_reason, state.pending) == (RunStatus.CANCELLED, "cancelled", None)
    assert events[0].payload["by"] == "ops"
    with pytest.raises(IllegalTransitionError):
        transition.cancel(state, by="ops")


def test_an_answer_resumes_the_run_and_a_timer_is_recorded_as_such() -> None:
    waiting = _waiting()
    answer = RequestAnswer(request_id="approval_001", verdict=AnswerVerdict.REPLIED, text="the first", by="ann", at=NOW)
    state, events = transition.resume_on_answer(waiting, answer, "request_replied")
    assert (state.status, state.pending, state.wait) == (RunStatus.RUNNING, None, None)
    assert state.last_answer is not None and state.last_answer.text == "the first"
    assert _moves(events) == [("WAITING_FOR_USER", "RUNNING", "request_replied")]


def test_escalation_mints_the_next_id_and_keeps_the_run_waiting() -> None:
    waiting = _waiting()
    later = NOW + timedelta(hours=1)
    state, events = transition.escalate(waiting, role="lead", now=later, expires_at=None)
    assert state.status is RunStatus.WAITING_FOR_USER and state.requests_issued == 2
    assert state.pending is not None
    assert (state.pending.request_id, state.pending.replaces, state.pending.approver_role) == (
        "approval_002",
        "approval_001",
        "lead",
    )
    assert [e.type for e in events] == [EventType.PENDING_RECORDED]
    assert events[0].payload["escalated_from"] == "approval_001"


def test_exit_event_names_the_status_and_reason() -> None:
    state, _ = transition.end(_state(), TransitionKind.FAIL, "budget_exhausted")
    event = transition.exit_event(state)
    assert (event.type, event.payload) == (
        EventType.RUN_EXITED,
        {"status": "FAILED", "terminal_reason": "budget_exhausted"},
    )
