"""A person's answer to a reconciliation decides the call's outcome, in every controller.

The tools here take effect and then never answer in time (a credit posted whose response is lost), and
have no ``lookup``: only a person can say what happened. "It happened" (approve) is a success confirmed by
them; "it did not happen" (reject) is NOT_EXECUTED, after which the tool's retry policy decides.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from stateward import (
    Agent,
    FinishNode,
    PlanAndExecuteController,
    ReActController,
    RetryPolicy,
    RunStatus,
    Runtime,
    ToolContext,
    ToolNode,
    ToolRegistry,
    WorkflowController,
    tool,
)
from stateward.core.errors import RequestRefusedError
from stateward.core.events import EventType
from stateward.core.state import AgentRef, RequestKind, is_run_suspended
from stateward.store.sqlite import SQLiteStore
from stateward.testing import ScriptedModel


@dataclass
class Bank:
    """The system the credit acts on: which keys took effect, and how many times the handler was called."""

    effects: list[str] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    notified: list[str] = field(default_factory=list)
    answer_on_call: int | None = None  # the call (1-based) that answers in time; the others hang
    effect_on_call: frozenset[int] = frozenset({1})  # which calls take effect before hanging
    fail_on_call: int | None = None  # the call (1-based) that fails clearly, having done nothing
    hang: threading.Event = field(default_factory=threading.Event)

    def tools(
        self, *, retry: RetryPolicy | None = None, role: str | None = "finance", guarded: bool = True
    ) -> ToolRegistry:
        @tool(
            description="Credit an account.",
            side_effect=True,
            requires_approval=guarded,
            approver_role=role,
            timeout_s=0.05,
            retry=retry,
        )
        def credit(account: str, cents: int, ctx: ToolContext) -> dict[str, Any]:
            self.calls.append(ctx.idempotency_key)
            number = len(self.calls)
            if number == self.fail_on_call:
                raise ValueError("the bank refused the posting")
            if number in self.effect_on_call:
                self.effects.append(ctx.idempotency_key)
            if number != self.answer_on_call:
                self.hang.wait(1)  # the response is lost: the gateway sees a timeout
            return {"credited": cents, "account": account}

        @tool(description="Tell the customer.")
        def notify(text: str) -> str:
            self.notified.append(text)
            return "sent"

        return ToolRegistry([credit, notify])


@pytest.fixture
def bank() -> Iterator[Bank]:
    b = Bank()
    yield b
    b.hang.set()  # let abandoned handler threads end


CREDIT = {"account": "acct-7", "cents": 1200}
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def workflow_agent(bank: Bank, **kw: Any) -> Agent:
    nodes = [
        ToolNode("credit", "credit", CREDIT, next="notify"),
        ToolNode("notify", "notify", {"text": "credited"}, next="done"),
        FinishNode("done"),
    ]
    return Agent(
        name="wf",
        controller=WorkflowController(nodes),
        tools=bank.tools(**kw),
        ref=AgentRef(name="tests:none"),
        approver_role="ops",
    )


def react_agent(bank: Bank, seen: list[list[dict[str, Any]]], **kw: Any) -> Agent:
    def decide(request: Any) -> dict[str, Any]:
        seen.append([dict(o) for o in request.observations])
        credit = [o for o in request.observations if o["action"] == "credit"]
        if any(o["action"] == "notify" for o in request.observations):
            return {"type": "FINISH", "reason": "credited and told"}
        if credit and credit[-1]["status"] == "SUCCESS":
            return {"type": "EXECUTE_TOOL", "action": "notify", "args": {"text": "credited"}}
        if credit and credit[-1]["status"] == "FAILED":
            return {"type": "FAIL", "reason": f"credit {credit[-1]['error_code']}"}
        if credit:
            return {"type": "FAIL", "reason": "credit still unknown"}
        return {"type": "EXECUTE_TOOL", "action": "credit", "args": CREDIT}

    return Agent(
        name="react",
        controller=ReActController(ScriptedModel(decide)),
        tools=bank.tools(**kw),
        ref=AgentRef(name="tests:none"),
    )


def plan_agent(bank: Bank) -> Agent:
    plan = {
        "steps": [
            {"kind": "tool", "action": "credit", "args": CREDIT},
            {"kind": "tool", "action": "notify", "args": {"text": "credited"}},
            {"kind": "finish", "reason": "done"},
        ]
    }
    return Agent(
        name="plan",
        controller=PlanAndExecuteController(ScriptedModel(lambda request: plan)),
        tools=bank.tools(),
        ref=AgentRef(name="tests:none"),
    )


def _to_reconciliation(runtime: Runtime, agent: Agent) -> str:
    """Start the run, approve the credit (as finance), and return the run once it asks the reconciliation."""
    state = runtime.start(agent, "credit the account once")
    assert state.pending is not None and state.pending.kind is RequestKind.APPROVAL
    assert state.pending.approver_role == "finance"  # the tool's role, over the agent's
    state = runtime.approve(state.run_id, state.pending.request_id, by="fin", roles=frozenset({"finance"})).state
    assert state.status is RunStatus.WAITING_FOR_USER and is_run_suspended(state)
    assert state.pending is not None and state.pending.kind is RequestKind.RECONCILIATION
    return state.run_id


def _gates_hold(runtime: Runtime, run_id: str) -> None:
    """The hard gates, audited from the records: no unauthorized execution, no duplicate side effect."""
    from stateward.observability.gates import audit

    report = audit(runtime.store, [run_id])
    held = {g.name: (g.value, g.opportunities) for g in report.gates if not g.holds}
    assert held == {}, held
    journalled = next(g for g in report.gates if g.name == "unauthorized_tool_executions")
    assert journalled.opportunities == 1


def _observed(runtime: Runtime, run_id: str) -> list[dict[str, Any]]:
    return [
        {**e.payload["observation"], "runtime_action": e.payload.get("runtime_action", "EXECUTE")}
        for e in runtime.events(run_id, content=True)
        if e.type is EventType.TOOL_ATTEMPTED
    ]


def test_workflow_it_happened_is_a_success_confirmed_by_the_person_and_the_next_node_runs(
    runtime: Runtime, bank: Bank
) -> None:
    run_id = _to_reconciliation(runtime, workflow_agent(bank))
    pending = runtime.get(run_id).pending
    assert pending is not None and pending.reconciles is not None
    done = runtime.approve(
        run_id, pending.request_id, by="fin", comment="ledger shows it", roles=frozenset({"finance"})
    )
    assert done.state.status is RunStatus.COMPLETED, done.state.terminal_reason
    assert bank.notified == ["credited"]  # the next node ran
    assert len(bank.calls) == 1  # never run again
    confirmed = _observed(runtime, run_id)[1]
    assert confirmed["status"] == "SUCCESS" and confirmed["runtime_action"] == "CONFIRMED_BY_PERSON"
    evidence = confirmed["result"]["confirmed_by_person"]
    assert evidence["by"] == "fin" and evidence["comment"] == "ledger shows it" and evidence["outcome"] == "SUCCEEDED"
    assert evidence["request_id"] == pending.request_id and evidence["at"]
    assert evidence["evidence_id"] == f"person:{pending.request_id}"  # citable, like any evidence
    assert "credited" not in confirmed["result"]  # nothing invented: the result is the person's word
    record = runtime.store.get_side_effect(pending.reconciles.idempotency_key)
    assert record is not None and record.status == "SUCCEEDED"
    assert record.result["result"]["confirmed_by_person"]["by"] == "fin"
    _gates_hold(runtime, run_id)


def test_workflow_it_did_not_happen_retries_once_under_the_same_key(runtime: Runtime, bank: Bank) -> None:
    bank.effect_on_call, bank.answer_on_call = frozenset({2}), 2  # the first try never reached the bank
    run_id = _to_reconciliation(runtime, workflow_agent(bank))
    pending = runtime.get(run_id).pending
    assert pending is not None and pending.reconciles is not None and "retried once" in pending.question
    done = runtime.reject(
        run_id, pending.request_id, by="fin", comment="not in the ledger", roles=frozenset({"finance"})
    )
    assert done.state.status is RunStatus.COMPLETED, done.state.terminal_reason
    assert bank.calls == [pending.reconciles.idempotency_key] * 2  # one retry, same key
    assert bank.effects == [pending.reconciles.idempotency_key] and bank.notified == ["credited"]
    retried = _observed(runtime, run_id)[1]
    assert retried["status"] == "SUCCESS" and retried["runtime_action"] == "RETRY_ONCE"
    _gates_hold(runtime, run_id)


def test_workflow_it_did_not_happen_without_a_retry_fails_the_step_by_name(runtime: Runtime, bank: Bank) -> None:
    run_id = _to_reconciliation(runtime, workflow_agent(bank, retry=RetryPolicy(max_attempts=1)))
    pending = runtime.get(run_id).pending
    assert pending is not None and "no retry" in pending.question
    done = runtime.reject(run_id, pending.request_id, by="fin", roles=frozenset({"finance"}))
    assert done.state.status is RunStatus.FAILED
    assert done.state.terminal_reason == "node credit failed: NOT_EXECUTED"
    assert len(bank.calls) == 1 and bank.notified == []
    failed = _observed(runtime, run_id)[1]
    assert failed["status"] == "FAILED" and failed["error_code"] == "NOT_EXECUTED"
    assert failed["result"]["confirmed_by_person"]["outcome"] == "NOT_EXECUTED"
    assert pending.reconciles is not None
    record = runtime.store.get_side_effect(pending.reconciles.idempotency_key)
    assert record is not None and record.status == "NOT_EXECUTED"


def test_the_single_retry_is_spent_once_a_second_no_fails_the_step(runtime: Runtime, bank: Bank) -> None:
    run_id = _to_reconciliation(runtime, workflow_agent(bank))  # every try hangs
    first = runtime.get(run_id).pending
    assert first is not None
    second = runtime.reject(run_id, first.request_id, by="fin", roles=frozenset({"finance"})).state
    assert second.pending is not None and second.pending.kind is RequestKind.RECONCILIATION
    assert second.pending.reconciles is not None and second.pending.reconciles.retry_spent
    assert "no retry" in second.pending.question
    done = runtime.reject(run_id, second.pending.request_id, by="fin", roles=frozenset({"finance"}))
    assert done.state.status is RunStatus.FAILED and done.state.terminal_reason == "node credit failed: NOT_EXECUTED"
    assert len(bank.calls) == 2  # the first try and its one retry, never a third


def test_react_model_sees_the_recorded_success_never_the_stale_pending(runtime: Runtime, bank: Bank) -> None:
    seen: list[list[dict[str, Any]]] = []
    run_id = _to_reconciliation(runtime, react_agent(bank, seen))
    pending = runtime.get(run_id).pending
    assert pending is not None
    before = len(seen)
    done = runtime.approve(run_id, pending.request_id, by="fin", roles=frozenset({"finance"}))
    assert done.state.status is RunStatus.COMPLETED and done.state.terminal_reason == "completed"
    assert bank.notified == ["credited"]  # the follow-up step was taken
    after = seen[before:]
    assert after, "the model was asked again after the answer"
    statuses = [o["status"] for request in after for o in request if o["action"] == "credit"]
    assert statuses and set(statuses) == {"SUCCESS"}  # never PENDING_VERIFICATION
    assert after[0][-1]["result"]["confirmed_by_person"]["by"] == "fin"


def test_react_model_sees_not_executed_when_no_retry_is_allowed(runtime: Runtime, bank: Bank) -> None:
    seen: list[list[dict[str, Any]]] = []
    run_id = _to_reconciliation(runtime, react_agent(bank, seen, retry=RetryPolicy(max_attempts=1)))
    pending = runtime.get(run_id).pending
    assert pending is not None
    done = runtime.reject(run_id, pending.request_id, by="fin", roles=frozenset({"finance"}))
    assert done.state.status is RunStatus.FAILED and done.state.terminal_reason == "credit NOT_EXECUTED"
    credit = [o for o in seen[-1] if o["action"] == "credit"]
    assert [o["status"] for o in credit] == ["FAILED"] and credit[0]["error_code"] == "NOT_EXECUTED"


def test_plan_and_execute_goes_on_to_the_next_step(runtime: Runtime, bank: Bank) -> None:
    run_id = _to_reconciliation(runtime, plan_agent(bank))
    pending = runtime.get(run_id).pending
    assert pending is not None
    done = runtime.approve(run_id, pending.request_id, by="fin", roles=frozenset({"finance"}))
    assert done.state.status is RunStatus.COMPLETED and bank.notified == ["credited"] and len(bank.calls) == 1


def test_plan_and_execute_does_not_replan_on_it_did_not_happen(runtime: Runtime, bank: Bank) -> None:
    bank.effect_on_call, bank.answer_on_call = frozenset({2}), 2
    agent = plan_agent(bank)
    run_id = _to_reconciliation(runtime, agent)
    pending = runtime.get(run_id).pending
    assert pending is not None
    done = runtime.reject(run_id, pending.request_id, by="fin", roles=frozenset({"finance"}))
    assert done.state.status is RunStatus.COMPLETED and bank.notified == ["credited"]
    plans = [e for e in runtime.store.read_events(run_id) if e.type is EventType.PLAN_RECORDED]
    assert len(plans) == 1  # the answer settled the call; it was no verdict on the plan


class _CrashAfterTool:
    """A process dies after the gateway recorded the person's answer, before the step committed (once)."""

    def __init__(self) -> None:
        self.armed = False

    def point(self, name: str) -> None:
        if name == "after_tool_before_record" and self.armed:
            self.armed = False
            raise SystemExit("killed")


