"""Runtime.handle(): preconditions, rejections, and the wait snapshot taken in the same step."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from stateward import ControlDecision, DecisionType, IllegalTransitionError, RunStatus, SignalSource
from stateward.core.budget import Usage
from stateward.core.contract import Signal
from stateward.core.events import EventType
from stateward.core.state import AgentRef, RunState
from stateward.runtime.transition import Transition, handle
from stateward_demos.blog import build_agent

NOW = datetime(2026, 11, 30, tzinfo=UTC)
AGENT = build_agent("react")
VISIBLE = frozenset(AGENT.tools.names())


def _state(**changes: object) -> RunState:
    base = RunState(
        run_id="run_t", agent=AgentRef(name="x:y"), goal="g", usage=Usage(steps=4, model_calls=4, tool_attempts=4)
    )
    return base.model_copy(update=changes)


def _handle(signal: Signal, state: RunState, visible: frozenset[str] = VISIBLE) -> Transition:
    return handle(signal, state, AGENT, source=SignalSource.MODEL, visible_actions=visible, now=NOW)


def test_wait_before_any_brief_is_rejected_and_fails_the_run() -> None:
    t = _handle('{"type": "REQUEST_USER_INPUT", "question": "Write the draft?"}', _state())
    assert not t.accepted
    assert t.reason == "wait_signal_without_pending_object"
    assert t.state.status is RunStatus.FAILED
    assert t.state.pending is None and t.pending is None
    assert t.state.usage.rejected_signals == 1
    assert [e.type for e in t.events][-2:] == [EventType.STATE_TRANSITION, EventType.RUN_EXITED]
    assert EventType.PENDING_RECORDED not in [e.type for e in t.events]


def test_wait_without_question_is_rejected() -> None:
    t = _handle('{"type": "REQUEST_USER_INPUT", "question": "  "}', _state(artifacts={"brief": 1}))
    assert t.reason == "wait_signal_without_question"
    assert t.state.status is RunStatus.FAILED


def test_action_not_visible_is_rejected() -> None:
    decision = ControlDecision(type=DecisionType.EXECUTE_TOOL, action="write_draft", args={"brief": "brief:v1"})
    t = _handle(decision, _state(), visible=frozenset({"read_material"}))
    assert t.reason == "action_not_visible"
    assert t.state.usage.rejected_signals == 1


def test_unparseable_signal_is_a_named_rejection() -> None:
    t = _handle('{"type":"json_object","content":{"type":"FINISH"}}', _state())
    assert t.reason == "WRAPPED_DECISION"
    assert t.state.terminal_reason == "rejected_signal"


def test_wait_snapshot_is_taken_in_the_transition_itself() -> None:
    state = _state(artifacts={"brief": 1})
    t = _handle('{"type": "REQUEST_USER_INPUT", "question": "Brief ready. Write the draft?"}', state)
    assert t.state.status is RunStatus.WAITING_FOR_USER
    # The counters at the wait are those of this very step; a snapshot deferred to the loop's end
    # would be missing here (and would later count every call as "after the wait").
    assert t.state.wait is not None
    assert (t.state.wait.model_calls, t.state.wait.tool_attempts) == (4, 4)
    assert t.state.wait.step == t.state.usage.steps == 5  # this step, the fifth, entered the wait
    assert t.state.calls_after_wait() == (0, 0)
    assert t.pending is not None and t.pending.request_id == "approval_001"
    assert t.pending.state_before is RunStatus.RUNNING
    assert t.pending.guarded_action is not None
    assert t.pending.guarded_action.args == {"brief": "brief:v1"}
    assert [e.type for e in t.events] == [
        EventType.SIGNAL_RECEIVED,
        EventType.RUNTIME_VALIDATED,
        EventType.STATE_TRANSITION,
        EventType.PENDING_RECORDED,
        EventType.RUN_EXITED,
    ]


def test_decisions_on_a_finished_run_are_illegal() -> None:
    with pytest.raises(IllegalTransitionError):
        _handle('{"type": "FINISH"}', _state(status=RunStatus.COMPLETED))


def test_a_decision_built_around_its_finite_check_is_refused_by_the_runtime() -> None:
    sneaky = ControlDecision.model_construct(
        type=DecisionType.EXECUTE_TOOL, action="read_material", args={"material_id": "m", "w": [float("nan")]}
    )
    t = _handle(sneaky, _state())
    assert (t.accepted, t.reason, t.state.status) == (False, "NON_FINITE_NUMBER", RunStatus.FAILED)


def test_an_oversized_question_is_refused_before_it_is_stored() -> None:
    limit = AGENT.max_question_chars
    exactly = ControlDecision(type=DecisionType.REQUEST_USER_INPUT, question="q" * limit)
    assert _handle(exactly, _state(artifacts={"brief": 1})).state.status is RunStatus.WAITING_FOR_USER
    over = ControlDecision(type=DecisionType.REQUEST_USER_INPUT, question="q" * (limit + 1))
    t = _handle(over, _state(artifacts={"brief": 1}))
    assert (t.reason, t.pending, t.state.status) == ("QUESTION_TOO_LARGE", None, RunStatus.FAILED)
