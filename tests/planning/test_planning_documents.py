"""Malformed plan and goal documents give named errors with pydantic's field errors, never tracebacks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from stateward.core.errors import RunError
from stateward.planning import (
    EstimatedCost,
    InvalidGoalDocumentError,
    InvalidPlanDocumentError,
    RiskLevel,
    load_goal,
    load_plan,
    read_goal_file,
    read_plan_file,
)

GOOD_ITEM: dict[str, Any] = {
    "work_item_id": "W01",
    "milestone_id": "M1",
    "title": "t",
    "task_type": "LOCAL_REACT",
    "output_spec": {"artifact_type": "indirect-api-usage", "schema_version": "1.0"},
    "completion_criteria": ["c"],
    "risk_level": "LOW",
}


def doc(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "plan_id": "p",
        "version": 1,
        "goal_id": "g",
        "milestones": [{"milestone_id": "M1", "title": "m"}],
        "work_items": [dict(GOOD_ITEM)],
    }
    base.update(overrides)
    return base


def test_round_trip_through_json() -> None:
    plan = load_plan(json.dumps(doc()))
    assert plan.work_items[0].risk_level is RiskLevel.LOW
    assert load_plan(plan.to_document()) == plan
    assert json.loads(json.dumps(plan.to_document()))["work_items"][0]["risk_level"] == "low"


def test_plan_is_frozen() -> None:
    plan = load_plan(doc())
    with pytest.raises(ValueError, match="frozen"):
        plan.version = 2  # type: ignore[misc]


@pytest.mark.parametrize(
    ("document", "loc"),
    [
        (doc(version=0), "version"),
        (doc(version="one"), "version"),
        (doc(work_items=[{**GOOD_ITEM, "task_type": "DANCE"}]), "work_items.0.task_type"),
        (doc(work_items=[{**GOOD_ITEM, "risk_level": "extreme"}]), "work_items.0.risk_level"),
        (doc(work_items=[{**GOOD_ITEM, "max_react_steps": -1}]), "work_items.0.max_react_steps"),
        (
            doc(work_items=[{**GOOD_ITEM, "estimated_cost": {"tool_calls": -3}}]),
            "work_items.0.estimated_cost.tool_calls",
        ),
        (
            doc(work_items=[{k: v for k, v in GOOD_ITEM.items() if k != "output_spec"}]),
            "work_items.0.output_spec",
        ),
        (doc(work_items=[{**GOOD_ITEM, "surprise": 1}]), "work_items.0.surprise"),
        (doc(milestones=[{"title": "no id"}]), "milestones.0.milestone_id"),
    ],
)
def test_malformed_plan_names_the_field(document: dict[str, Any], loc: str) -> None:
    with pytest.raises(InvalidPlanDocumentError) as info:
        load_plan(document)
    err = info.value
    assert isinstance(err, RunError)
    assert err.code == "INVALID_PLAN_DOCUMENT"
    assert loc in [e["loc"] for e in err.details["errors"]]
    assert loc in err.message
    json.dumps(err.to_dict())  # JSON-serialisable, no raw inputs


@pytest.mark.parametrize("document", [[], "null", "[1, 2]", 42])
def test_non_object_documents_are_invalid(document: Any) -> None:
    with pytest.raises(InvalidPlanDocumentError) as info:
        load_plan(document)
    assert info.value.code == "INVALID_PLAN_DOCUMENT"


def test_bad_json_text_is_named() -> None:
    with pytest.raises(InvalidPlanDocumentError) as info:
        load_plan('{"plan_id": ')
    assert info.value.code == "NOT_JSON"
    with pytest.raises(InvalidPlanDocumentError) as info:
        load_plan(b"\xff\xfe\x00garbage")
    assert info.value.code == "NOT_JSON"


@pytest.mark.parametrize("text", ["[" * 100_000, '{"plan_id": ' + "9" * 5000 + "}"])
def test_json_the_parser_cannot_hold_is_named_too(text: str) -> None:
    # Nesting past the interpreter's recursion limit, an integer past its 4,300-digit conversion limit.
    with pytest.raises(InvalidPlanDocumentError) as info:
        load_plan(text)
    assert info.value.code == "NOT_JSON"


def test_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(InvalidPlanDocumentError) as info:
        read_plan_file(tmp_path / "nope.json")
    assert info.value.code == "PLAN_FILE_NOT_FOUND"
    with pytest.raises(InvalidPlanDocumentError) as info:
        read_plan_file(tmp_path)
    assert info.value.code == "PLAN_FILE_UNREADABLE"
    with pytest.raises(InvalidGoalDocumentError) as ginfo:
        read_goal_file(tmp_path / "nope.json")
    assert ginfo.value.code == "GOAL_FILE_NOT_FOUND"


def test_malformed_goal_is_named() -> None:
    with pytest.raises(InvalidGoalDocumentError) as info:
        load_goal(
            {
                "goal_id": "g",
                "objective": "o",
                "hard_constraints": [
                    {"constraint_id": "c", "description": "d", "predicate": {"kind": "vibes", "value": 1}}
                ],
            }
        )
    assert info.value.code == "INVALID_GOAL_DOCUMENT"
    assert info.value.details["errors"][0]["loc"].startswith("hard_constraints.0.predicate")
    with pytest.raises(InvalidGoalDocumentError) as info:
        load_goal("not json")
    assert info.value.code == "NOT_JSON"


def test_cost_addition() -> None:
    total = EstimatedCost(tool_calls=1, model_calls=2, tokens=3) + EstimatedCost(tool_calls=4)
    assert total == EstimatedCost(tool_calls=5, model_calls=2, tokens=3)