def test_a_crash_after_recording_the_answer_replays_it_and_never_runs_the_call(db_path: Any, bank: Bank) -> None:
    faults = _CrashAfterTool()
    runtime = Runtime(SQLiteStore(db_path), faults=faults)
    try:
        run_id = _to_reconciliation(runtime, workflow_agent(bank))
        pending = runtime.get(run_id).pending
        assert pending is not None and pending.reconciles is not None
        runtime.approve(run_id, pending.request_id, by="fin", roles=frozenset({"finance"}), drive=False)
        assert runtime.store.get_side_effect(pending.reconciles.idempotency_key).status == "UNKNOWN_OUTCOME"
        faults.armed = True
        with pytest.raises(SystemExit):
            runtime.drive(run_id)
        record = runtime.store.get_side_effect(pending.reconciles.idempotency_key)
        assert record is not None and record.status == "SUCCEEDED"  # the person's word is durable already
        assert runtime.get(run_id).status is RunStatus.RUNNING  # the step itself was lost with the process
        done = runtime.drive(run_id)  # the next holder: the recorded answer is replayed, nothing re-run
        assert done.status is RunStatus.COMPLETED and len(bank.calls) == 1 and bank.notified == ["credited"]
        replayed = _observed(runtime, run_id)[1]
        assert replayed["status"] == "SUCCESS" and replayed["runtime_action"] == "REPLAY_SUCCESS"
        assert replayed["result"]["confirmed_by_person"]["by"] == "fin"
    finally:
        runtime.close()


