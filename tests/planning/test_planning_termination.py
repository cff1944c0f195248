"""Termination service: one decision per evaluation, with a fixed precedence."""

from __future__ import annotations

from typing import Any

import pytest

from stateward.planning import (
    BudgetAmount,
    BudgetLedger,
    BudgetLimits,
    FailureFact,
    RunFacts,
    TerminationDecision,
    TerminationPolicy,
    TerminationReason,
    TerminationSnapshot,
    WorkItemState,
    evaluate_termination,
    load_goal,
)

D, R = TerminationDecision, TerminationReason
W = WorkItemState

GOAL = load_goal(
    {
        "goal_id": "payment-sdk-v2",
        "objective": "assess the Payment SDK v2 migration",
        "hard_constraints": [
            {
                "constraint_id": "read_only",
                "description": "never write to repositories",
                "predicate": {"kind": "forbidden_capability", "value": "repo.write"},
            },
            {
                "constraint_id": "tool_cap",
                "description": "at most 120 tool calls",
                "on_violation": "HANDOFF",
                "predicate": {"kind": "max_tool_calls", "value": 120},
            },
        ],
        "soft_constraints": [
            {
                "constraint_id": "fast",
                "description": "finish within 10 minutes",
                "predicate": {"kind": "max_elapsed_seconds", "value": 600},
            }
        ],
        "failure_criteria": [
            {
                "criterion_id": "too_few_repos",
                "description": "less than half the repositories accessible",
                "predicate": {"kind": "metric_below", "metric": "accessible_repository_ratio", "value": 0.5},
            }
        ],
    }
)
TIMEOUT = FailureFact(action="search_docs", error_code="TIMEOUT")


def snap(**fields: Any) -> TerminationSnapshot:
    return TerminationSnapshot(step=fields.pop("step", 7), **fields)


def decide(**fields: Any) -> tuple[TerminationDecision, TerminationReason]:
    record = evaluate_termination(snap(**fields))
    return record.decision, record.reason


def test_nothing_wrong_continues() -> None:
    record = evaluate_termination(snap(goal=GOAL, facts=RunFacts(tool_calls=10, elapsed_seconds=900)))
    assert (record.decision, record.reason, record.at_step, record.stops) == (D.CONTINUE, R.OK, 7, False)


def test_hard_constraint_block_fails_and_handoff_hands_off() -> None:
    blocked = evaluate_termination(snap(goal=GOAL, facts=RunFacts(capabilities_used=("repo.write",))))
    assert (blocked.decision, blocked.reason, blocked.constraint_ids) == (
        D.FAIL,
        R.HARD_CONSTRAINT_VIOLATED,
        ("read_only",),
    )
    assert decide(goal=GOAL, facts=RunFacts(tool_calls=121)) == (D.HANDOFF, R.HARD_CONSTRAINT_VIOLATED)
    # Both broken in one step: the block wins, nobody can authorise past it.
    both = RunFacts(capabilities_used=("repo.write",), tool_calls=121)
    assert decide(goal=GOAL, facts=both) == (D.FAIL, R.HARD_CONSTRAINT_VIOLATED)


def test_soft_constraint_violation_does_not_stop() -> None:
    assert decide(goal=GOAL, facts=RunFacts(elapsed_seconds=3600)) == (D.CONTINUE, R.OK)


def test_goal_failure_criterion_fails() -> None:
    facts = RunFacts(metrics={"accessible_repository_ratio": 5 / 12})
    assert decide(goal=GOAL, facts=facts) == (D.FAIL, R.GOAL_FAILURE_CRITERION)


def test_three_identical_failures_in_a_row_hand_off() -> None:
    assert decide(failures=(TIMEOUT, TIMEOUT)) == (D.CONTINUE, R.OK)
    record = evaluate_termination(snap(failures=(TIMEOUT, TIMEOUT, TIMEOUT)))
    assert (record.decision, record.reason) == (D.HANDOFF, R.REPEATED_FAILURE)
    assert record.detail == "search_docs failed with TIMEOUT 3 times in a row"


@pytest.mark.parametrize(
    "failures",
    [
        (TIMEOUT, FailureFact(action="search_docs", error_code="RATE_LIMITED"), TIMEOUT, TIMEOUT),
        (TIMEOUT, TIMEOUT, FailureFact(action="search_code", error_code="TIMEOUT")),
    ],
)
def test_failures_differing_in_code_or_action_are_not_identical(failures: tuple[FailureFact, ...]) -> None:
    assert decide(failures=failures) == (D.CONTINUE, R.OK)


