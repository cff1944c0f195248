"""The goal contract is the contract: budgets charged and enforced, metrics measured, success criteria decide.

Each test runs a small plan on the real engine and reads what the Runtime recorded (status, memo, events).
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.controllers.test_plan_run import (
    GOAL,
    THREE_ITEMS,
    accepted_partial,
    events,
    item,
    make_agent,
    plan_doc,
    worker_policy,
)

from stateward import RunStatus, Runtime
from stateward.controllers.plan_run import PlanRunController
from stateward.controllers.plan_support import PARTIAL_ARTIFACT, cite_evidence
from stateward.core.events import EventType
from stateward.models import ModelRequest, ScriptedModel, complete
from stateward.planning import (
    BudgetLimits,
    CompletionMode,
    DegradationRung,
    GoalContract,
    MeasureInput,
    Measurement,
    RemainingBudget,
    Verdict,
    load_goal,
    load_plan,
    validate_plan,
)
from stateward.planning.budget import BudgetError
from stateward.store.sqlite import SQLiteStore
from stateward.verify import CheckResult, CheckVerdict

TWO_ITEMS = plan_doc([item("W1", [], ["search"], "findings"), item("W2", ["W1"], [], "summary")])


def goal_with(**fields: Any) -> GoalContract:
    return load_goal({"goal_id": "g1", "objective": GOAL.objective, **fields})


def configured(agent: Any, **changes: Any) -> Any:
    assert isinstance(agent.controller, PlanRunController)
    agent.controller.config = dataclasses.replace(agent.controller.config, **changes)
    return agent


def test_tokens_are_charged_and_a_token_limit_stops_the_run(runtime: Runtime) -> None:
    # Each scripted worker call costs tokens; the plan estimates none, so only charging actuals can stop it.
    agent = make_agent(TWO_ITEMS, budget=BudgetLimits(max_tokens=1850, max_reflections_per_artifact=1))
    state = runtime.start(agent, GOAL.objective)
    used = state.memo["ledger"]["used"]
    assert state.status is RunStatus.PARTIALLY_COMPLETED
    assert [e["reason"] for e in events(runtime, state.run_id, EventType.TERMINATION_RECORDED)] == ["BUDGET_EXHAUSTED"]
    assert used["tokens"] >= 1500 and used["tokens"] == state.usage.input_tokens + state.usage.output_tokens
    assert used["attempts"] >= 1


def test_attempts_are_charged_and_limited(runtime: Runtime) -> None:
    agent = make_agent(TWO_ITEMS, budget=BudgetLimits(max_total_attempts=1, max_reflections_per_artifact=1))
    state = runtime.start(agent, GOAL.objective)
    assert state.status is RunStatus.PARTIALLY_COMPLETED
    assert state.memo["ledger"]["used"]["attempts"] == 1
    assert state.memo["outcome"]["reason_code"] == "BUDGET_EXHAUSTED"


class StepClock:
    """Each reading is ``step`` later than the last: elapsed time that only charging can notice."""

    def __init__(self, step: timedelta) -> None:
        self.now, self.step = datetime(2030, 1, 1, tzinfo=UTC), step

    def __call__(self) -> datetime:
        self.now += self.step
        return self.now


def test_elapsed_time_is_charged_and_the_deadline_enforced(runtime: Runtime) -> None:
    deadline = goal_with(
        hard_constraints=[
            {
                "constraint_id": "deadline",
                "description": "within 2 minutes",
                "predicate": {"kind": "max_elapsed_seconds", "value": 120},
            }
        ]
    )
    agent = configured(make_agent(THREE_ITEMS, goal=deadline), clock=StepClock(timedelta(seconds=50)))
    state = runtime.start(agent, GOAL.objective)
    assert (state.status, state.terminal_reason) == (RunStatus.FAILED, "hard_constraint_violated")
    assert state.memo["ledger"]["used"]["elapsed_seconds"] > 120
    [record] = events(runtime, state.run_id, EventType.TERMINATION_RECORDED)
    assert record["constraint_ids"] == ["deadline"]


def test_elapsed_time_carries_across_processes(tmp_path: Any) -> None:
    # The first process charges 30 s and stops for the approval; the second one, with its own clock, goes on
    # counting from the run's recorded start instead of from zero.
    clock = StepClock(timedelta(seconds=1))
    first = Runtime(SQLiteStore(tmp_path / "r.db"))
    state = first.start(configured(make_agent(THREE_ITEMS), clock=clock), GOAL.objective)
    assert state.status is RunStatus.WAITING_FOR_USER and state.pending is not None
    charged = state.memo["ledger"]["used"]["elapsed_seconds"]
    first.close()
    later = StepClock(timedelta(seconds=0))
    later.now = clock.now + timedelta(hours=1)
    second = Runtime(SQLiteStore(tmp_path / "r.db"))
    second.agents.register("tests:plan", lambda: configured(make_agent(THREE_ITEMS), clock=later))
    done = second.approve(state.run_id, state.pending.request_id, by="alice").state
    assert done.memo["ledger"]["used"]["elapsed_seconds"] >= charged + 3600
    second.close()


def measured(ratio: float) -> Any:
    def measure(given: MeasureInput) -> Measurement:
        if "findings" not in given.outputs:
            return Measurement()
        assert json.loads(given.outputs["findings"]) == {"evidence": ["ev:1"]}  # the verified output's content
        return Measurement(metrics={"coverage_ratio": ratio}, unresolved=() if ratio >= 1 else ("repo-x unread",))

    return measure


COVERAGE_GOAL = {
    "success_criteria": [
        {
            "criterion_id": "covered",
            "description": "everything covered",
            "predicate": {"kind": "metric_at_least", "metric": "coverage_ratio", "value": 1.0},
        }
    ],
    "failure_criteria": [
        {
            "criterion_id": "too-little",
            "description": "under half covered",
            "predicate": {"kind": "metric_below", "metric": "coverage_ratio", "value": 0.5},
        }
    ],
}


def test_success_criteria_decide_completion_not_the_item_count(runtime: Runtime) -> None:
    agent = configured(make_agent(TWO_ITEMS, goal=goal_with(**COVERAGE_GOAL)), measure=measured(0.8))
    state = runtime.start(agent, GOAL.objective)
    outcome = state.memo["outcome"]
    assert all(w in state.memo["verified"] for w in ("W1", "W2"))  # every item succeeded ...
    assert state.status is RunStatus.PARTIALLY_COMPLETED  # ... and still the goal is not met
    assert outcome["reason_code"] == "SUCCESS_CRITERIA_UNMET" and outcome["criteria_unmet"] == ["covered"]
    assert outcome["completion_mode"] == CompletionMode.DEGRADED
    assert "repo-x unread" in outcome["unresolved_issues"]


def test_a_met_contract_completes_in_full(runtime: Runtime) -> None:
    agent = configured(make_agent(TWO_ITEMS, goal=goal_with(**COVERAGE_GOAL)), measure=measured(1.0))
    state = runtime.start(agent, GOAL.objective)
    outcome = state.memo["outcome"]
    assert state.status is RunStatus.COMPLETED
    assert (outcome["completion_mode"], outcome["rung"]) == (CompletionMode.FULL, DegradationRung.FULL_REPORT)
    assert outcome["final_artifact"] == state.memo["items"]["W2"]["output"] and outcome["criteria_met"] == ["covered"]


def test_a_measured_metric_fires_a_failure_criterion(runtime: Runtime) -> None:
    agent = configured(make_agent(TWO_ITEMS, goal=goal_with(**COVERAGE_GOAL)), measure=measured(0.3))
    state = runtime.start(agent, GOAL.objective)
    assert (state.status, state.terminal_reason) == (RunStatus.FAILED, "goal_failure_criterion")
    # W1 was verified, but the goal says nothing may be delivered once this criterion holds: the lowest rung.
    outcome = state.memo["outcome"]
    assert (outcome["rung"], outcome["completion_mode"], outcome["final_artifact"]) == ("SAFE_FAILURE", "NONE", None)
    assert state.memo["verified"] == ["W1"] and PARTIAL_ARTIFACT not in state.artifacts
    assert "W2" not in state.memo["verified"]  # it stopped as soon as the measurement showed the failure


def test_the_rung_follows_what_was_verified(runtime: Runtime) -> None:
    # The summary is the deliverable; it never passes, so only the verified findings (a fact list) remain.
    never_repaired = BudgetLimits(max_reflections_per_artifact=0)
    agent = configured(make_agent(TWO_ITEMS, budget=never_repaired), fact_artifacts=frozenset({"findings"}))
    state = accepted_partial(runtime, runtime.start(agent, GOAL.objective))
    assert state.status is RunStatus.PARTIALLY_COMPLETED
    assert state.memo["outcome"]["rung"] == DegradationRung.FACTS_AND_RISK_CANDIDATES
    plain = configured(make_agent(TWO_ITEMS, budget=BudgetLimits(max_reflections_per_artifact=0)))
    other = accepted_partial(runtime, runtime.start(plain, GOAL.objective))
    assert other.memo["outcome"]["rung"] == DegradationRung.ARTIFACT_INDEX


# --------------------------------------------------------------------------- plans a model proposes


_ids = st.sampled_from(["W1", "W2", "W3"])
_proposed_item = st.fixed_dictionaries(
    {
        "work_item_id": _ids,
        "deps": st.lists(_ids, max_size=2),
        "caps": st.lists(st.sampled_from(["search", "publish", "write_repository", "record_output"]), max_size=2),
        "output": st.sampled_from(["findings", "summary", "receipt"]),
        "cost": st.integers(min_value=0, max_value=60),
    }
)


def _writer(req: Any) -> dict[str, Any]:
    """A worker that writes its item's output at once (what the worker does is not under test here)."""
    out = req.facts["work_item"]["output_spec"]["artifact_type"]
    content = json.dumps({"sections": ["a", "b"]})
    return {
        "type": "EXECUTE_TOOL",
        "action": "record_output",
        "args": {"artifact_type": out, "content": content, "evidence": cite_evidence(req)},
    }