def test_the_reconciliation_carries_the_tool_role_and_the_agent_ttl(db_path: Any, bank: Bank) -> None:
    clock = [NOW]
    runtime = Runtime(SQLiteStore(db_path), clock=lambda: clock[0])
    try:
        agent = workflow_agent(bank)
        agent.request_ttl = timedelta(hours=1)
        run_id = _to_reconciliation(runtime, agent)
        pending = runtime.get(run_id).pending
        assert pending is not None
        assert pending.approver_role == "finance" and pending.expires_at == NOW + timedelta(hours=1)
        assert pending.asked_by == "runtime"  # the Runtime's question, not a model's
        for roles in (frozenset(), frozenset({"comms"}), frozenset({"ops"})):  # ops: the agent's role, overridden
            with pytest.raises(RequestRefusedError) as refused:
                runtime.approve(run_id, pending.request_id, by="someone", roles=roles)
            assert refused.value.code == "ROLE_NOT_ALLOWED"
        with pytest.raises(RequestRefusedError) as other_tenant:
            runtime.approve(run_id, pending.request_id, by="fin", roles=frozenset({"finance"}), tenant="acme")
        assert other_tenant.value.code == "UNKNOWN_REQUEST"
        clock[0] = NOW + timedelta(hours=2)
        with pytest.raises(RequestRefusedError) as late:
            runtime.approve(run_id, pending.request_id, by="fin", roles=frozenset({"finance"}))
        assert late.value.code == "REQUEST_EXPIRED"
        assert runtime.expire_requests() == [pending.request_id]
        ended = runtime.get(run_id)
        assert ended.status is RunStatus.FAILED and ended.terminal_reason == "request_expired"  # the agent's policy
        assert len(bank.calls) == 1 and bank.notified == []
    finally:
        runtime.close()


