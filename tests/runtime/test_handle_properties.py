"""Property: whatever a signal source emits, Runtime.handle only ever makes table moves."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from stateward import ControlDecision, DecisionType, IllegalTransitionError, RunStatus, SignalSource
from stateward.core.contract import Signal
from stateward.core.state import AgentRef, RunState
from stateward.core.status import TRANSITIONS
from stateward.runtime.transition import handle
from stateward_demos.blog import build_agent

AGENT = build_agent("react")
LEGAL = {(before, after) for (before, _), after in TRANSITIONS.items()}
NOW = datetime(2026, 11, 30, tzinfo=UTC)

decisions = st.builds(
    ControlDecision,
    type=st.sampled_from(list(DecisionType)),
    action=st.none() | st.sampled_from(["read_material", "write_draft", "rm -rf", ""]),
    args=st.none() | st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
    question=st.none() | st.text(max_size=20),
    reason=st.none() | st.text(max_size=10),
)
signals = decisions | st.text(max_size=60) | st.sampled_from(['{"type":"json_object","content":{"type":"FINISH"}}'])


@settings(max_examples=300)
@given(st.lists(signals, min_size=1, max_size=12), st.booleans(), st.frozensets(st.sampled_from(["read_material"])))
def test_random_signal_sequences_only_make_legal_moves(
    seq: list[Signal], has_brief: bool, visible: frozenset[str]
) -> None:
    state = RunState(run_id="run_p", agent=AgentRef(name="x:y"), goal="g", artifacts={"brief": 1} if has_brief else {})
    for signal in seq:
        if state.status is not RunStatus.RUNNING:
            try:
                handle(signal, state, AGENT, source=SignalSource.MODEL, visible_actions=visible, now=NOW)
            except IllegalTransitionError:
                continue
            raise AssertionError(f"a {state.status} run accepted a decision")
        t = handle(signal, state, AGENT, source=SignalSource.MODEL, visible_actions=visible, now=NOW)
        if t.state.status is not state.status:
            assert (state.status, t.state.status) in LEGAL
        if t.state.status is RunStatus.WAITING_FOR_USER:
            assert t.pending is not None and t.state.wait is not None and has_brief
        assert t.state.usage.steps == state.usage.steps + 1
        assert t.state.usage.rejected_signals == state.usage.rejected_signals + (0 if t.accepted else 1)
        state = t.state