def _proposed(items: list[dict[str, Any]]) -> dict[str, Any]:
    return plan_doc(
        [
            item(
                i["work_item_id"],
                i["deps"],
                i["caps"],
                i["output"],
                estimated_cost={"tool_calls": i["cost"], "model_calls": 1, "tokens": 0},
            )
            for i in items
        ]
    )


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_proposed_item, min_size=0, max_size=4))
def test_a_proposed_plan_either_passes_the_validator_or_never_runs(tmp_path_factory: Any, items: Any) -> None:
    doc = _proposed(items)
    runtime = Runtime(SQLiteStore(tmp_path_factory.mktemp("p") / "r.db"))
    agent = make_agent(doc, worker=_writer, budget=BudgetLimits(max_tool_calls=50, max_reflections_per_artifact=1))
    state = runtime.start(agent, GOAL.objective)
    recorded = [e.payload for e in runtime.store.read_events(state.run_id) if e.type is EventType.PLAN_RECORDED]
    started = [e for e in runtime.store.read_events(state.run_id) if e.type is EventType.WORK_ITEM_STARTED]
    try:
        verdict = validate_plan(
            load_plan(doc), capabilities=set(agent.tools.names()), goal=GOAL, budget=RemainingBudget(tool_calls=50)
        ).verdict
    except Exception:
        verdict = None
    if not recorded:
        assert not started and state.status is RunStatus.FAILED and state.usage.tool_attempts == 0
    else:
        assert recorded[0]["validator"] == "ACCEPT" and verdict is Verdict.ACCEPT
    if verdict is not Verdict.ACCEPT:
        assert not recorded and not started
    runtime.close()


