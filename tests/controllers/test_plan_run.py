"""Plan runs: a validated DAG, bounded local ReAct per item, verified deliverables, budgets, handoffs."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from stateward import Agent, Budget, RequestRefusedError, RunStatus, Runtime, ToolContext, ToolRegistry, tool
from stateward.controllers.plan_run import PlanRunConfig, PlanRunController
from stateward.controllers.plan_support import cite_evidence, plan_finish_policy, plan_run_tools
from stateward.core.canonical import action_digest
from stateward.core.events import EventType
from stateward.core.state import AgentRef, GuardedAction
from stateward.models.base import ModelRequest
from stateward.models.scripted import ScriptedModel
from stateward.planning.budget import BudgetAmount, BudgetLimits
from stateward.planning.goal import GoalContract
from stateward.store.sqlite import SQLiteStore
from stateward.verify.checks import CheckResult, CheckVerdict

GOAL = GoalContract(goal_id="g1", objective="Summarise the findings and publish them")


def item(wid: str, deps: list[str], caps: list[str], output: str, **extra: Any) -> dict[str, Any]:
    return {
        "work_item_id": wid,
        "milestone_id": "M1",
        "title": f"item {wid}",
        "task_type": "LOCAL_REACT",
        "dependencies": deps,
        "required_capabilities": caps,
        "output_spec": {"artifact_type": output},
        "completion_criteria": [f"{output} written"],
        "max_react_steps": 4,
        "estimated_cost": {"tool_calls": 2, "model_calls": 2, "tokens": 0},
        **extra,
    }


def plan_doc(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "plan_id": "p1",
        "version": 1,
        "goal_id": "g1",
        "milestones": [{"milestone_id": "M1", "title": "all"}],
        "work_items": items,
    }


THREE_ITEMS = plan_doc(
    [
        item("W1", [], ["search"], "findings"),
        item("W2", ["W1"], [], "summary"),
        item("W3", ["W2"], ["publish"], "receipt", task_type="HUMAN", risk_level="high", approval_required=True),
    ]
)


def _seen(req: ModelRequest, action: str) -> list[dict[str, Any]]:
    return [o for o in req.observations if o["action"] == action and o["status"] == "SUCCESS"]


def worker_policy(req: ModelRequest) -> dict[str, Any]:
    wid = req.facts["work_item"]["work_item_id"]
    if wid == "W1":
        if not _seen(req, "search"):
            return {"type": "EXECUTE_TOOL", "action": "search", "args": {"query": "retry storms"}}
        return {
            "type": "EXECUTE_TOOL",
            "action": "record_output",
            "args": {
                "artifact_type": "findings",
                "content": json.dumps({"evidence": ["ev:1"]}),
                "evidence": cite_evidence(req),
            },
        }
    if wid == "W2":
        sections = ["intro"] if req.facts["correction"] is None else ["intro", "evidence"]
        return {
            "type": "EXECUTE_TOOL",
            "action": "record_output",
            "args": {
                "artifact_type": "summary",
                "content": json.dumps({"sections": sections}),
                "evidence": cite_evidence(req),
            },
        }
    return {"type": "EXECUTE_TOOL", "action": "publish", "args": {"ref": req.facts["outputs"]["W2"]}}


def two_sections(content: str) -> list[CheckResult]:
    ok = len(json.loads(content).get("sections", [])) >= 2
    return [
        CheckResult(
            name="required_sections",
            verdict=CheckVerdict.PASS if ok else CheckVerdict.FAIL,
            detail="" if ok else "needs an evidence section",
        )
    ]


def publish_guard(work_item: Any, memo: Any) -> GuardedAction:
    ref = memo.items["W2"].output
    return GuardedAction(
        tool="publish", args={"ref": ref}, plan_version=None, digest=action_digest("publish", {"ref": ref}, None)
    )


def make_agent(
    plan: dict[str, Any],
    worker: Callable[[ModelRequest], Any] = worker_policy,
    budget: BudgetLimits | None = None,
    goal: GoalContract = GOAL,
    procedures: dict[str, Callable[[ModelRequest], Any]] | None = None,
) -> Agent:
    @tool(description="Search the notes.")
    def search(query: str) -> dict[str, Any]:
        return {"hits": [{"evidence_id": f"ev:{len(query)}", "text": "retries doubled the load"}]}

    @tool(description="Publish a summary.", requires_approval=True)
    def publish(ref: str, ctx: ToolContext) -> dict[str, str]:
        ctx.emit_artifact("receipt", json.dumps({"published": ref}), "application/json")
        return {"published": ref}

    config = PlanRunConfig(
        goal=goal,
        budget=budget or BudgetLimits(max_reflections_per_artifact=1),
        deliverable="summary",
        verifier=two_sections,
        approval_action=publish_guard,
        # What follows the HUMAN item's approval (W3 publishes the summary) is code, not a model's choice.
        procedures={"receipt": worker_policy, **(procedures or {})},
    )
    controller = PlanRunController(ScriptedModel(lambda req: plan), ScriptedModel(worker), config)
    return Agent(
        name="planner",
        controller=controller,
        tools=ToolRegistry([search, publish, *plan_run_tools()]),
        ref=AgentRef(name="tests:plan"),
        finish_policy=plan_finish_policy,
        budget=Budget(max_steps=40),
    )


def events(runtime: Runtime, run_id: str, kind: EventType) -> list[dict[str, Any]]:
    return [e.payload for e in runtime.store.read_events(run_id) if e.type is kind]


def accepted_partial(runtime: Runtime, state: Any) -> Any:
    """Nothing runnable hands the run to a person (NO_RUNNABLE_WORK, or a verification's own reason): answer
    accept_partial, as the person who takes what was verified would."""
    assert state.status is RunStatus.WAITING_FOR_USER and state.pending is not None
    assert state.pending.kind == "handoff"
    return runtime.reply(state.run_id, state.pending.request_id, text="accept_partial", by="ops").state


def test_plan_runs_to_completion_with_one_repair_and_a_bound_approval(runtime: Runtime) -> None:
    state = runtime.start(make_agent(THREE_ITEMS), GOAL.objective)
    assert state.status is RunStatus.WAITING_FOR_USER
    assert state.pending is not None and state.pending.guarded_action is not None
    assert state.pending.guarded_action.args == {"ref": "summary:v2"}  # the repaired version, exactly
    assert state.artifacts == {"findings": 1, "summary": 2}
    v1 = runtime.store.get_artifact(state.run_id, "summary", 1)
    assert v1 is not None and json.loads(v1.content)["sections"] == ["intro"]  # v1 kept, never overwritten
    verified = events(runtime, state.run_id, EventType.VERIFICATION_RECORDED)
    verdicts = [(v["artifact"], v["outcome"]) for v in verified]
    # The deliverable is repaired once (findings passed its checks too: said on its work_item_ended).
    assert verdicts == [("summary:v1", "REPAIR_ONCE"), ("summary:v2", "ACCEPT")]
    # Items ran strictly after their dependencies.
    started = [e["work_item_id"] for e in events(runtime, state.run_id, EventType.WORK_ITEM_STARTED)]
    assert started == ["W1", "W2"]  # W3 waits for its approval; the repair did not need a new attempt
    # Each decision's call is recorded once, by its step's tool attempt (the next one in the log).
    log = runtime.store.read_events(state.run_id)
    chosen = [
        next(n.payload["observation"]["action"] for n in log[i:] if n.type is EventType.TOOL_ATTEMPTED)
        for i, e in enumerate(log)
        if e.type is EventType.REACT_DECISION
    ]
    assert chosen[:2] == ["search", "record_output"]
    decisions = events(runtime, state.run_id, EventType.REACT_DECISION)
    assert all(d["work_item_id"] and d["remaining_steps"] >= 0 for d in decisions)

    done = runtime.approve(state.run_id, state.pending.request_id, by="editor")
    assert done.state.status is RunStatus.COMPLETED
    assert done.state.artifacts["receipt"] == 1
    ledger = done.state.memo["ledger"]
    assert ledger["reflections"] == {"summary": 1} and ledger["reserved"] == {}


def _goal_with(constraint: dict[str, Any], soft: bool = False) -> GoalContract:
    return GoalContract.model_validate(
        {**GOAL.model_dump(), ("soft_constraints" if soft else "hard_constraints"): [constraint]}
    )


def test_a_hard_constraint_stops_the_run_at_the_first_decision_it_no_longer_holds(runtime: Runtime) -> None:
    limit = {"constraint_id": "two-calls", "description": "at most 2 tool calls"}
    goal = _goal_with({**limit, "predicate": {"kind": "max_tool_calls", "value": 2}})
    state = runtime.start(make_agent(THREE_ITEMS, goal=goal), GOAL.objective)
    assert state.status is RunStatus.FAILED and state.terminal_reason == "hard_constraint_violated"
    assert state.usage.tool_attempts == 3  # judged on the record, before the next decision: nothing ran after it
    (verdict,) = events(runtime, state.run_id, EventType.TERMINATION_RECORDED)
    assert verdict["constraint_ids"] == ["two-calls"] and verdict["decision"] == "FAIL"


def test_a_hard_constraint_can_hand_the_run_to_a_person_instead(runtime: Runtime) -> None:
    goal = _goal_with(
        {
            "constraint_id": "two-calls",
            "description": "at most 2 tool calls",
            "predicate": {"kind": "max_tool_calls", "value": 2},
            "on_violation": "HANDOFF",
        }
    )
    state = runtime.start(make_agent(THREE_ITEMS, goal=goal), GOAL.objective)
    assert state.status is RunStatus.WAITING_FOR_USER and state.pending is not None
    (handoff,) = events(runtime, state.run_id, EventType.HANDOFF_RECORDED)
    assert handoff["reason_code"] == "HARD_CONSTRAINT_VIOLATED" and "two-calls" in handoff["reason"]
    assert state.usage.tool_attempts == 3
    # Continuing is not offered: nobody at a handoff can authorise past a hard constraint of the goal.
    assert set(state.pending.options) == {"accept_partial", "cancel"}
    with pytest.raises(RequestRefusedError):
        runtime.reply(state.run_id, state.pending.request_id, by="ops", text="continue_authorized")
    ended = runtime.reply(state.run_id, state.pending.request_id, by="ops", text="accept_partial")
    assert ended.state.status is RunStatus.PARTIALLY_COMPLETED
    trace = runtime.store.read_events(state.run_id)
    answered = next(e.seq for e in trace if e.type is EventType.HANDOFF_ANSWERED)
    attempts = [e for e in trace if e.type is EventType.TOOL_ATTEMPTED and e.seq > answered]
    after = [e.payload["observation"]["action"] for e in attempts]
    assert after == ["record_partial_delivery"]  # only the delivery record itself: no more work


def test_a_failure_criterion_on_a_verified_artifact_fails_the_run_once_it_exists(runtime: Runtime) -> None:
    criterion = {
        "criterion_id": "leaked-findings",
        "description": "the raw findings must never be produced",
        "predicate": {"kind": "artifact_present", "value": "findings"},
    }
    goal = GoalContract.model_validate({**GOAL.model_dump(), "failure_criteria": [criterion]})
    state = runtime.start(make_agent(THREE_ITEMS, goal=goal), GOAL.objective)
    assert state.status is RunStatus.FAILED and state.terminal_reason == "goal_failure_criterion"
    started = [e["work_item_id"] for e in events(runtime, state.run_id, EventType.WORK_ITEM_STARTED)]
    assert started == ["W1"]  # judged as soon as W1's output was verified, before W2 began


def test_a_soft_constraint_deviation_is_recorded_once_and_the_run_goes_on(runtime: Runtime) -> None:
    goal = _goal_with(
        {
            "constraint_id": "frugal",
            "description": "prefer at most 1 model call",
            "predicate": {"kind": "max_model_calls", "value": 1},
        },
        soft=True,
    )
    state = runtime.start(make_agent(THREE_ITEMS, goal=goal), GOAL.objective)
    assert state.status is RunStatus.WAITING_FOR_USER  # the same stop as without the constraint
    (deviation,) = events(runtime, state.run_id, EventType.CONSTRAINT_DEVIATION_RECORDED)
    assert deviation["constraint_id"] == "frugal" and deviation["hard"] is False
    assert deviation["effect"] == "RECORD" and deviation["facts"]["model_calls"] == 2


def test_model_saying_done_never_completes_an_item(runtime: Runtime) -> None:
    def lazy(req: ModelRequest) -> dict[str, Any]:
        return {"type": "FINISH", "reason": "all done, trust me"}

    plan = plan_doc([item("W1", [], ["search"], "findings")])
    state = runtime.start(make_agent(plan, worker=lazy), GOAL.objective)
    handed = events(runtime, state.run_id, EventType.HANDOFF_RECORDED)
    assert [h["reason_code"] for h in handed] == ["NO_RUNNABLE_WORK"]
    state = accepted_partial(runtime, state)
    assert state.status is RunStatus.PARTIALLY_COMPLETED
    assert "findings" not in state.artifacts
    ended = events(runtime, state.run_id, EventType.WORK_ITEM_ENDED)
    assert ended and all(e["error"] == "MODEL_DECLARED_STOP" for e in ended[:1])
    partial = runtime.store.get_artifact(state.run_id, "partial-delivery")
    assert partial is not None and "W1" in json.loads(partial.content)["missing_scope"]


def test_repeating_the_same_search_is_stopped_as_no_progress(runtime: Runtime) -> None:
    def stuck(req: ModelRequest) -> dict[str, Any]:
        return {"type": "EXECUTE_TOOL", "action": "search", "args": {"query": "retry storms"}}

    plan = plan_doc([item("W1", [], ["search"], "findings")])
    state = runtime.start(make_agent(plan, worker=stuck), GOAL.objective)
    ended = events(runtime, state.run_id, EventType.WORK_ITEM_ENDED)
    assert ended[0]["error"] == "NO_PROGRESS" and ended[0]["partial"] is not None
    searches = events(runtime, state.run_id, EventType.TOOL_ATTEMPTED)
    assert 1 < len(searches) <= 4  # bounded well below the budget
    assert state.status in (RunStatus.PARTIALLY_COMPLETED, RunStatus.WAITING_FOR_USER)


def test_an_item_larger_than_the_remaining_budget_never_starts(runtime: Runtime) -> None:
    big = item("W1", [], ["search"], "findings", estimated_cost={"tool_calls": 8, "model_calls": 1, "tokens": 0})
    state = runtime.start(make_agent(plan_doc([big]), budget=BudgetLimits(max_tool_calls=10)), GOAL.objective)
    assert state.status is RunStatus.COMPLETED
    tight = runtime.start(make_agent(plan_doc([big]), budget=BudgetLimits(max_tool_calls=2)), GOAL.objective)
    assert tight.status is RunStatus.FAILED  # the validator refuses a plan the budget cannot carry
    assert events(runtime, tight.run_id, EventType.RUNTIME_VALIDATED)[-1]["code"] == "PLAN_REVISE"
    assert events(runtime, tight.run_id, EventType.TOOL_ATTEMPTED) == []


def test_invalid_plans_are_refused_before_anything_runs(runtime: Runtime) -> None:
    cyclic = plan_doc([item("W1", ["W2"], ["search"], "a"), item("W2", ["W1"], ["search"], "b")])
    state = runtime.start(make_agent(cyclic), GOAL.objective)
    assert state.status is RunStatus.FAILED and state.usage.tool_attempts == 0
    assert events(runtime, state.run_id, EventType.RUNTIME_VALIDATED)[-1]["code"] == "PLAN_REJECT"
    unknown_tool = plan_doc([item("W1", [], ["rm_rf"], "a")])
    state = runtime.start(make_agent(unknown_tool), GOAL.objective)
    assert state.status is RunStatus.FAILED and state.usage.tool_attempts == 0


def test_a_retried_item_sees_every_observation_of_its_new_attempt(runtime: Runtime) -> None:
    calls: list[str] = []

    def stuck_then_done(req: ModelRequest) -> dict[str, Any]:
        calls.append("call")
        if len(calls) <= 3:  # the first attempt repeats itself until the tracker stops it (NO_PROGRESS)
            return {"type": "EXECUTE_TOOL", "action": "search", "args": {"query": "retry storms"}}
        content = json.dumps({"evidence": ["ev:12"]})
        return {
            "type": "EXECUTE_TOOL",
            "action": "record_output",
            "args": {"artifact_type": "findings", "content": content, "evidence": cite_evidence(req)},
        }

    retried = item(
        "W1", [], ["search"], "findings", retry_policy={"max_attempts": 2, "retryable_errors": ["NO_PROGRESS"]}
    )
    state = runtime.start(make_agent(plan_doc([retried]), worker=stuck_then_done), GOAL.objective)
    ended = [(e["outcome"], e["error"]) for e in events(runtime, state.run_id, EventType.WORK_ITEM_ENDED)]
    assert ended == [("FAILED", "NO_PROGRESS"), ("COMPLETED", None)]
    assert state.status is RunStatus.COMPLETED and state.artifacts == {"findings": 1}
    assert len(calls) == 4  # the second attempt's first observation completed it


def _stuck_search_agent(budget: BudgetLimits | None = None, max_grant: BudgetAmount | None = None) -> Agent:
    """One work item whose only tool is down: it fails until the plan run hands off to a person."""

    def failing(req: ModelRequest) -> dict[str, Any]:
        n = len(req.observations)
        return {"type": "EXECUTE_TOOL", "action": "search", "args": {"query": "x" * (n + 1) + " nowhere"}}

    @tool(description="Search (down).")
    def search(query: str) -> dict[str, Any]:
        from stateward.tools.errors import ServiceUnavailable

        raise ServiceUnavailable("index offline")

    retried = item(
        "W1",
        [],
        ["search"],
        "findings",
        max_react_steps=5,
        retry_policy={"max_attempts": 3, "retryable_errors": ["NO_PROGRESS"]},
    )
    agent = make_agent(plan_doc([retried]), worker=failing, budget=budget)
    agent.tools = ToolRegistry([search, *plan_run_tools()])
    assert isinstance(agent.controller, PlanRunController)
    agent.controller.config = dataclasses.replace(agent.controller.config, max_budget_grant=max_grant)
    return agent


def test_repeated_failures_hand_off_and_a_person_chooses(runtime: Runtime) -> None:
    agent = _stuck_search_agent()
    state = runtime.start(agent, GOAL.objective)
    assert state.status is RunStatus.WAITING_FOR_USER
    assert state.pending is not None and state.pending.kind == "handoff"
    assert set(state.pending.options) == {"continue_authorized", "accept_partial", "cancel"}
    handoff = events(runtime, state.run_id, EventType.HANDOFF_RECORDED)[0]
    assert handoff["reason_code"] == "REPEATED_FAILURE" and handoff["options"]
    assert handoff["attempt_history"][0]["work_item_id"] == "W1" and handoff["attempt_history"][0]["attempts"] >= 2
    assert handoff["resume_point"]["plan_version"] == 1 and "budget" in handoff["resume_point"]
    with pytest.raises(RequestRefusedError) as err:
        runtime.reply(state.run_id, state.pending.request_id, by="ops", text="just do it")
    assert err.value.code == "UNKNOWN_OPTION"
    result = runtime.reply(state.run_id, state.pending.request_id, by="ops", text="accept_partial")
    assert result.state.status is RunStatus.PARTIALLY_COMPLETED
    assert events(runtime, state.run_id, EventType.HANDOFF_ANSWERED)[0]["option"] == "accept_partial"


def test_continue_authorized_clears_the_failures_and_the_run_works_on(runtime: Runtime) -> None:
    state = runtime.start(_stuck_search_agent(), GOAL.objective)
    assert state.pending is not None
    attempts = state.usage.tool_attempts
    after = runtime.reply(state.run_id, state.pending.request_id, by="ops", text="continue_authorized").state
    # The failures that caused the handoff are forgiven: the item is tried again before the next stop. It
    # fails again with its tool still down, so the next stop names that cause instead of repeating the first.
    assert after.usage.tool_attempts > attempts
    reasons = [h["reason_code"] for h in events(runtime, state.run_id, EventType.HANDOFF_RECORDED)]
    assert reasons == ["REPEATED_FAILURE", "DEPENDENCY_UNAVAILABLE"]


LIMITS = BudgetLimits(max_model_calls=40, max_tool_calls=40, max_reflections_per_artifact=1)


def _continue_with(extra: dict[str, Any]) -> str:
    return json.dumps({"option": "continue_authorized", "extra_budget": extra})


def test_continue_authorized_may_grant_extra_budget_recorded_as_that_persons_grant(runtime: Runtime) -> None:
    state = runtime.start(_stuck_search_agent(LIMITS), GOAL.objective)
    assert state.pending is not None and state.pending.kind == "handoff"
    used_before = state.memo["ledger"]["used"]
    request_id = state.pending.request_id
    after = runtime.reply(state.run_id, request_id, by="lead", text=_continue_with({"model_calls": 10})).state
    ledger = after.memo["ledger"]
    assert ledger["limits"]["max_model_calls"] == 50 and ledger["limits"]["max_tool_calls"] == 40
    assert all(ledger["used"][d] >= used_before[d] for d in used_before)  # a grant, never a reset
    assert after.usage.tool_attempts > state.usage.tool_attempts  # and the item was tried again
    [grant] = after.memo["grants"]
    assert (grant["by"], grant["request_id"], grant["extra"]["model_calls"]) == ("lead", request_id, 10)
    assert grant["at"]  # when
    [answered] = events(runtime, state.run_id, EventType.HANDOFF_ANSWERED)
    assert answered["option"] == "continue_authorized" and answered["by"] == "lead"
    assert answered["grant"]["extra_budget"] == {"model_calls": 10} and answered["grant"]["by"] == "lead"


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        ({"model_calls": 41}, "past their maximum: model_calls 41 of at most 40"),  # more than the limit again
        ({"tokens": 5}, "tokens has no limit to raise"),
        ({"wishes": 3}, "extra_budget is not a budget amount"),
    ],
)
def test_a_grant_past_its_bound_is_refused_by_name_and_the_person_asked_again(
    runtime: Runtime, extra: dict[str, Any], why: str
) -> None:
    state = runtime.start(_stuck_search_agent(LIMITS), GOAL.objective)
    assert state.pending is not None
    after = runtime.reply(state.run_id, state.pending.request_id, by="lead", text=_continue_with(extra)).state
    assert after.memo["ledger"]["limits"] == state.memo["ledger"]["limits"] and after.memo["grants"] == []
    assert after.usage.tool_attempts == state.usage.tool_attempts  # nothing re-attempted on a refused grant
    assert after.pending is not None and after.pending.kind == "handoff"  # asked again
    [answered] = events(runtime, state.run_id, EventType.HANDOFF_ANSWERED)
    assert answered["refused"]["code"] == "BUDGET_GRANT_REFUSED" and why in answered["refused"]["message"]
    handoffs = events(runtime, state.run_id, EventType.HANDOFF_RECORDED)
    assert handoffs[-1]["reason_code"] == "BUDGET_GRANT_REFUSED" and why in handoffs[-1]["reason"]


def test_grants_together_are_bounded_by_the_configured_maximum(runtime: Runtime) -> None:
    state = runtime.start(_stuck_search_agent(LIMITS, max_grant=BudgetAmount(model_calls=12)), GOAL.objective)
    assert state.pending is not None
    state = runtime.reply(
        state.run_id, state.pending.request_id, by="lead", text=_continue_with({"model_calls": 8})
    ).state
    assert state.memo["ledger"]["limits"]["max_model_calls"] == 48
    assert state.pending is not None and state.pending.kind == "handoff"  # still stuck: asked again
    state = runtime.reply(
        state.run_id, state.pending.request_id, by="cto", text=_continue_with({"model_calls": 8})
    ).state
    assert state.memo["ledger"]["limits"]["max_model_calls"] == 48  # 8 + 8 > 12: the second is refused
    assert [g["by"] for g in state.memo["grants"]] == ["lead"]


def test_an_escalated_handoff_is_answered_by_whoever_it_was_escalated_to(db_path: Path) -> None:
    clock = _Clock()
    runtime = Runtime(SQLiteStore(db_path), clock=clock)
    agent = _stuck_search_agent()
    agent.request_ttl, agent.on_request_expiry, agent.escalation_role = timedelta(hours=1), "escalate", "chief"
    state = runtime.start(agent, GOAL.objective)
    assert state.pending is not None and state.pending.kind == "handoff"
    clock.now += timedelta(hours=2)
    runtime.expire_requests()
    escalated = runtime.get(state.run_id).pending
    assert escalated is not None and escalated.replaces == state.pending.request_id
    result = runtime.reply(state.run_id, escalated.request_id, by="cj", text="cancel", roles=frozenset({"chief"}))
    assert (result.state.status, result.state.terminal_reason) == (RunStatus.FAILED, "cancelled_at_handoff")
    assert [e["option"] for e in events(runtime, state.run_id, EventType.HANDOFF_ANSWERED)] == ["cancel"]
    assert len(events(runtime, state.run_id, EventType.HANDOFF_RECORDED)) == 1  # not asked all over again
    runtime.close()


def test_a_partial_delivery_ends_the_items_still_in_flight(runtime: Runtime) -> None:
    # Two items run side by side when the budget runs out: the one still running is ended and its
    # reservation released, so the delivered ledger says what was really spent.
    def worker(req: ModelRequest) -> dict[str, Any]:
        wid = req.facts["work_item"]["work_item_id"]
        if len(_seen(req, "search")) < 2:
            return {
                "type": "EXECUTE_TOOL",
                "action": "search",
                "args": {"query": f"{wid} " + "x" * (len(req.observations) + 1)},
            }
        out = req.facts["work_item"]["output_spec"]["artifact_type"]
        return {
            "type": "EXECUTE_TOOL",
            "action": "record_output",
            "args": {"artifact_type": out, "content": "{}", "evidence": cite_evidence(req)},
        }

    est = {"tool_calls": 1, "model_calls": 1, "tokens": 0}
    plan = plan_doc(
        [
            item("W1", [], ["search"], "a", estimated_cost=est),
            item("W2", [], ["search"], "b", estimated_cost=est),
            item("W3", ["W1", "W2"], ["search"], "c", estimated_cost=est),
        ]
    )
    # 5 tool calls: W1 takes 3 and W2 2 by the time W1 completes; the spending of W2 in flight counts at once.
    agent = make_agent(plan, worker=worker, budget=BudgetLimits(max_tool_calls=5))
    assert isinstance(agent.controller, PlanRunController)
    agent.controller.config = dataclasses.replace(agent.controller.config, max_parallel=2, deliverable=None)
    state = runtime.start(agent, GOAL.objective)
    assert state.status is RunStatus.PARTIALLY_COMPLETED
    ended = [
        (e["work_item_id"], e["outcome"], e["error"]) for e in events(runtime, state.run_id, EventType.WORK_ITEM_ENDED)
    ]
    assert ended == [("W1", "COMPLETED", None), ("W2", "FAILED", "BUDGET_EXHAUSTED")]
    assert state.memo["running"] == [] and not state.memo["ledger"]["reserved"]
    assert state.memo["ledger"]["used"]["tool_calls"] == 5  # W1: 3, W2: 2 before it was stopped


class _Clock:
    def __init__(self) -> None:
        self.now = datetime(2030, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def _researcher(cheat: bool) -> Callable[[ModelRequest], Any]:
    def policy(req: ModelRequest) -> dict[str, Any]:
        if "readiness_contract" not in req.facts:
            return worker_policy(req)
        searched = _seen(req, "search")
        if not any(o["action"] == "submit_readiness" for o in req.observations):
            return {"type": "EXECUTE_TOOL", "action": "submit_readiness", "args": {"evidence": '{"ready": true}'}}
        if not searched:
            return {"type": "EXECUTE_TOOL", "action": "search", "args": {"query": "retry storms"}}
        basis = ["ev:made-up"] if cheat else [searched[0]["result"]["hits"][0]["evidence_id"]]
        evidence = {"covered": [{"item": "incident", "basis": basis}], "remaining": []}
        return {"type": "EXECUTE_TOOL", "action": "submit_readiness", "args": {"evidence": json.dumps(evidence)}}

    return policy


def _with_readiness(agent: Agent, max_steps: int = 6) -> Agent:
    from dataclasses import replace

    from stateward.planning.readiness import ReadinessContract

    controller = agent.controller
    assert isinstance(controller, PlanRunController)
    controller.config = replace(
        controller.config,
        readiness=ReadinessContract(stage="research", required_items=("incident",)),
        research_tools=("search",),
        max_research_steps=max_steps,
    )
    return agent


def test_readiness_is_decided_by_contract_over_recorded_evidence(runtime: Runtime) -> None:
    plan = plan_doc([item("W1", [], ["search"], "findings")])
    state = runtime.start(_with_readiness(make_agent(plan, worker=_researcher(cheat=False))), GOAL.objective)
    assert state.status is RunStatus.COMPLETED
    submissions = [
        e["observation"]
        for e in events(runtime, state.run_id, EventType.TOOL_ATTEMPTED)
        if e["observation"]["action"] == "submit_readiness"
    ]
    assert (submissions[0]["status"], submissions[0]["error_code"]) == ("FAILED", "INVALID_ARGUMENT")
    assert submissions[-1]["status"] == "SUCCESS"
    assert events(runtime, state.run_id, EventType.PLAN_RECORDED)  # planning only after the contract held


def test_research_is_held_to_the_goals_hard_constraints_too(runtime: Runtime) -> None:
    limit = {"constraint_id": "one-call", "description": "at most 1 tool call"}
    goal = _goal_with({**limit, "predicate": {"kind": "max_tool_calls", "value": 1}})
    plan = plan_doc([item("W1", [], ["search"], "findings")])
    agent = _with_readiness(make_agent(plan, worker=_researcher(cheat=False), goal=goal))
    state = runtime.start(agent, GOAL.objective)
    assert state.status is RunStatus.FAILED and state.terminal_reason == "hard_constraint_violated"
    assert state.usage.tool_attempts == 2 and events(runtime, state.run_id, EventType.PLAN_RECORDED) == []


def test_citing_evidence_the_run_never_recorded_keeps_research_open(runtime: Runtime) -> None:
    plan = plan_doc([item("W1", [], ["search"], "findings")])
    state = runtime.start(_with_readiness(make_agent(plan, worker=_researcher(cheat=True)), 5), GOAL.objective)
    assert state.status is RunStatus.FAILED and state.terminal_reason == "readiness_not_reached"
    assert events(runtime, state.run_id, EventType.PLAN_RECORDED) == []


def _replanning_agent(patch: dict[str, Any], max_replans: int = 1) -> Agent:
    """W1 needs the retired index; the only way on is a patch that moves it to the archive."""

    @tool(description="Search the old index (retired).")
    def search(query: str) -> dict[str, Any]:
        from stateward.tools.errors import ToolInvalidArgument

        raise ToolInvalidArgument("index retired; see ev:notice")

    @tool(description="Search the archive.")
    def search_archive(query: str) -> dict[str, Any]:
        return {"hits": [{"evidence_id": "ev:archive:1"}]}

    def planner(req: ModelRequest) -> Any:
        return patch if req.purpose == "replan" else plan_doc([item("W1", [], ["search"], "findings")])

    def worker(req: ModelRequest) -> dict[str, Any]:
        tool_name = req.facts["work_item"]["required_capabilities"][0]
        if not _seen(req, tool_name):
            return {"type": "EXECUTE_TOOL", "action": tool_name, "args": {"query": "notes"}}
        return {
            "type": "EXECUTE_TOOL",
            "action": "record_output",
            "args": {"artifact_type": "findings", "content": "{}", "evidence": cite_evidence(req)},
        }

    config = PlanRunConfig(goal=GOAL, budget=BudgetLimits(max_replans=max_replans))
    controller = PlanRunController(ScriptedModel(planner), ScriptedModel(worker), config)
    return Agent(
        name="replanner",
        controller=controller,
        tools=ToolRegistry([search, search_archive, *plan_run_tools()]),
        ref=AgentRef(name="tests:plan"),
        finish_policy=plan_finish_policy,
        budget=Budget(max_steps=40),
    )


MOVE_TO_ARCHIVE = {
    "base_version": 1,
    "reason": "CAPABILITY_CHANGED",
    "evidence_ids": ["ev:notice"],
    "changed_items": [item("W1", [], ["search_archive"], "findings")],
    "kept_completed": [],
}


def test_a_changed_capability_replans_once_and_the_run_completes(runtime: Runtime) -> None:
    state = runtime.start(_replanning_agent(MOVE_TO_ARCHIVE), GOAL.objective)
    assert state.status is RunStatus.COMPLETED
    plans = events(runtime, state.run_id, EventType.PLAN_RECORDED)
    assert [(p["plan_version"], p.get("reason")) for p in plans] == [(1, None), (2, "CAPABILITY_CHANGED")]
    assert state.memo["ledger"]["used"]["replans"] == 1


def test_the_planner_is_sent_the_plan_documents_schema_and_the_replanner_the_patchs(runtime: Runtime) -> None:
    """What a constrained server would be sent for each planner call admits the document the run then parsed."""
    from jsonschema import Draft202012Validator

    from stateward.core.model_io import ReplyContract
    from stateward.models.contracts import response_schema
    from stateward.planning.patch import load_patch
    from stateward.planning.plan import load_plan

    agent = _replanning_agent(MOVE_TO_ARCHIVE)
    state = runtime.start(agent, GOAL.objective)
    assert state.status is RunStatus.COMPLETED
    planner = agent.controller.planner  # type: ignore[attr-defined]
    sent = [(r.purpose, r.reply_contract, response_schema(r)) for r in planner.calls]
    assert [(p, c, name) for p, c, (name, _) in sent] == [
        ("plan", ReplyContract.PLAN_DOCUMENT, "plan_document"),
        ("replan", ReplyContract.PLAN_PATCH, "plan_patch"),
    ]
    plan = load_plan(plan_doc([item("W1", [], ["search"], "findings")])).model_dump(mode="json")
    patch = load_patch(MOVE_TO_ARCHIVE).model_dump(mode="json")
    for doc, (_, _, (_, schema)) in zip((plan, patch), sent, strict=True):
        assert not [e.message for e in Draft202012Validator(schema).iter_errors(doc)]


def test_a_transient_failure_is_no_reason_to_replan(runtime: Runtime) -> None:
    timeout_patch = {**MOVE_TO_ARCHIVE, "reason": "TIMEOUT"}
    state = runtime.start(_replanning_agent(timeout_patch), GOAL.objective)
    # The refused patch did not help: the stuck plan goes to a person (never a delivery the planner decided).
    assert state.pending is not None and state.pending.kind == "handoff"
    state = accepted_partial(runtime, state)
    assert state.status is RunStatus.PARTIALLY_COMPLETED
    refused = [p for p in events(runtime, state.run_id, EventType.PLAN_RECORDED) if "refused_patch" in p]
    assert refused and refused[0]["refused_patch"] == "INVALID_PLAN_PATCH"


def test_replans_are_bounded(runtime: Runtime) -> None:
    state = accepted_partial(runtime, runtime.start(_replanning_agent(MOVE_TO_ARCHIVE, max_replans=0), GOAL.objective))
    assert state.status is RunStatus.PARTIALLY_COMPLETED
    assert [p["plan_version"] for p in events(runtime, state.run_id, EventType.PLAN_RECORDED)] == [1]


def test_checkpoints_are_kept_at_plan_changes_and_work_item_boundaries(db_path: Any) -> None:
    import sqlite3

    from stateward.store.sqlite import SQLiteStore

    runtime = Runtime(SQLiteStore(db_path))
    state = runtime.start(make_agent(THREE_ITEMS), GOAL.objective)
    runtime.close()
    with sqlite3.connect(db_path) as db:
        reasons = [
            r[0] for r in db.execute("SELECT reason FROM checkpoints WHERE run_id=? ORDER BY seq", (state.run_id,))
        ]
    assert reasons[0] == "plan_change"
    assert "work_item_end" in reasons and "artifact" in reasons
    assert reasons[-1] == "wait"


def _parallel_agent(max_parallel: int) -> Agent:
    def worker(req: ModelRequest) -> dict[str, Any]:
        wid = req.facts["work_item"]["work_item_id"]
        output = req.facts["work_item"]["output_spec"]["artifact_type"]
        if len(_seen(req, "search")) < 2:
            return {
                "type": "EXECUTE_TOOL",
                "action": "search",
                "args": {"query": f"{wid} " + "x" * (len(req.observations) + 1)},  # new hit, new evidence
            }
        return {
            "type": "EXECUTE_TOOL",
            "action": "record_output",
            "args": {"artifact_type": output, "content": "{}", "evidence": cite_evidence(req)},
        }

    plan = plan_doc(
        [
            item("W1", [], ["search"], "a"),
            item("W2", [], ["search"], "b"),
            item("W3", ["W1", "W2"], ["search"], "c"),
        ]
    )
    agent = make_agent(plan, worker=worker)
    controller = agent.controller
    assert isinstance(controller, PlanRunController)
    from dataclasses import replace

    controller.config = replace(controller.config, max_parallel=max_parallel, deliverable=None)
    return agent


def _item_of_each_step(runtime: Runtime, run_id: str) -> list[str]:
    return [e.payload["work_item_id"] for e in runtime.store.read_events(run_id) if e.type is EventType.REACT_DECISION]


def test_independent_items_run_in_parallel_up_to_the_limit(runtime: Runtime) -> None:
    state = runtime.start(_parallel_agent(2), GOAL.objective)
    assert state.status is RunStatus.COMPLETED
    order = _item_of_each_step(runtime, state.run_id)
    assert order[:6] == ["W1", "W2", "W1", "W2", "W1", "W2"]  # interleaved, round robin: neither starves
    assert set(order[6:]) == {"W3"}  # the dependent item only after both were verified
    started = [
        e.payload["work_item_id"]
        for e in runtime.store.read_events(state.run_id)
        if e.type is EventType.WORK_ITEM_STARTED
    ]
    assert started == ["W1", "W2", "W3"]


def test_one_at_a_time_when_parallelism_is_one(runtime: Runtime) -> None:
    state = runtime.start(_parallel_agent(1), GOAL.objective)
    assert state.status is RunStatus.COMPLETED
    assert _item_of_each_step(runtime, state.run_id) == ["W1"] * 3 + ["W2"] * 3 + ["W3"] * 3


def test_a_worker_may_only_use_its_items_tools(runtime: Runtime) -> None:
    def wanders(req: ModelRequest) -> dict[str, Any]:
        return {"type": "EXECUTE_TOOL", "action": "publish", "args": {"ref": "anything"}}

    state = runtime.start(make_agent(plan_doc([item("W1", [], ["search"], "findings")]), worker=wanders), "g")
    assert state.status is RunStatus.FAILED and state.usage.tool_attempts == 0
    assert events(runtime, state.run_id, EventType.RUNTIME_VALIDATED)[-1]["code"] == "action_not_visible"


def test_the_seeds_node_names_run_like_the_items_they_describe(runtime: Runtime) -> None:
    """COMPENSATION and VALIDATION items run their procedures; a WAIT/TIMER item, like HUMAN, stops the run for
    its approval before anything of it runs."""
    seed_plan = plan_doc(
        [
            item("W1", [], ["search"], "findings", task_type="COMPENSATION"),
            item("W2", ["W1"], [], "summary", task_type="VALIDATION"),
            item("W3", ["W2"], ["publish"], "receipt", task_type="WAIT/TIMER", approval_required=True),
        ]
    )
    procedures = {"findings": worker_policy, "summary": worker_policy}
    state = runtime.start(make_agent(seed_plan, procedures=procedures), GOAL.objective)
    assert state.status is RunStatus.WAITING_FOR_USER and state.pending is not None
    started = [e["work_item_id"] for e in events(runtime, state.run_id, EventType.WORK_ITEM_STARTED)]
    assert started == ["W1", "W2"]
    done = runtime.approve(state.run_id, state.pending.request_id, by="editor")
    assert done.state.status is RunStatus.COMPLETED and done.state.artifacts["receipt"] == 1


# --------------------------------------------------------------------------- items run by their type


def counting(policy: Callable[[ModelRequest], Any], asked: list[str]) -> Callable[[ModelRequest], Any]:
    """``policy``, noting which work item each model request was about."""

    def step(req: ModelRequest) -> Any:
        asked.append(req.facts["work_item"]["work_item_id"])
        return policy(req)

    return step


def typed_plan(w1: str = "TOOL", w2: str = "RULE") -> dict[str, Any]:
    return plan_doc(
        [
            item("W1", [], ["search"], "findings", task_type=w1),
            item("W2", ["W1"], [], "summary", task_type=w2),
            item("W3", ["W2"], ["publish"], "receipt", task_type="HUMAN", risk_level="high", approval_required=True),
        ]
    )


def test_rule_and_tool_items_run_as_code_through_the_runtime_with_no_model_call(runtime: Runtime) -> None:
    asked: list[str] = []
    procedures = {"findings": worker_policy, "summary": worker_policy}
    agent = make_agent(typed_plan(), worker=counting(worker_policy, asked), procedures=procedures)
    state = runtime.start(agent, GOAL.objective)
    assert state.status is RunStatus.WAITING_FOR_USER and state.artifacts == {"findings": 1, "summary": 2}
    assert asked == []  # the TOOL and RULE items never asked the worker
    assert state.usage.model_calls == 1  # the planner's call, nothing else
    log = runtime.store.read_events(state.run_id)
    sources = [e.payload["signal_source"] for e in log if e.type is EventType.SIGNAL_RECEIVED]
    assert sources == ["rule"] * 4 + ["plan_step"]  # search, findings, summary v1, its repair; the approval ask
    assert events(runtime, state.run_id, EventType.REACT_DECISION) == []  # no model decided anything
    # The rule's output is checked like a model's: the deliverable's verifier asked for one repair.
    verdicts = [(v["artifact"], v["outcome"]) for v in events(runtime, state.run_id, EventType.VERIFICATION_RECORDED)]
    assert verdicts == [("summary:v1", "REPAIR_ONCE"), ("summary:v2", "ACCEPT")]
    # The HUMAN item, approved, runs its procedure too: the approved action is not a model's to choose.
    done = runtime.approve(state.run_id, state.pending.request_id, by="editor").state  # type: ignore[union-attr]
    assert done.status is RunStatus.COMPLETED and asked == []


def test_only_model_and_local_react_items_ask_the_model(runtime: Runtime) -> None:
    asked: list[str] = []
    procedures = {"findings": worker_policy, "summary": worker_policy}  # registered, but not for model items
    agent = make_agent(typed_plan("LOCAL_REACT", "MODEL"), worker=counting(worker_policy, asked), procedures=procedures)
    state = runtime.start(agent, GOAL.objective)
    assert state.status is RunStatus.WAITING_FOR_USER
    assert asked == ["W1", "W1", "W2", "W2"]
    sources = [e["signal_source"] for e in events(runtime, state.run_id, EventType.SIGNAL_RECEIVED)]
    assert "rule" not in sources


def test_a_rule_item_with_no_procedure_fails_by_name_and_never_asks_the_model(runtime: Runtime) -> None:
    asked: list[str] = []
    agent = make_agent(typed_plan(), worker=counting(worker_policy, asked), procedures={"findings": worker_policy})
    state = runtime.start(agent, GOAL.objective)
    ended = [(e["work_item_id"], e["error"]) for e in events(runtime, state.run_id, EventType.WORK_ITEM_ENDED)]
    assert ended == [("W1", None), ("W2", "NO_PROCEDURE")] and asked == []
    assert state.pending is not None and state.pending.kind == "handoff"  # nothing else can run: a person decides


def test_a_procedures_call_is_validated_by_the_runtime_like_a_models(runtime: Runtime) -> None:
    """The controller only proposes: a procedure proposing a tool its item does not show is refused."""

    def publishes(req: ModelRequest) -> dict[str, Any]:
        return {"type": "EXECUTE_TOOL", "action": "publish", "args": {"ref": "summary:v9"}}

    agent = make_agent(typed_plan(), procedures={"findings": publishes, "summary": worker_policy})
    state = runtime.start(agent, GOAL.objective)
    refused = [e for e in events(runtime, state.run_id, EventType.RUNTIME_VALIDATED) if e.get("code")]
    assert refused and refused[0]["code"] == "action_not_visible"
    assert [
        o for o in events(runtime, state.run_id, EventType.TOOL_ATTEMPTED) if o["observation"]["action"] == "publish"
    ] == []


def test_a_permission_refusal_that_leaves_the_scope_short_hands_off_with_the_package(runtime: Runtime) -> None:
    @tool(description="Read the vault (no grant).")
    def vault(path: str) -> dict[str, Any]:
        from stateward.tools.errors import ToolPermissionDenied

        raise ToolPermissionDenied("403: the service account has no read grant on the vault")

    def tries_once(req: ModelRequest) -> dict[str, Any]:
        if not req.observations:
            return {"type": "EXECUTE_TOOL", "action": "vault", "args": {"path": "secrets/ledger"}}
        return {"type": "FAIL", "reason": "no access"}

    agent = make_agent(plan_doc([item("W1", [], ["vault"], "findings")]), worker=tries_once)
    agent.tools = ToolRegistry([vault, *plan_run_tools()])
    state = runtime.start(agent, GOAL.objective)
    assert state.pending is not None and state.pending.kind == "handoff"
    [package] = events(runtime, state.run_id, EventType.HANDOFF_RECORDED)
    assert package["reason_code"] == "SCOPE_SHORTFALL"
    assert "vault" in package["reason"] and "secrets/ledger" in package["reason"]
    assert {o["option_id"] for o in package["options"]} == {"continue_authorized", "accept_partial", "cancel"}
    assert package["impact"] and package["resume_point"]["work_item_id"] == "W1"
    assert package["attempt_history"] == [
        {
            "work_item_id": "W1",
            "attempts": 1,
            "last_error_code": "MODEL_DECLARED_STOP",
            "last_error": None,
            "parameter_changes": [],
        }
    ]