def test_without_a_tool_role_the_agent_role_answers(runtime: Runtime, bank: Bank) -> None:
    agent = workflow_agent(bank, role=None)
    state = runtime.start(agent, "credit")
    assert state.pending is not None and state.pending.approver_role == "ops"
    state = runtime.approve(state.run_id, state.pending.request_id, by="op", roles=frozenset({"ops"})).state
    assert state.pending is not None and state.pending.kind is RequestKind.RECONCILIATION
    assert state.pending.approver_role == "ops"


def plan_run_agent(bank: Bank, seen: list[list[dict[str, Any]]]) -> Agent:
    """A plan run of one item: credit the account (a guarded call that times out), then record the receipt."""
    from stateward import Budget
    from stateward.controllers.plan_run import PlanRunConfig, PlanRunController
    from stateward.controllers.plan_support import plan_finish_policy, plan_run_tools
    from stateward.planning.budget import BudgetLimits
    from stateward.planning.goal import GoalContract

    goal = GoalContract(goal_id="g1", objective="Credit the account once")
    plan = {
        "plan_id": "p1",
        "version": 1,
        "goal_id": "g1",
        "milestones": [{"milestone_id": "M1", "title": "all"}],
        "work_items": [
            {
                "work_item_id": "W1",
                "milestone_id": "M1",
                "title": "credit",
                "task_type": "LOCAL_REACT",
                "dependencies": [],
                "required_capabilities": ["credit"],
                "output_spec": {"artifact_type": "receipt"},
                "completion_criteria": ["receipt written"],
                "max_react_steps": 4,
                "estimated_cost": {"tool_calls": 3, "model_calls": 3, "tokens": 0},
            }
        ],
    }

    def worker(request: Any) -> dict[str, Any]:
        seen.append([dict(o) for o in request.observations])
        credited = [o for o in request.observations if o["action"] == "credit"]
        if not credited:
            return {"type": "EXECUTE_TOOL", "action": "credit", "args": CREDIT}
        if credited[-1]["status"] != "SUCCESS":
            return {"type": "FAIL", "reason": "credit not done"}
        return {
            "type": "EXECUTE_TOOL",
            "action": "record_output",
            "args": {
                "artifact_type": "receipt",
                "content": '{"credited": true}',
                "evidence": [credited[-1]["evidence_id"]],  # the person's confirmation is the evidence
            },
        }

    config = PlanRunConfig(goal=goal, budget=BudgetLimits(max_reflections_per_artifact=1), deliverable="receipt")
    controller = PlanRunController(ScriptedModel(lambda request: plan), ScriptedModel(worker), config)
    return Agent(
        name="planner",
        controller=controller,
        tools=ToolRegistry([*bank.tools(), *plan_run_tools()]),
        ref=AgentRef(name="tests:none"),
        finish_policy=plan_finish_policy,
        budget=Budget(max_steps=30),
    )