def test_a_refused_patch_on_new_facts_keeps_the_plan_in_hand(runtime: Runtime) -> None:
    # A measured open issue asks the planner for a patch; this planner answers with the plan again (not a
    # patch): the refusal is recorded and the run goes on with version 1 instead of degrading.
    agent = configured(
        make_agent(TWO_ITEMS, budget=BudgetLimits(max_replans=1, max_reflections_per_artifact=1)),
        measure=measured(0.8),
    )
    state = runtime.start(agent, GOAL.objective)
    recorded = [e.payload for e in runtime.store.read_events(state.run_id) if e.type is EventType.PLAN_RECORDED]
    assert [r.get("refused_patch") for r in recorded] == [None, "INVALID_PLAN_PATCH"]
    assert state.memo["plan"]["version"] == 1 and state.memo["ledger"]["used"]["replans"] == 1
    outcome = state.memo["outcome"]
    assert (outcome["reason_code"], outcome["completion_mode"]) == ("GOAL_MET", "DEGRADED")  # ran to the end on v1
    assert outcome["unresolved_issues"] == ["repo-x unread"]


def test_a_call_whose_arguments_leave_the_goal_scope_is_refused(runtime: Runtime) -> None:
    # The tool (search) is in scope; its argument names an out-of-scope system. The call never runs.
    def reaching_out(req: Any) -> dict[str, Any]:
        if req.facts["work_item"]["work_item_id"] == "W1" and req.correction is None:
            return {"type": "EXECUTE_TOOL", "action": "search", "args": {"query": "billing-prod/ledger dump"}}
        return _writer(req)

    fenced = goal_with(scope={"out_of_scope": ["billing-prod"]})
    agent = make_agent(TWO_ITEMS, worker=reaching_out, goal=fenced)
    agent.on_rejected_signal = "correct_once"
    state = runtime.start(agent, GOAL.objective)
    refused = [
        e.payload
        for e in runtime.store.read_events(state.run_id)
        if e.type is EventType.RUNTIME_VALIDATED and e.payload.get("runtime_decision") == "rejected"
    ]
    assert [r["code"] for r in refused] == ["OUT_OF_SCOPE_ARGUMENT"]
    assert "billing-prod" in refused[0]["message"]
    calls = [e for e in runtime.store.read_events(state.run_id) if e.type is EventType.TOOL_ATTEMPTED]
    assert all(e.payload["observation"]["action"] != "search" for e in calls)
    assert state.status is RunStatus.COMPLETED


