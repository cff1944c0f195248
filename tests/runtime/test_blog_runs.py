"""The blog agent on a real SQLite store: stop, trace, answer, bind approvals, budgets."""

from __future__ import annotations

from typing import Any

import pytest

from stateward import RequestRefusedError, RunStatus, Runtime, is_run_suspended
from stateward.core.events import EventType
from stateward.models.base import ModelRequest
from stateward.models.scripted import ScriptedModel
from stateward.observability.payloads import with_defaults
from stateward_demos import blog_fixtures as fx
from stateward_demos.blog import MODES, build_agent, scripted_models

WAIT_TAIL = ["signal_received", "runtime_validated", "state_transition", "pending_recorded", "run_exited"]


def _types(runtime: Runtime, run_id: str) -> list[str]:
    return [e.type.value for e in runtime.store.read_events(run_id)]


@pytest.mark.parametrize("mode", MODES)
def test_every_controller_really_stops_at_the_wait(runtime: Runtime, mode: str) -> None:
    model = scripted_models()[mode]
    state = runtime.start(build_agent(mode, model=model), fx.GOAL)
    calls_at_stop = len(model.calls)

    assert is_run_suspended(state)
    assert state.status is RunStatus.WAITING_FOR_USER
    assert state.pending is not None
    assert (state.pending.request_id, state.pending.state_before) == ("approval_001", RunStatus.RUNNING)
    assert state.pending.question
    assert "draft" not in state.artifacts
    assert _types(runtime, state.run_id)[-5:] == WAIT_TAIL
    assert "budget_exhausted" not in _types(runtime, state.run_id)

    # The run stays stopped: driving it again calls neither the model nor a tool.
    again = runtime.drive(state.run_id)
    assert len(model.calls) == calls_at_stop
    assert again.usage == state.usage
    assert runtime.store.get_artifact(state.run_id, "draft") is None


@pytest.mark.parametrize("mode", MODES)
def test_approve_writes_the_draft_and_completes(runtime: Runtime, mode: str) -> None:
    state = runtime.start(build_agent(mode, max_steps=12), fx.GOAL)
    result = runtime.approve(state.run_id, "approval_001", by="alice")
    assert result.state.status is RunStatus.COMPLETED
    assert result.state.artifacts == {"brief": 1, "draft": 1}
    draft = runtime.store.get_artifact(state.run_id, "draft")
    assert draft is not None and "brief:v1" in draft.content
    answered = runtime.store.get_request(state.run_id, "approval_001")
    assert answered is not None and answered.answer is not None
    assert (answered.answer.verdict, answered.answer.by) == ("approved", "alice")


@pytest.mark.parametrize("mode", MODES)
def test_reject_revises_the_brief_and_asks_again(runtime: Runtime, mode: str) -> None:
    state = runtime.start(build_agent(mode, max_steps=12), fx.GOAL)
    result = runtime.reject(state.run_id, "approval_001", by="bob", comment="add the breaker section")
    assert result.state.status is RunStatus.WAITING_FOR_USER
    assert result.state.pending is not None and result.state.pending.request_id == "approval_002"
    assert result.state.artifacts == {"brief": 2}
    v2 = runtime.store.get_artifact(state.run_id, "brief", 2)
    assert v2 is not None and "add the breaker section" in v2.content
    assert is_run_suspended(result.state)
    final = runtime.approve(state.run_id, "approval_002", by="bob")
    assert final.state.status is RunStatus.COMPLETED
    draft = runtime.store.get_artifact(state.run_id, "draft")
    assert draft is not None and "brief:v2" in draft.content


def test_duplicate_answer_returns_first_outcome_and_does_nothing(runtime: Runtime) -> None:
    state = runtime.start(build_agent("react", max_steps=12), fx.GOAL)
    first = runtime.approve(state.run_id, "approval_001", by="alice")
    events = len(runtime.store.read_events(state.run_id))
    second = runtime.approve(state.run_id, "approval_001", by="mallory")
    assert second.already_answered and not first.already_answered
    assert second.answer.by == "alice"
    assert len(runtime.store.read_events(state.run_id)) == events
    assert second.state.usage == first.state.usage


@pytest.mark.parametrize(("request_id", "code"), [("approval_009", "UNKNOWN_REQUEST"), ("../etc", "UNKNOWN_REQUEST")])
def test_unknown_request_is_refused_and_changes_nothing(runtime: Runtime, request_id: str, code: str) -> None:
    state = runtime.start(build_agent("workflow"), fx.GOAL)
    before = (runtime.store.load_run_at(state.run_id), _types(runtime, state.run_id))
    with pytest.raises(RequestRefusedError) as err:
        runtime.approve(state.run_id, request_id, by="alice")
    assert err.value.code == code
    assert (runtime.store.load_run_at(state.run_id), _types(runtime, state.run_id)) == before


