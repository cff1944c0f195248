"""Approvals are single-use grants for one exact call, and guarded tools ask by themselves.

Every agent here is built from the public API only (``stateward`` and ``stateward.testing``), the way
a user's first file would be: no wait policy, no hand-written binding.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from stateward import (
    Agent,
    ApprovalScope,
    Budget,
    FailNode,
    FinishNode,
    HumanNode,
    ReActController,
    RunStatus,
    Runtime,
    ToolNode,
    ToolRegistry,
    WorkflowController,
    is_run_suspended,
    tool,
)
from stateward.core.events import EventType
from stateward.models.base import ModelRequest
from stateward.testing import ScriptedModel, temporary_runtime


class Ledger:
    """The outside world: every real effect of ``publish`` lands here."""

    def __init__(self) -> None:
        self.published: list[str] = []


def publishing_tools(ledger: Ledger, scope: ApprovalScope = ApprovalScope.ONCE) -> ToolRegistry:
    @tool(requires_approval=True, approval_scope=scope)
    def publish(post_id: str, channel: str = "blog") -> dict[str, str]:
        """Publish a post (a real effect)."""
        ledger.published.append(post_id)
        return {"published": post_id, "channel": channel}

    @tool
    def read_post(post_id: str) -> dict[str, str]:
        """Read a post."""
        return {"post_id": post_id, "text": "hello"}

    return ToolRegistry([publish, read_post])


def repeat_publish(times: int, post_id: str = "1") -> Any:
    """A model that publishes the same post ``times`` times, then finishes."""

    def policy(req: ModelRequest) -> dict[str, Any]:
        done = [o for o in req.observations if o["action"] == "publish" and o["status"] == "SUCCESS"]
        refused = [o for o in req.observations if o["status"] == "REJECTED"]
        if refused or len(done) >= times:
            return {"type": "FINISH", "reason": "published"}
        return {
            "type": "EXECUTE_TOOL",
            "action": "publish",
            "args": {"post_id": post_id},
            "reason": "the editor asked for it",
        }

    return policy


def react_agent(ledger: Ledger, policy: Any, **options: Any) -> Agent:
    scope = options.pop("scope", ApprovalScope.ONCE)
    # Publishing the same post again is what these tests ask for: the no-progress guard stays out of it.
    repeats = options.pop("max_repeats", None)
    return Agent(
        name="publisher",
        controller=ReActController(ScriptedModel(policy), max_repeats=repeats),
        tools=publishing_tools(ledger, scope),
        **options,
    )


@pytest.fixture
def runtime(tmp_path: Path) -> Runtime:
    rt = temporary_runtime(tmp_path)
    yield rt
    rt.close()


def test_a_guarded_call_suspends_the_run_and_asks_by_itself(runtime: Runtime) -> None:
    ledger = Ledger()
    state = runtime.start(react_agent(ledger, repeat_publish(1)), "publish post 1")

    assert is_run_suspended(state) and ledger.published == []
    pending = state.pending
    assert pending is not None and pending.request_id == "approval_001" and pending.kind == "approval"
    assert pending.asked_by == "runtime" and state.terminal_reason == "approval_required"
    action = pending.guarded_action
    assert action is not None
    # Canonical arguments: the default the model left out is what the approval is bound to.
    assert (action.tool, action.args) == ("publish", {"post_id": "1", "channel": "blog"})
    assert "publish" in pending.question and '"post_id":"1"' in pending.question.replace(" ", "")
    assert pending.model_text == "the editor asked for it"  # the model's words travel beside, not inside
    types = [e.type for e in runtime.store.read_events(state.run_id)]
    assert types[-5:] == [
        EventType.SIGNAL_RECEIVED,
        EventType.RUNTIME_VALIDATED,
        EventType.STATE_TRANSITION,
        EventType.PENDING_RECORDED,
        EventType.RUN_EXITED,
    ]


def test_the_approved_call_runs_first_before_any_model_call(runtime: Runtime) -> None:
    ledger = Ledger()
    state = runtime.start(react_agent(ledger, repeat_publish(1)), "publish post 1")
    calls_when_asked = state.usage.model_calls

    done = runtime.approve(state.run_id, "approval_001", by="ann")

    assert ledger.published == ["1"]
    assert done.state.status is RunStatus.COMPLETED and done.state.usage.approvals_consumed == 1
    events = runtime.store.read_events(state.run_id)
    resumed = max(i for i, e in enumerate(events) if e.type is EventType.RUN_RESUMED)
    after = events[resumed + 1 :]
    first_signal = next(e for e in after if e.type is EventType.SIGNAL_RECEIVED)
    assert first_signal.payload["signal_source"] == "runtime" and first_signal.payload["model_calls"] == 0
    first_tool = next(e for e in after if e.type is EventType.TOOL_ATTEMPTED)
    assert first_tool.payload["observation"]["action"] == "publish"
    assert first_tool.seq < next(e.seq for e in after if e.type is EventType.SIGNAL_RECEIVED and e.seq > first_tool.seq)
    assert done.state.usage.model_calls == calls_when_asked + 1  # only the FINISH after the call


def test_one_approval_admits_one_execution(runtime: Runtime) -> None:
    """The defect: one approval of publish {"post_id": "1"} let a model publish it three times."""
    ledger = Ledger()
    state = runtime.start(react_agent(ledger, repeat_publish(3)), "publish post 1 three times")

    asked = []
    for _ in range(3):
        assert state.pending is not None
        asked.append(state.pending.request_id)
        state = runtime.approve(state.run_id, state.pending.request_id, by="ann").state

    assert asked == ["approval_001", "approval_002", "approval_003"]  # a new request each time
    assert ledger.published == ["1", "1", "1"]
    assert state.status is RunStatus.COMPLETED
    assert state.usage.approvals_consumed == 3 and state.approvals == ()


def test_each_execution_waits_for_its_own_approval(runtime: Runtime) -> None:
    ledger = Ledger()
    state = runtime.start(react_agent(ledger, repeat_publish(2)), "publish twice")
    state = runtime.approve(state.run_id, "approval_001", by="ann").state
    assert ledger.published == ["1"]
    assert is_run_suspended(state) and state.pending is not None and state.pending.request_id == "approval_002"
    assert state.approvals == ()  # the first grant is gone: nothing left to admit a second publish


def test_a_standing_grant_is_opt_in_and_shown_on_the_request(runtime: Runtime) -> None:
    ledger = Ledger()
    agent = react_agent(ledger, repeat_publish(3), scope=ApprovalScope.RUN)
    state = runtime.start(agent, "publish three times on one approval")
    assert state.pending is not None and state.pending.approval_scope is ApprovalScope.RUN
    assert "rest of the run" in state.pending.question

    done = runtime.approve(state.run_id, "approval_001", by="ann").state

    assert ledger.published == ["1", "1", "1"]
    assert done.status is RunStatus.COMPLETED and done.requests_issued == 1
    assert done.usage.approvals_consumed == 0 and len(done.approvals) == 1


def test_an_approval_admits_only_the_call_it_was_asked_for(runtime: Runtime) -> None:
    ledger = Ledger()
    posts = iter(["1", "2"])

    def policy(req: ModelRequest) -> dict[str, Any]:
        published = [o for o in req.observations if o["status"] == "SUCCESS"]
        if len(published) == 2:
            return {"type": "FINISH", "reason": "done"}
        return {"type": "EXECUTE_TOOL", "action": "publish", "args": {"post_id": next(posts, "2")}}

    state = runtime.start(react_agent(ledger, policy), "publish 1 then 2")
    state = runtime.approve(state.run_id, "approval_001", by="ann").state
    assert ledger.published == ["1"]
    assert state.pending is not None and state.pending.guarded_action is not None
    assert state.pending.guarded_action.args["post_id"] == "2"


def test_a_rejection_is_an_observation_and_a_finish_after_it_is_no_success(runtime: Runtime) -> None:
    """The defect: after a rejection, a model that said FINISH ended the run COMPLETED / completed."""
    ledger = Ledger()
    model_saw: list[list[dict[str, Any]]] = []

    def policy(req: ModelRequest) -> dict[str, Any]:
        model_saw.append(req.observations)
        return repeat_publish(1)(req)

    state = runtime.start(react_agent(ledger, policy), "pay the invoice")
    done = runtime.reject(state.run_id, "approval_001", by="ann", comment="wrong amount").state

    assert ledger.published == []
    refused = model_saw[-1][-1]
    assert refused["status"] == "REJECTED" and refused["error_code"] == "REJECTED_BY_APPROVER"
    assert refused["result"]["comment"] == "wrong amount" and refused["result"]["rejected_by"] == "ann"
    assert (done.status, done.terminal_reason) == (RunStatus.FAILED, "rejected_by_approver")


def test_an_agent_may_end_a_refused_run_cancelled(runtime: Runtime) -> None:
    ledger = Ledger()
    state = runtime.start(react_agent(ledger, repeat_publish(1), on_refusal="cancel"), "pay")
    done = runtime.reject(state.run_id, "approval_001", by="ann").state
    assert (done.status, done.terminal_reason) == (RunStatus.CANCELLED, "rejected_by_approver")


def test_an_approval_after_a_refusal_lets_the_run_complete(runtime: Runtime) -> None:
    ledger = Ledger()
    posts = iter(["1", "2"])

    def policy(req: ModelRequest) -> dict[str, Any]:
        if any(o["status"] == "SUCCESS" for o in req.observations):
            return {"type": "FINISH", "reason": "done"}
        return {"type": "EXECUTE_TOOL", "action": "publish", "args": {"post_id": next(posts, "2")}}

    state = runtime.start(react_agent(ledger, policy), "publish something acceptable")
    state = runtime.reject(state.run_id, "approval_001", by="ann", comment="not that one").state
    assert state.pending is not None and state.pending.request_id == "approval_002"
    done = runtime.approve(state.run_id, "approval_002", by="ann").state
    assert ledger.published == ["2"] and done.status is RunStatus.COMPLETED


def workflow_agent(ledger: Ledger, nodes: list[Any]) -> Agent:
    return Agent(name="wf", controller=WorkflowController(nodes), tools=publishing_tools(ledger))


def test_a_guarded_workflow_node_asks_and_routes_on_the_answer(runtime: Runtime) -> None:
    ledger = Ledger()
    nodes = [ToolNode("publish", "publish", {"post_id": "7"}, next="done"), FinishNode("done")]
    approved = runtime.start(workflow_agent(ledger, nodes), "publish 7")
    assert approved.pending is not None and approved.pending.asked_by == "runtime"
    done = runtime.approve(approved.run_id, "approval_001", by="ann").state
    assert (done.status, ledger.published) == (RunStatus.COMPLETED, ["7"])

    rejected = runtime.start(workflow_agent(ledger, nodes), "publish 7 again")
    ended = runtime.reject(rejected.run_id, "approval_001", by="ann").state
    assert (ended.status, ended.terminal_reason) == (RunStatus.FAILED, "rejected_by_approver")
    assert ledger.published == ["7"]


def test_a_refused_workflow_reaches_its_failure_node(runtime: Runtime) -> None:
    ledger = Ledger()
    nodes = [
        HumanNode("ask", "Publish 7?", on_approved="publish", on_rejected="refused"),
        ToolNode("publish", "publish", {"post_id": "7"}, next="done"),
        FinishNode("done"),
        FailNode("refused", reason="editor_declined"),
    ]
    state = runtime.start(workflow_agent(ledger, nodes), "publish 7")
    ended = runtime.reject(state.run_id, "approval_001", by="ann").state
    assert (ended.status, ended.terminal_reason) == (RunStatus.FAILED, "editor_declined")


def test_a_workflow_that_routes_a_refusal_to_its_finish_node_does_not_complete(runtime: Runtime) -> None:
    ledger = Ledger()
    nodes = [HumanNode("ask", "Publish 7?", on_approved="publish", on_rejected="done"), FinishNode("done")]
    nodes.insert(1, ToolNode("publish", "publish", {"post_id": "7"}, next="done"))
    state = runtime.start(workflow_agent(ledger, nodes), "publish 7")
    ended = runtime.reject(state.run_id, "approval_001", by="ann").state
    assert (ended.status, ended.terminal_reason) == (RunStatus.FAILED, "rejected_by_approver")


def test_the_approval_in_a_human_node_admits_the_tool_node_once(runtime: Runtime) -> None:
    """A person approves in a HUMAN node bound to the exact call: the TOOL node then needs no second ask."""
    ledger = Ledger()
    from stateward import WaitCheck, guard

    nodes = [
        HumanNode("ask", "Publish 7?", on_approved="publish", on_rejected="refused"),
        ToolNode("publish", "publish", {"post_id": "7", "channel": "blog"}, next="done"),
        FinishNode("done"),
        FailNode("refused"),
    ]
    agent = workflow_agent(ledger, nodes)
    bound = guard("publish", {"post_id": "7", "channel": "blog"})
    agent.wait_policy = lambda decision, state: WaitCheck(guarded_action=bound)
    state = runtime.start(agent, "publish 7")
    done = runtime.approve(state.run_id, "approval_001", by="ann").state
    assert (done.status, ledger.published, done.requests_issued) == (RunStatus.COMPLETED, ["7"], 1)
    assert done.usage.approvals_consumed == 1


def test_a_guarded_call_the_gateway_would_refuse_is_not_put_to_a_person(runtime: Runtime) -> None:
    ledger = Ledger()

    def policy(req: ModelRequest) -> dict[str, Any]:
        if req.observations:
            return {"type": "FAIL", "reason": "cannot publish"}
        return {"type": "EXECUTE_TOOL", "action": "publish", "args": {"post_id": 5, "bogus": True}}

    done = runtime.start(react_agent(ledger, policy), "publish")
    assert done.requests_issued == 0 and done.status is RunStatus.FAILED
    attempted = [e for e in runtime.store.read_events(done.run_id) if e.type is EventType.TOOL_ATTEMPTED]
    assert attempted[0].payload["observation"]["error_code"] == "INVALID_ARGUMENT"


def test_an_unbounded_run_is_refused_at_start(runtime: Runtime) -> None:
    from stateward import UserError

    agent = react_agent(Ledger(), repeat_publish(1))
    unbounded = Budget(max_steps=None)
    with pytest.raises(UserError) as err:
        runtime.start(agent, "anything", budget=unbounded)
    assert err.value.code == "UNBOUNDED_RUN"
    assert runtime.store.list_runs() == []