def test_a_plan_to_revise_goes_back_to_the_planner_and_only_the_accepted_one_runs(runtime: Runtime) -> None:
    # The first plan leaves the high-risk publish step without an approval (REVISE); told so, the planner
    # fixes it. A planner that never fixes it is refused after one revision: no work item ever starts.
    unsafe = plan_doc(
        [item("W1", [], ["search"], "findings"), item("W3", ["W1"], ["publish"], "receipt", risk_level="high")]
    )

    def planner(req: ModelRequest) -> dict[str, Any]:
        return THREE_ITEMS if req.facts.get("validator_issues") else unsafe

    agent = make_agent(THREE_ITEMS)
    assert isinstance(agent.controller, PlanRunController)
    agent.controller.planner = ScriptedModel(planner)
    state = runtime.start(agent, GOAL.objective)
    [recorded] = [e.payload for e in runtime.store.read_events(state.run_id) if e.type is EventType.PLAN_RECORDED]
    assert (recorded["validator"], recorded["revisions"]) == ("ACCEPT", 1)
    assert state.memo["ledger"]["used"]["model_calls"] >= 2  # both planner calls are charged

    stubborn = make_agent(THREE_ITEMS)
    assert isinstance(stubborn.controller, PlanRunController)
    stubborn.controller.planner = ScriptedModel(lambda req: unsafe)
    refused = runtime.start(stubborn, GOAL.objective)
    assert refused.status is RunStatus.FAILED and refused.usage.model_calls == 2
    assert not [e for e in runtime.store.read_events(refused.run_id) if e.type is EventType.WORK_ITEM_STARTED]