def test_stale_request_with_a_different_verdict_is_refused(runtime: Runtime) -> None:
    state = runtime.start(build_agent("react", max_steps=12), fx.GOAL)
    runtime.reject(state.run_id, "approval_001", by="bob", comment="shorter")
    snapshot = runtime.store.load_run_at(state.run_id)
    with pytest.raises(RequestRefusedError) as err:
        runtime.approve(state.run_id, "approval_001", by="bob")
    assert err.value.code == "REQUEST_ALREADY_ANSWERED"
    assert runtime.store.load_run_at(state.run_id) == snapshot


def test_approval_is_bound_to_the_brief_version_it_was_asked_for(runtime: Runtime) -> None:
    """Approved for brief:v1, the model makes a v2 and tries to draft from it: the v1 approval admits
    nothing for v2, so the Runtime stops the run and asks about exactly the v2 call, by itself."""

    def sneaky(req: ModelRequest) -> dict[str, Any]:
        facts = req.facts
        if not facts["approved_actions"]:
            return fx.react_policy(req)
        if facts["artifacts"].get("brief") == "brief:v1":
            return {
                "type": "EXECUTE_TOOL",
                "action": "create_brief",
                "args": {"title": "t", "outline": ["swapped"], "sources": []},
            }
        if not any(o["action"] == "write_draft" for o in req.observations):
            return {"type": "EXECUTE_TOOL", "action": "write_draft", "args": {"brief": "brief:v2"}}
        return {"type": "FINISH", "reason": "done"}

    state = runtime.start(build_agent("react", max_steps=12, model=ScriptedModel(sneaky)), fx.GOAL)
    result = runtime.approve(state.run_id, "approval_001", by="alice")
    assert "draft" not in result.state.artifacts
    assert runtime.store.get_artifact(state.run_id, "draft") is None
    assert is_run_suspended(result.state)
    pending = result.state.pending
    assert pending is not None and pending.request_id == "approval_002" and pending.asked_by == "runtime"
    assert pending.guarded_action is not None
    assert (pending.guarded_action.tool, pending.guarded_action.args) == ("write_draft", {"brief": "brief:v2"})
    # The v1 approval is still unused: nothing consumed it, and it cannot admit the v2 call.
    assert [g.action.args for g in result.state.approvals] == [{"brief": "brief:v1"}]
    assert result.state.usage.approvals_consumed == 0
    assert result.state.terminal_reason == "approval_required"


def test_budget_exhaustion_is_a_real_terminal_state(runtime: Runtime) -> None:
    state = runtime.start(build_agent("react", max_steps=3), fx.GOAL)
    assert state.status is RunStatus.FAILED
    assert state.terminal_reason == "budget_exhausted"
    types = _types(runtime, state.run_id)
    assert types[-1] == "budget_exhausted"
    assert "run_exited" not in types


def test_workflow_branch_is_a_real_decision(runtime: Runtime) -> None:
    with_clue = runtime.start(build_agent("workflow"), fx.GOAL)
    without = runtime.start(build_agent("workflow", materials="no_clue"), fx.GOAL)
    branches = {
        run.run_id: [
            e.payload["branch_taken"] for e in runtime.store.read_events(run.run_id) if e.type is EventType.BRANCH_TAKEN
        ]
        for run in (with_clue, without)
    }
    assert branches == {with_clue.run_id: [True], without.run_id: [False]}
    assert (with_clue.usage.tool_attempts, without.usage.tool_attempts) == (4, 3)
    assert is_run_suspended(without)


def test_wait_trace_is_the_same_for_every_signal_source(runtime: Runtime) -> None:
    tails = []
    for mode in MODES:
        run = runtime.start(build_agent(mode), fx.GOAL)
        events = runtime.store.read_events(run.run_id)[-5:]
        tails.append([(e.type.value, sorted(with_defaults(e.type, e.payload))) for e in events])
        assert (
            events[0].payload["signal_source"]
            == {"react": "model", "plan_and_execute": "plan_step", "workflow": "workflow_node"}[mode]
        )
    assert tails[0] == tails[1] == tails[2]


def test_run_survives_its_runtime(db_path: Any) -> None:
    from stateward.store.sqlite import SQLiteStore

    first = Runtime(SQLiteStore(db_path))
    state = first.start(build_agent("plan_and_execute", max_steps=12), fx.GOAL)
    first.close()
    second = Runtime(SQLiteStore(db_path))
    result = second.approve(state.run_id, "approval_001", by="carol")
    assert result.state.status is RunStatus.COMPLETED
    second.close()


def test_a_run_may_not_call_itself_done_without_the_draft(runtime: Runtime) -> None:
    def hasty(req: ModelRequest) -> dict[str, Any]:
        if not req.observations:
            return {"type": "EXECUTE_TOOL", "action": "list_materials", "args": {}}
        return {"type": "FINISH", "reason": "looks done to me"}

    state = runtime.start(build_agent("react", model=ScriptedModel(hasty)), fx.GOAL)
    assert state.status is RunStatus.FAILED and state.terminal_reason == "rejected_signal"
    validated = [e.payload for e in runtime.store.read_events(state.run_id) if e.type is EventType.RUNTIME_VALIDATED]
    assert validated[-1]["code"] == "finish_without_draft"
