"""Every validator issue code is triggered, named, and mapped to the documented verdict."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from stateward.planning import (
    REJECT_CODES,
    REVISE_CODES,
    GoalContract,
    IssueCode,
    Plan,
    RemainingBudget,
    Scope,
    Verdict,
    load_plan,
    read_plan_file,
    validate_plan,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "plans"
PAYMENT_CAPABILITIES = [
    "check_repository_access",
    "compute_risk_score",
    "deliver_report",
    "get_document",
    "get_file_section",
    "list_repositories",
    "render_report",
    "search_code",
    "search_docs",
    "search_docs_cache",
]


def item(wid: str, deps: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "work_item_id": wid,
        "milestone_id": "M1",
        "title": f"item {wid}",
        "task_type": "TOOL",
        "dependencies": deps or [],
        "required_capabilities": ["search_code"],
        "output_spec": {"artifact_type": "x"},
        "completion_criteria": ["output exists"],
        "estimated_cost": {"tool_calls": 1, "model_calls": 1, "tokens": 100},
    }
    doc.update(extra)
    return doc


def plan(*items: dict[str, Any], milestones: tuple[str, ...] = ("M1",)) -> Plan:
    return load_plan(
        {
            "plan_id": "p",
            "version": 1,
            "goal_id": "g",
            "milestones": [{"milestone_id": m, "title": m} for m in milestones],
            "work_items": list(items),
        }
    )


def codes(report: Any) -> list[str]:
    return [i.code.value for i in report.issues]


def test_clean_plan_is_accepted() -> None:
    report = validate_plan(plan(item("a"), item("b", ["a"])), capabilities=["search_code"])
    assert report.verdict is Verdict.ACCEPT
    assert report.issues == ()


def test_codes_partition_into_reject_and_revise() -> None:
    assert set(IssueCode) == REJECT_CODES | REVISE_CODES
    assert not REJECT_CODES & REVISE_CODES
    structural = {"DUPLICATE_ID", "UNKNOWN_DEPENDENCY", "CYCLE", "OUT_OF_SCOPE", "UNKNOWN_CAPABILITY"}
    assert structural <= {c.value for c in REJECT_CODES}
    fixable = {"NO_COMPLETION_CRITERIA", "MISSING_APPROVAL", "BUDGET_INFEASIBLE", "UNKNOWN_MILESTONE"}
    assert fixable <= {c.value for c in REVISE_CODES}


@pytest.mark.parametrize(
    ("make", "kwargs", "code", "work_item_id", "verdict"),
    [
        (lambda: plan(item("a"), item("a")), {}, "DUPLICATE_ID", "a", Verdict.REJECT),
        (lambda: plan(item("a"), milestones=("M1", "M1")), {}, "DUPLICATE_ID", None, Verdict.REJECT),
        (lambda: plan(item("a", ["zzz"])), {}, "UNKNOWN_DEPENDENCY", "a", Verdict.REJECT),
        (lambda: plan(item("a", ["a"])), {}, "CYCLE", "a", Verdict.REJECT),
        (
            lambda: plan(item("a", required_capabilities=["rm_rf"])),
            {"capabilities": ["search_code"]},
            "UNKNOWN_CAPABILITY",
            "a",
            Verdict.REJECT,
        ),
        (
            lambda: plan(item("a", scope=["billing-prod"])),
            {"scope": Scope(out_of_scope=("billing-prod",))},
            "OUT_OF_SCOPE",
            "a",
            Verdict.REJECT,
        ),
        (
            lambda: plan(item("a", scope=["elsewhere"])),
            {"scope": Scope(in_scope=("payment-services",))},
            "OUT_OF_SCOPE",
            "a",
            Verdict.REJECT,
        ),
        (
            lambda: plan(item("a")),
            {"scope": Scope(allowed_capabilities=("get_document",))},
            "OUT_OF_SCOPE",
            "a",
            Verdict.REJECT,
        ),
        (lambda: plan(), {}, "EMPTY_PLAN", None, Verdict.REJECT),
        (lambda: plan(item("a", milestone_id="M9")), {}, "UNKNOWN_MILESTONE", "a", Verdict.REVISE),
        (lambda: plan(item("a", completion_criteria=[])), {}, "NO_COMPLETION_CRITERIA", "a", Verdict.REVISE),
        (
            lambda: plan(item("a", completion_criteria=["  "])),
            {},
            "NO_COMPLETION_CRITERIA",
            "a",
            Verdict.REVISE,
        ),
        (lambda: plan(item("a", risk_level="HIGH")), {}, "MISSING_APPROVAL", "a", Verdict.REVISE),
        (
            lambda: plan(item("a"), item("b")),
            {"budget": RemainingBudget(tool_calls=1)},
            "BUDGET_INFEASIBLE",
            None,
            Verdict.REVISE,
        ),
        (
            lambda: plan(item("a")),
            {"budget": RemainingBudget(model_calls=0)},
            "BUDGET_INFEASIBLE",
            None,
            Verdict.REVISE,
        ),
        (
            lambda: plan(item("a")),
            {"budget": RemainingBudget(tokens=99)},
            "BUDGET_INFEASIBLE",
            None,
            Verdict.REVISE,
        ),
    ],
)
def test_each_code_is_triggered_and_named(
    make: Any, kwargs: dict[str, Any], code: str, work_item_id: str | None, verdict: Verdict
) -> None:
    report = validate_plan(make(), **kwargs)
    assert codes(report) == [code]
    assert report.issues[0].work_item_id == work_item_id
    assert report.issues[0].message
    assert report.verdict is verdict


def test_cycle_message_names_the_path() -> None:
    report = validate_plan(plan(item("a", ["b"]), item("b", ["c"]), item("c", ["a"]), item("d", ["a"])))
    assert codes(report) == ["CYCLE"]
    assert report.issues[0].message == "dependency cycle: a -> b -> c -> a"
    assert report.issues[0].work_item_id == "a"


def test_each_independent_cycle_is_reported_once() -> None:
    p = plan(item("a", ["b"]), item("b", ["a"]), item("c", ["d"]), item("d", ["c", "a"]))
    messages = [i.message for i in validate_plan(p).issues]
    assert messages == ["dependency cycle: a -> b -> a", "dependency cycle: c -> d -> c"]


def test_budget_leaves_out_completed_items() -> None:
    p = plan(item("a"), item("b", ["a"]))
    assert validate_plan(p, budget=RemainingBudget(tool_calls=1)).verdict is Verdict.REVISE
    assert validate_plan(p, budget=RemainingBudget(tool_calls=1), completed={"a"}).verdict is Verdict.ACCEPT


def test_budget_message_names_dimension_and_numbers() -> None:
    report = validate_plan(plan(item("a"), item("b")), budget=RemainingBudget(tool_calls=1))
    assert report.issues[0].message == "estimated tool_calls 2 exceeds the remaining 1"


def test_high_risk_with_approval_is_fine() -> None:
    assert validate_plan(plan(item("a", risk_level="high", approval_required=True))).verdict is Verdict.ACCEPT


def test_goal_forbidden_capability_and_goal_mismatch() -> None:
    goal = GoalContract.model_validate(
        {
            "goal_id": "other",
            "objective": "o",
            "hard_constraints": [
                {
                    "constraint_id": "ro",
                    "description": "read only",
                    "predicate": {"kind": "forbidden_capability", "value": "search_code"},
                }
            ],
        }
    )
    report = validate_plan(plan(item("a")), goal=goal)
    assert codes(report) == ["GOAL_MISMATCH", "OUT_OF_SCOPE"]
    assert report.verdict is Verdict.REJECT


def test_reject_wins_over_revise() -> None:
    report = validate_plan(plan(item("a", ["a"], completion_criteria=[])))
    assert set(codes(report)) == {"CYCLE", "NO_COMPLETION_CRITERIA"}
    assert report.verdict is Verdict.REJECT


def test_validator_does_not_change_the_plan() -> None:
    p = plan(item("a", ["b"]), item("b", ["a"]), item("a"), item("c", ["zz"], risk_level="high"))
    before = p.model_dump(mode="json")
    copy = p.model_copy(deep=True)
    validate_plan(
        p,
        capabilities=[],
        budget=RemainingBudget(tool_calls=0),
        scope=Scope(in_scope=("x",), allowed_capabilities=()),
    )
    assert p == copy
    assert p.model_dump(mode="json") == before


def test_ten_thousand_items_chain_with_back_edge() -> None:
    n = 10_000
    items = [item("w0", [f"w{n - 1}"])] + [item(f"w{i}", [f"w{i - 1}"]) for i in range(1, n)]
    report = validate_plan(plan(*items))
    assert codes(report) == ["CYCLE"]
    assert report.issues[0].message.startswith("dependency cycle: w0 -> w9999 -> w9998")
    acyclic = plan(item("w0"), *items[1:])
    assert validate_plan(acyclic).verdict is Verdict.ACCEPT


def test_payment_migration_example_is_accepted() -> None:
    p = read_plan_file(EXAMPLES / "payment_migration.json")
    goal = GoalContract.model_validate(json.loads((EXAMPLES / "payment_migration.goal.json").read_text()))
    report = validate_plan(p, capabilities=PAYMENT_CAPABILITIES, budget=RemainingBudget(tool_calls=120), goal=goal)
    assert report.verdict is Verdict.ACCEPT, report.issues
    assert any(w.risk_level == "high" and w.approval_required for w in p.work_items)
    assert {m.milestone_id for m in p.milestones} == {"M1", "M2", "M3", "M4", "M5"}


def test_broken_example_reports_cycle_and_unknown_dependency() -> None:
    report = validate_plan(read_plan_file(EXAMPLES / "broken.json"))
    assert {"CYCLE", "UNKNOWN_DEPENDENCY"} <= set(codes(report))
    assert report.verdict is Verdict.REJECT


# -- the seed's node names ----------------------------------------------------------------------------------
SEED_NODE_NAMES = ["RULE", "MODEL", "TOOL", "VALIDATION", "HUMAN", "WAIT/TIMER", "WAIT", "TIMER", "COMPENSATION"]


@pytest.mark.parametrize("task_type", [*SEED_NODE_NAMES, "LOCAL_REACT", "VERIFICATION", "validation", "wait/timer"])
def test_the_seeds_node_names_are_task_types(task_type: str) -> None:
    loaded = plan(item("a", task_type=task_type, approval_required=True))
    expected = "WAIT" if task_type.upper() == "WAIT/TIMER" else task_type.upper()
    assert loaded.work_items[0].task_type.value == expected
    assert load_plan(loaded.to_document()) == loaded


def test_a_validation_item_in_a_ten_item_plan_is_accepted() -> None:
    items = [item(f"w{i}", [f"w{i - 1}"] if i else []) for i in range(9)]
    items.append(item("w9", ["w8"], task_type="VALIDATION"))
    report = validate_plan(plan(*items), capabilities=["search_code"])
    assert report.verdict is Verdict.ACCEPT


@pytest.mark.parametrize("task_type", ["HUMAN", "WAIT", "TIMER", "WAIT/TIMER"])
def test_an_item_decided_outside_the_run_must_stop_for_approval(task_type: str) -> None:
    report = validate_plan(plan(item("a", task_type=task_type)), capabilities=["search_code"])
    assert (report.verdict, codes(report)) == (Verdict.REVISE, ["MISSING_APPROVAL"])
    gated = validate_plan(plan(item("a", task_type=task_type, approval_required=True)), capabilities=["search_code"])
    assert gated.verdict is Verdict.ACCEPT


@pytest.mark.parametrize("task_type", ["VALIDATION", "COMPENSATION", "RULE", "MODEL"])
def test_items_the_worker_carries_out_need_no_approval(task_type: str) -> None:
    report = validate_plan(plan(item("a", task_type=task_type)), capabilities=["search_code"])
    assert report.verdict is Verdict.ACCEPT