def test_a_tool_result_s_confidence_is_what_the_local_loop_measures() -> None:
    from stateward.controllers.plan_support import step_record
    from stateward.core.contract import Observation

    def obs(result: Any) -> Observation:
        return Observation(step=1, action="search", args={}, status="SUCCESS", result=result)

    assert step_record(obs({"hits": [], "confidence": 0.7})).confidence == 0.7
    for unmeasured in ({"confidence": "high"}, {"confidence": True}, {"confidence": 2}, {"x": {"confidence": 0.5}}, []):
        assert step_record(obs(unmeasured)).confidence is None


def _budget_goal(on_met: str) -> GoalContract:
    criterion = {
        "criterion_id": "no-budget-for-ranking",
        "description": "budget insufficient to complete the risk ranking",
        "predicate": {"kind": "budget_insufficient_for", "value": "ranking"},
        "on_met": on_met,
    }
    return goal_with(failure_criteria=[criterion])


# W1 is estimated at one tool call and takes two: after it, the three calls left carry W2 but not W2 + W3.
UNDERESTIMATED = plan_doc(
    [
        item("W1", [], ["search"], "findings", estimated_cost={"tool_calls": 1, "model_calls": 2, "tokens": 0}),
        item("W2", ["W1"], [], "summary"),
        item("W3", ["W2"], [], "ranking"),
    ]
)


def test_a_budget_that_cannot_reach_the_ranking_delivers_the_confirmed_facts_at_once(runtime: Runtime) -> None:
    # Source 3 / 15.4: "budget insufficient to complete the risk verification" is a failure criterion, and a run
    # that meets it keeps what it confirmed and delivers it partially, with the budget it would need.
    agent = make_agent(UNDERESTIMATED, goal=_budget_goal("DEGRADE"), budget=BudgetLimits(max_tool_calls=5))
    state = runtime.start(agent, GOAL.objective)
    outcome = state.memo["outcome"]
    assert state.status is RunStatus.PARTIALLY_COMPLETED
    assert outcome["reason_code"] == "GOAL_FAILURE_CRITERION"
    assert state.memo["verified"] == ["W1"] and "W2" not in state.memo["items"]  # W2 was never started
    assert outcome["budget_to_continue"]["tool_calls"] == 4
    assert [e["reason"] for e in events(runtime, state.run_id, EventType.TERMINATION_RECORDED)] == [
        "GOAL_FAILURE_CRITERION"
    ]


def test_a_failure_criterion_that_rules_out_a_safe_delivery_fails_the_run(runtime: Runtime) -> None:
    agent = make_agent(UNDERESTIMATED, goal=_budget_goal("FAIL"), budget=BudgetLimits(max_tool_calls=5))
    state = runtime.start(agent, GOAL.objective)
    assert (state.status, state.terminal_reason) == (RunStatus.FAILED, "goal_failure_criterion")
    # W1 was verified, but the goal says nothing may be delivered once this criterion holds: the lowest rung.
    outcome = state.memo["outcome"]
    assert (outcome["rung"], outcome["completion_mode"], outcome["final_artifact"]) == ("SAFE_FAILURE", "NONE", None)
    assert state.memo["verified"] == ["W1"] and PARTIAL_ARTIFACT not in state.artifacts


def test_without_the_criterion_the_affordable_item_still_runs(runtime: Runtime) -> None:
    agent = make_agent(UNDERESTIMATED, budget=BudgetLimits(max_tool_calls=5))
    state = runtime.start(agent, GOAL.objective)
    assert "W2" in state.memo["items"]


# --------------------------------------------------------------------------- the deliverable's model check is charged