def test_plan_run_item_attempt_succeeds_on_it_happened(runtime: Runtime, bank: Bank) -> None:
    seen: list[list[dict[str, Any]]] = []
    run_id = _to_reconciliation(runtime, plan_run_agent(bank, seen))
    pending = runtime.get(run_id).pending
    assert pending is not None
    before = len(seen)
    done = runtime.approve(run_id, pending.request_id, by="fin", roles=frozenset({"finance"}))
    assert done.state.status is RunStatus.COMPLETED, done.state.terminal_reason
    assert len(bank.calls) == 1 and done.state.artifacts.get("receipt") == 1
    statuses = [o["status"] for request in seen[before:] for o in request if o["action"] == "credit"]
    assert statuses and set(statuses) == {"SUCCESS"}
    ended = [e.payload for e in runtime.store.read_events(run_id) if e.type is EventType.WORK_ITEM_ENDED]
    assert [(e["work_item_id"], e["outcome"]) for e in ended] == [("W1", "COMPLETED")]


def test_a_crash_during_the_allowed_retry_never_makes_a_second_retry(db_path: Any, bank: Bank) -> None:
    faults = _CrashAfterTool()
    runtime = Runtime(SQLiteStore(db_path), faults=faults)
    try:
        run_id = _to_reconciliation(runtime, workflow_agent(bank))  # every try hangs
        pending = runtime.get(run_id).pending
        assert pending is not None
        runtime.reject(run_id, pending.request_id, by="fin", roles=frozenset({"finance"}), drive=False)
        faults.armed = True
        with pytest.raises(SystemExit):
            runtime.drive(run_id)  # the retry ran (and hung), then the process died before the step committed
        assert len(bank.calls) == 2
        state = runtime.drive(run_id)
        assert len(bank.calls) == 2  # the retry under this answer is never made twice
        assert state.pending is not None and state.pending.kind is RequestKind.RECONCILIATION
        assert state.pending.reconciles is not None and state.pending.reconciles.retry_spent
    finally:
        runtime.close()


