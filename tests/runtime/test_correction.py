"""The corrective-message policy: one named correction, then the run fails; default is to fail at once."""

from __future__ import annotations

import dataclasses
from typing import Any

from stateward import Agent, ControlDecision, DecisionType, RunStatus, Runtime, SignalSource, ToolRegistry
from stateward.core.contract import DecisionContext, Proposal
from stateward.core.events import EventType, NewEvent
from stateward.core.state import AgentRef
from stateward.models.base import ModelRequest
from stateward.models.scripted import ScriptedModel
from stateward_demos import blog_fixtures as fx
from stateward_demos.blog import build_agent


def _sloppy(times: int) -> ScriptedModel:
    """Wraps its first ``times`` decisions in the json_object envelope, then behaves."""
    seen = {"n": 0}

    def policy(req: ModelRequest) -> str | dict[str, Any]:
        seen["n"] += 1
        decision = fx.react_policy(req)
        if seen["n"] <= times:
            return {"type": "json_object", "content": decision}
        return decision

    return ScriptedModel(policy)


def test_default_policy_fails_on_the_first_rejection(runtime: Runtime) -> None:
    state = runtime.start(build_agent("react", model=_sloppy(1)), fx.GOAL)
    assert state.status is RunStatus.FAILED and state.terminal_reason == "rejected_signal"
    assert state.usage.rejected_signals == 1 and state.usage.tool_attempts == 0


def test_correct_once_names_the_error_and_continues(runtime: Runtime) -> None:
    model = _sloppy(1)
    agent = dataclasses.replace(build_agent("react", model=model), on_rejected_signal="correct_once")
    state = runtime.start(agent, fx.GOAL)
    assert state.status is RunStatus.WAITING_FOR_USER
    assert state.usage.rejected_signals == 1
    assert model.calls[0].correction is None
    assert model.calls[1].correction is not None and "WRAPPED_DECISION" in model.calls[1].correction
    assert all(c.correction is None for c in model.calls[2:])
    rejected = [
        e
        for e in runtime.store.read_events(state.run_id)
        if e.type is EventType.RUNTIME_VALIDATED and e.payload["runtime_decision"] == "rejected"
    ]
    assert len(rejected) == 1


def test_correct_once_is_bounded(runtime: Runtime) -> None:
    agent = dataclasses.replace(build_agent("react", model=_sloppy(2)), on_rejected_signal="correct_once")
    state = runtime.start(agent, fx.GOAL)
    assert state.status is RunStatus.FAILED
    assert state.usage.rejected_signals == 2 and state.usage.tool_attempts == 0


class _NotingController:
    """First proposes an action the step does not show (refused), then finishes; every proposal
    carries a note and a memo counter, as a controller recording its own bookkeeping does."""

    mode = "test"

    def decide(self, ctx: DecisionContext) -> Proposal:
        proposal_no = ctx.state.memo.get("proposals", 0) + 1
        if ctx.state.usage.rejected_signals == 0:
            signal = ControlDecision(type=DecisionType.EXECUTE_TOOL, action="hidden", args={})
        else:
            signal = ControlDecision(type=DecisionType.FINISH, reason="done")
        return Proposal(
            signal=signal,
            source=SignalSource.PLAN_STEP,
            visible_actions=frozenset(),
            memo={"proposals": proposal_no},
            notes=[NewEvent(type=EventType.BRANCH_TAKEN, payload={"proposal": proposal_no})],
        )


def test_a_refused_proposal_keeps_neither_its_notes_nor_its_memo(runtime: Runtime) -> None:
    agent = Agent(
        name="noting",
        controller=_NotingController(),
        tools=ToolRegistry([]),
        ref=AgentRef(name="tests:noting"),
        on_rejected_signal="correct_once",
    )
    state = runtime.start(agent, "finish after one refusal")
    assert state.status is RunStatus.COMPLETED and state.usage.rejected_signals == 1
    notes = [e.payload for e in runtime.store.read_events(state.run_id) if e.type is EventType.BRANCH_TAKEN]
    # The refused proposal's note went with its memo: the accepted one is the first the run kept.
    assert notes == [{"proposal": 1}] and state.memo == {"proposals": 1}