# W2 is estimated at one model call and takes two (a search, then the summary).
CHECKED = plan_doc(
    [
        item("W1", [], ["search"], "findings"),
        item("W2", ["W1"], ["search"], "summary", estimated_cost={"tool_calls": 1, "model_calls": 1, "tokens": 0}),
    ]
)


def _writes_both_sections(req: ModelRequest) -> Any:
    if req.facts["work_item"]["work_item_id"] != "W2":
        return worker_policy(req)
    if not req.observations:
        return {"type": "EXECUTE_TOOL", "action": "search", "args": {"query": "what else"}}
    args = {
        "artifact_type": "summary",
        "content": json.dumps({"sections": ["intro", "evidence"]}),
        "evidence": cite_evidence(req),
    }
    return {"type": "EXECUTE_TOOL", "action": "record_output", "args": args}


def _judged(asked: list[ModelRequest]) -> Any:
    """An evidence verifier whose semantic check asks the checker it is handed (the run's metered checker)."""

    def verify(content: str, recorded: frozenset[str], checker: Any) -> list[CheckResult]:
        assert checker is not None
        try:
            reply = complete(checker, ModelRequest(purpose="content", goal="judge the summary", facts={"c": content}))
        except BudgetError as exc:
            return [CheckResult(name="judged", verdict=CheckVerdict.UNKNOWN, detail=f"{exc.code}: {exc.message}")]
        return [CheckResult(name="judged", verdict=CheckVerdict(json.loads(reply.text)["verdict"]))]

    return verify


def _checked_agent(asked: list[ModelRequest], budget: BudgetLimits) -> Any:
    def judge(req: ModelRequest) -> dict[str, str]:
        asked.append(req)
        return {"verdict": "PASS", "detail": "two sections"}

    agent = make_agent(CHECKED, worker=_writes_both_sections, budget=budget)
    return configured(agent, verifier=None, evidence_verifier=_judged(asked), checker=ScriptedModel(judge))


def test_the_deliverable_s_model_check_is_charged_like_every_model_call(runtime: Runtime) -> None:
    asked: list[ModelRequest] = []
    state = runtime.start(_checked_agent(asked, BudgetLimits(max_reflections_per_artifact=1)), GOAL.objective)
    unchecked = runtime.start(
        configured(make_agent(CHECKED, worker=_writes_both_sections), verifier=None, evidence_verifier=None),
        GOAL.objective,
    )
    assert state.status is unchecked.status is RunStatus.COMPLETED and len(asked) == 1
    used, before = state.memo["ledger"]["used"], unchecked.memo["ledger"]["used"]
    # One more model call and its tokens, in the Runtime's counters and in the plan's ledger alike.
    assert state.usage.model_calls == unchecked.usage.model_calls + 1 == used["model_calls"]
    assert used["model_calls"] == before["model_calls"] + 1
    tokens = state.usage.input_tokens + state.usage.output_tokens
    assert tokens > unchecked.usage.input_tokens + unchecked.usage.output_tokens and used["tokens"] == tokens


def test_a_run_whose_budget_cannot_afford_the_check_does_not_make_it(runtime: Runtime) -> None:
    # The planner and W1 take three calls, W2 the two left: nothing is left for the check, so it is not made.
    asked: list[ModelRequest] = []
    agent = _checked_agent(asked, BudgetLimits(max_model_calls=5, max_reflections_per_artifact=1))
    state = runtime.start(agent, GOAL.objective)
    assert asked == [] and state.usage.model_calls == 5
    *_, verification = events(runtime, state.run_id, EventType.VERIFICATION_RECORDED)  # the deliverable's
    [check] = [c for c in verification["checks"] if c["name"] not in ("output_schema", "cites_evidence")]
    assert check["verdict"] == "UNKNOWN" and check["detail"].startswith("BUDGET_EXCEEDED: no model call left")
    assert verification["outcome"] != "ACCEPT" and state.status is not RunStatus.COMPLETED
    assert "W2" not in state.memo["verified"]  # an unchecked deliverable never counts