def test_reconcile_answers_only_a_reconciliation_and_says_what_it_means(runtime: Runtime, bank: Bank) -> None:
    state = runtime.start(workflow_agent(bank), "credit")
    assert state.pending is not None and state.pending.kind is RequestKind.APPROVAL
    with pytest.raises(RequestRefusedError) as wrong:
        runtime.reconcile(state.run_id, "approval_001", happened=True, by="fin", roles=frozenset({"finance"}))
    assert wrong.value.code == "WRONG_ANSWER_KIND"  # a reconciliation's answer never approves an action
    assert runtime.get(state.run_id).pending == state.pending and bank.calls == []
    state = runtime.approve(state.run_id, "approval_001", by="fin", roles=frozenset({"finance"})).state
    assert state.pending is not None
    done = runtime.reconcile(
        state.run_id, state.pending.request_id, happened=True, by="fin", comment="seen", roles=frozenset({"finance"})
    )
    assert done.state.status is RunStatus.COMPLETED and done.answer.verdict == "approved" and len(bank.calls) == 1


@pytest.mark.parametrize("happened", [True, False])
def test_the_answer_is_recorded_even_when_the_tool_budget_ran_out(runtime: Runtime, bank: Bank, happened: bool) -> None:
    from stateward import Budget

    agent = workflow_agent(bank)
    agent.budget = Budget(max_tool_calls=1)
    run_id = _to_reconciliation(runtime, agent)
    pending = runtime.get(run_id).pending
    assert pending is not None and pending.reconciles is not None
    done = runtime.reconcile(run_id, pending.request_id, happened=happened, by="fin", roles=frozenset({"finance"}))
    record = runtime.store.get_side_effect(pending.reconciles.idempotency_key)
    assert record is not None and record.status == ("SUCCEEDED" if happened else "NOT_EXECUTED")
    settled = _observed(runtime, run_id)[1]
    assert settled["status"] == ("SUCCESS" if happened else "FAILED")
    if not happened:
        assert settled["error_code"] == "BUDGET_EXCEEDED"  # the retry it allowed had no call left to spend
    assert done.state.status is RunStatus.FAILED and len(bank.calls) == 1 and bank.notified == []


