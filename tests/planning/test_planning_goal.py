"""Goal Contract: hard violations block or hand off, soft ones are recorded; outcomes come from facts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from stateward.planning import (
    GoalContract,
    InvalidGoalDocumentError,
    RunFacts,
    ViolationEffect,
    assess_goal,
    check_constraints,
    load_goal,
    read_goal_file,
)
from stateward.planning.goal import evaluate

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "plans"


def constraint(cid: str, kind: str, value: Any, **extra: Any) -> dict[str, Any]:
    return {"constraint_id": cid, "description": cid, "predicate": {"kind": kind, "value": value}, **extra}


GOAL = load_goal(
    {
        "goal_id": "g",
        "objective": "assess migration",
        "scope": {"in_scope": ["payment-services"], "out_of_scope": ["billing-prod"]},
        "deliverables": ["risk-matrix"],
        "hard_constraints": [
            constraint("tools", "max_tool_calls", 40),
            constraint("ro", "forbidden_capability", "write_prod", on_violation="HANDOFF"),
        ],
        "soft_constraints": [constraint("frugal", "max_model_calls", 10)],
        "success_criteria": [
            {
                "criterion_id": "matrix",
                "description": "d",
                "predicate": {"kind": "artifact_present", "value": "risk-matrix"},
            },
            {
                "criterion_id": "cover",
                "description": "d",
                "predicate": {"kind": "metric_at_least", "metric": "coverage", "value": 1.0},
            },
        ],
        "failure_criteria": [
            {
                "criterion_id": "access",
                "description": "d",
                "predicate": {"kind": "metric_below", "metric": "accessible_ratio", "value": 0.8},
            },
        ],
        "evidence_requirements": [{"requirement_id": "e", "applies_to": "high_risk_claim"}],
    }
)


def test_no_violations_within_limits() -> None:
    assert check_constraints(GOAL, RunFacts(tool_calls=40, model_calls=10)) == []


@pytest.mark.parametrize(
    ("slot", "entry", "named"),
    [
        ("hard_constraints", constraint("has-matrix", "artifact_present", "risk-matrix"), "constraint has-matrix"),
        ("soft_constraints", constraint("has-matrix", "artifact_present", "risk-matrix"), "constraint has-matrix"),
        (
            "failure_criteria",
            {"criterion_id": "slow", "description": "d", "predicate": {"kind": "max_tool_calls", "value": 9}},
            "failure criterion slow",
        ),
        (
            "failure_criteria",
            {"criterion_id": "x", "description": "d", "predicate": {"kind": "forbidden_capability", "value": "w"}},
            "failure criterion x",
        ),
    ],
)
def test_rules_that_cannot_be_checked_mid_run_are_refused_by_name(slot: str, entry: Any, named: str) -> None:
    """Constraints and failure criteria are checked before every decision; these would fire at step one."""
    with pytest.raises(InvalidGoalDocumentError) as err:
        load_goal({**GOAL.model_dump(mode="json"), slot: [entry]})
    assert err.value.code == "INVALID_GOAL_DOCUMENT" and named in err.value.message


def test_a_deadline_no_clock_measured_is_neither_kept_nor_missed() -> None:
    goal = load_goal({**GOAL.model_dump(mode="json"), "hard_constraints": [constraint("t", "max_elapsed_seconds", 60)]})
    deadline = goal.hard_constraints[0].predicate
    assert evaluate(deadline, RunFacts()) is None  # unmeasured, not "kept"
    assert check_constraints(goal, RunFacts()) == []
    assert evaluate(deadline, RunFacts(elapsed_seconds=60)) is True
    assert [v.constraint_id for v in check_constraints(goal, RunFacts(elapsed_seconds=61))] == ["t"]


def test_hard_violation_blocks_or_hands_off_soft_is_recorded() -> None:
    facts = RunFacts(tool_calls=41, model_calls=11, capabilities_used=("search_code", "write_prod"))
    got = {v.constraint_id: v for v in check_constraints(GOAL, facts)}
    assert got["tools"].hard and got["tools"].effect is ViolationEffect.BLOCK
    assert got["ro"].hard and got["ro"].effect is ViolationEffect.HANDOFF
    assert not got["frugal"].hard and got["frugal"].effect is ViolationEffect.RECORD
    assert "tools" in got["tools"].message


def test_hard_constraint_cannot_merely_record() -> None:
    with pytest.raises(InvalidGoalDocumentError):
        load_goal(
            {
                "goal_id": "g",
                "objective": "o",
                "hard_constraints": [constraint("x", "max_tokens", 1, on_violation="RECORD")],
            }
        )


def test_duplicate_constraint_ids_are_refused() -> None:
    with pytest.raises(InvalidGoalDocumentError, match="duplicate"):
        load_goal(
            {
                "goal_id": "g",
                "objective": "o",
                "hard_constraints": [constraint("x", "max_tokens", 1)],
                "soft_constraints": [constraint("x", "max_tokens", 2)],
            }
        )


def test_assessment_needs_measured_facts() -> None:
    unknown = assess_goal(GOAL, RunFacts())
    assert not unknown.succeeded and not unknown.failed
    assert unknown.unmet == ("matrix", "cover")
    done = assess_goal(GOAL, RunFacts(artifacts=("risk-matrix",), metrics={"coverage": 1.0, "accessible_ratio": 0.9}))
    assert done.succeeded and done.met == ("matrix", "cover")
    failed = assess_goal(GOAL, RunFacts(metrics={"accessible_ratio": 0.5}))
    assert failed.failed and failed.failures == ("access",)


def test_forbidden_capabilities_and_json_round_trip() -> None:
    assert GOAL.forbidden_capabilities() == {"write_prod"}
    assert GoalContract.model_validate_json(GOAL.model_dump_json()) == GOAL


def test_example_goal_loads() -> None:
    goal = read_goal_file(EXAMPLES / "payment_migration.goal.json")
    assert goal.goal_id == "goal-payment-migration-001"
    assert check_constraints(goal, RunFacts(tool_calls=121))[0].constraint_id == "tool-budget"