def test_budget_used_up_or_too_small_for_the_next_item_degrades() -> None:
    limits = BudgetLimits(max_tool_calls=120)
    spent = BudgetLedger(limits=limits).charge(BudgetAmount(tool_calls=120))
    assert decide(budget=spent) == (D.DEGRADE, R.BUDGET_EXHAUSTED)
    low = BudgetLedger(limits=limits).charge(BudgetAmount(tool_calls=118))
    assert decide(budget=low) == (D.CONTINUE, R.OK)
    assert decide(budget=low, next_estimate=BudgetAmount(tool_calls=8)) == (D.DEGRADE, R.BUDGET_EXHAUSTED)


def test_a_reservation_of_running_work_is_not_exhaustion() -> None:
    running = BudgetLedger(limits=BudgetLimits(max_tool_calls=10)).reserve("W10", BudgetAmount(tool_calls=10))
    assert decide(budget=running) == (D.CONTINUE, R.OK)


def test_no_progress_streak_degrades() -> None:
    assert decide(no_progress_streak=1) == (D.CONTINUE, R.OK)
    assert decide(no_progress_streak=2) == (D.DEGRADE, R.NO_PROGRESS)


def test_plan_stalled_for_k_evaluations_hands_off() -> None:
    same = {"W01": W.SUCCEEDED, "W02": W.READY}
    policy = TerminationPolicy(stall_evaluations=3)
    assert evaluate_termination(snap(state_history=(same,) * 3), policy).decision is D.CONTINUE
    record = evaluate_termination(snap(state_history=(same,) * 4), policy)
    assert (record.decision, record.reason) == (D.HANDOFF, R.PLAN_STALLED)
    assert "open: W02" in record.detail
    changed = ({"W01": W.RUNNING, "W02": W.PENDING}, *(same,) * 3)
    assert evaluate_termination(snap(state_history=changed), policy).decision is D.CONTINUE
    done = {"W01": W.SUCCEEDED, "W02": W.SUCCEEDED}
    assert evaluate_termination(snap(state_history=(done,) * 4), policy).decision is D.CONTINUE


def test_precedence_is_safety_then_person_then_failures_then_budget_then_heuristics() -> None:
    stalled = ({"W02": W.READY},) * 6
    spent = BudgetLedger(limits=BudgetLimits(max_tool_calls=1)).charge(BudgetAmount(tool_calls=1))
    layers: dict[str, Any] = {
        "goal": GOAL,
        "facts": RunFacts(capabilities_used=("repo.write",), metrics={"accessible_repository_ratio": 0.1}),
        "pause_requested": True,
        "failures": (TIMEOUT,) * 3,
        "budget": spent,
        "no_progress_streak": 5,
        "state_history": stalled,
    }
    expected = [
        (D.FAIL, R.HARD_CONSTRAINT_VIOLATED),
        (D.FAIL, R.GOAL_FAILURE_CRITERION),
        (D.PAUSE, R.PAUSE_REQUESTED),
        (D.HANDOFF, R.REPEATED_FAILURE),
        (D.DEGRADE, R.BUDGET_EXHAUSTED),
        (D.DEGRADE, R.NO_PROGRESS),
        (D.HANDOFF, R.PLAN_STALLED),
    ]
    fields = dict(layers)
    for want in expected:
        assert decide(**fields) == want
        # peel off the cause that won, the next one must win
        if want[1] is R.HARD_CONSTRAINT_VIOLATED:
            fields["facts"] = RunFacts(metrics={"accessible_repository_ratio": 0.1})
        elif want[1] is R.GOAL_FAILURE_CRITERION:
            del fields["goal"], fields["facts"]
        elif want[1] is R.PAUSE_REQUESTED:
            fields["pause_requested"] = False
        elif want[1] is R.REPEATED_FAILURE:
            del fields["failures"]
        elif want[1] is R.BUDGET_EXHAUSTED:
            del fields["budget"]
        elif want[1] is R.NO_PROGRESS:
            del fields["no_progress_streak"]
        else:
            del fields["state_history"]
    assert decide(**fields) == (D.CONTINUE, R.OK)