def test_an_approval_a_controller_binds_with_guard_carries_the_guarded_tools_role(runtime: Runtime) -> None:
    from stateward import WaitCheck, guard

    @tool(requires_approval=True, approver_role="comms")
    def send_email(to: str) -> str:
        """Send an email (communications approves it)."""
        return "sent"

    def ask_first(request: Any) -> dict[str, Any]:
        return {"type": "REQUEST_USER_INPUT", "question": "May I email ann?"}

    agent = Agent(
        name="mailer",
        controller=ReActController(ScriptedModel(ask_first)),
        tools=ToolRegistry([send_email]),
        ref=AgentRef(name="tests:none"),
        approver_role="finance",
        wait_policy=lambda decision, state: WaitCheck(
            guarded_action=guard("send_email", {"to": "ann@example.com"}), kind=RequestKind.APPROVAL
        ),
    )
    state = runtime.start(agent, "email ann")
    assert state.pending is not None and state.pending.guarded_action is not None
    assert state.pending.approver_role == "comms"  # the guarded tool's own role, over the agent's finance
    with pytest.raises(RequestRefusedError) as refused:
        runtime.approve(state.run_id, state.pending.request_id, by="fin", roles=frozenset({"finance"}))
    assert refused.value.code == "ROLE_NOT_ALLOWED"


@pytest.mark.postgres
@pytest.mark.parametrize("happened", [True, False])
def test_on_postgres_the_answer_decides_and_the_journal_keeps_it(pg_url: str, bank: Bank, happened: bool) -> None:
    from stateward.store.backends import open_store

    bank.effect_on_call, bank.answer_on_call = (frozenset({1}), None) if happened else (frozenset({2}), 2)
    runtime = Runtime(open_store(pg_url))
    try:
        run_id = _to_reconciliation(runtime, workflow_agent(bank))
        pending = runtime.get(run_id).pending
        assert pending is not None and pending.reconciles is not None and pending.approver_role == "finance"
        done = runtime.reconcile(run_id, pending.request_id, happened=happened, by="fin", roles=frozenset({"finance"}))
        assert done.state.status is RunStatus.COMPLETED and bank.notified == ["credited"]
        assert bank.effects == [pending.reconciles.idempotency_key]  # the credit took effect exactly once
        record = runtime.store.get_side_effect(pending.reconciles.idempotency_key)
        assert record is not None and record.status == "SUCCEEDED"
        _gates_hold(runtime, run_id)
    finally:
        runtime.close()


def test_an_expired_reconciliation_escalates_and_the_escalated_answer_still_decides(db_path: Any, bank: Bank) -> None:
    clock = [NOW]
    runtime = Runtime(SQLiteStore(db_path), clock=lambda: clock[0])
    try:
        agent = workflow_agent(bank)
        agent.request_ttl, agent.on_request_expiry, agent.escalation_role = timedelta(hours=1), "escalate", "cfo"
        run_id = _to_reconciliation(runtime, agent)
        first = runtime.get(run_id).pending
        assert first is not None and first.expires_at == NOW + timedelta(hours=1)
        clock[0] = NOW + timedelta(hours=2)
        runtime.expire_requests()
        escalated = runtime.get(run_id).pending
        assert escalated is not None and escalated.kind is RequestKind.RECONCILIATION
        assert escalated.approver_role == "cfo" and escalated.replaces == first.request_id
        assert escalated.reconciles == first.reconciles
        with pytest.raises(RequestRefusedError):
            runtime.reconcile(run_id, escalated.request_id, happened=True, by="fin", roles=frozenset({"finance"}))
        done = runtime.reconcile(run_id, escalated.request_id, happened=True, by="boss", roles=frozenset({"cfo"}))
        assert done.state.status is RunStatus.COMPLETED and len(bank.calls) == 1 and bank.notified == ["credited"]
    finally:
        runtime.close()


def test_a_crash_after_the_allowed_retry_failed_keeps_that_failure(db_path: Any, bank: Bank) -> None:
    bank.fail_on_call = 2
    faults = _CrashAfterTool()
    runtime = Runtime(SQLiteStore(db_path), faults=faults)
    try:
        run_id = _to_reconciliation(runtime, workflow_agent(bank))
        pending = runtime.get(run_id).pending
        assert pending is not None
        runtime.reject(run_id, pending.request_id, by="fin", roles=frozenset({"finance"}), drive=False)
        faults.armed = True
        with pytest.raises(SystemExit):
            runtime.drive(run_id)
        assert len(bank.calls) == 2
        state = runtime.drive(run_id)
        assert len(bank.calls) == 2  # the failed retry is not made again
        assert state.status is RunStatus.FAILED and state.terminal_reason == "node credit failed: EXECUTION_ERROR"
    finally:
        runtime.close()


def test_the_needs_reconciliation_webhook_names_who_may_answer_and_until_when(db_path: Any, bank: Bank) -> None:
    import json

    from stateward.store.outbox import NoticeKind, WebhookSubscription

    store = SQLiteStore(db_path)
    store.add_webhook(
        WebhookSubscription(
            subscription_id="wh_1",
            tenant="default",
            url="https://hooks.example/finance",
            secret="whsec_x",
            kinds=(NoticeKind.NEEDS_RECONCILIATION,),
            created_at=1000.0,
        )
    )
    runtime = Runtime(store, clock=lambda: NOW)
    try:
        agent = workflow_agent(bank)
        agent.request_ttl = timedelta(minutes=30)
        run_id = _to_reconciliation(runtime, agent)
        [delivery] = store.list_deliveries("default")
        body = json.loads(delivery.body)
        assert (body["type"], body["run_id"], body["request_id"]) == (
            "run.needs_reconciliation",
            run_id,
            "approval_002",
        )
        assert body["approver_role"] == "finance" and body["expires_at"] == (NOW + timedelta(minutes=30)).isoformat()
    finally:
        runtime.close()


def test_an_unguarded_side_effect_is_reconciled_the_same_way(runtime: Runtime, bank: Bank) -> None:
    state = runtime.start(workflow_agent(bank, guarded=False, role=None), "credit")
    assert state.pending is not None and state.pending.kind is RequestKind.RECONCILIATION  # no approval first
    assert state.pending.approver_role == "ops"  # the agent's role: the tool names none
    done = runtime.reconcile(state.run_id, state.pending.request_id, happened=True, by="op", roles=frozenset({"ops"}))
    assert done.state.status is RunStatus.COMPLETED and len(bank.calls) == 1 and bank.notified == ["credited"]


def test_a_plan_runs_unknown_outcome_comes_with_the_sources_handoff_package(runtime: Runtime, bank: Bank) -> None:
    """Source 14: a non-idempotent call's outcome unknown is a handoff - the reconciliation request is the
    Runtime's, and the plan run records the package the person answering it reads (it decides nothing)."""
    seen: list[list[dict[str, Any]]] = []
    run_id = _to_reconciliation(runtime, plan_run_agent(bank, seen))
    state = runtime.get(run_id)
    log = runtime.store.read_events(run_id)
    [package] = [e.payload for e in log if e.type is EventType.HANDOFF_RECORDED]
    assert package["reason_code"] == "UNKNOWN_OUTCOME" and "credit" in package["reason"]
    assert [o["option_id"] for o in package["options"]] == ["approve", "reject"]
    assert all(o["consequence"] for o in package["options"])
    assert "NOT_EXECUTED" in package["options"][1]["consequence"] or "retried" in package["options"][1]["consequence"]
    assert package["resume_point"]["work_item_id"] == "W1" and package["resume_point"]["plan_version"] == 1
    assert package["attempt_history"][0]["work_item_id"] == "W1" and package["impact"]
    # Recorded with the wait, before it: the wait's own events keep their order.
    kinds = [e.type for e in log]
    at = kinds.index(EventType.HANDOFF_RECORDED)
    assert kinds[at + 1 : at + 3] == [EventType.STATE_TRANSITION, EventType.PENDING_RECORDED]
    assert state.pending is not None and state.pending.kind is RequestKind.RECONCILIATION  # the answer decides
