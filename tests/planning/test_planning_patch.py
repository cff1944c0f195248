"""Plan patches: version + 1 or a named refusal; work-item states come from facts only."""

from __future__ import annotations

from typing import Any

import pytest

from stateward.planning import (
    AttemptFact,
    AttemptOutcome,
    ExecutionFacts,
    Plan,
    PlanPatch,
    PlanPatchError,
    RemainingBudget,
    WorkItemState,
    apply_patch,
    derive_states,
    load_patch,
    load_plan,
    ready_items,
)

S = WorkItemState


def item(wid: str, deps: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "work_item_id": wid,
        "milestone_id": "M1",
        "title": wid,
        "task_type": "TOOL",
        "dependencies": deps or [],
        "output_spec": {"artifact_type": wid},
        "completion_criteria": ["done"],
        "retry_policy": {"max_attempts": 3, "retryable_errors": ["TIMEOUT"]},
        "estimated_cost": {"tool_calls": 2},
        **extra,
    }


def make_plan(*items: dict[str, Any], version: int = 1) -> Plan:
    return load_plan(
        {
            "plan_id": "p",
            "version": version,
            "goal_id": "g",
            "milestones": [{"milestone_id": "M1", "title": "m"}],
            "work_items": list(items),
        }
    )


PLAN = make_plan(item("W01"), item("W02", ["W01"]), item("W03", ["W02"]))


def patch(**fields: Any) -> PlanPatch:
    base: dict[str, Any] = {"base_version": 1, "reason": "FACTS_CHANGED", "evidence_ids": ["ev-1"]}
    return load_patch({**base, **fields})


def test_patch_creates_next_version_and_keeps_completed_work() -> None:
    new_w03 = item("W03", ["W02", "W04"], title="re-scoped")
    p = patch(
        added_items=[item("W04", ["W01"])],
        changed_items=[new_w03],
        kept_completed=["W01"],
        added_milestones=[{"milestone_id": "M2", "title": "extra"}],
    )
    new = apply_patch(PLAN, p, succeeded={"W01"}, replans_used=0, max_replans=3)
    assert new.version == 2
    assert [w.work_item_id for w in new.work_items] == ["W01", "W02", "W03", "W04"]
    assert new.item("W01") == PLAN.item("W01")
    assert new.item("W03").title == "re-scoped"  # type: ignore[union-attr]
    assert [m.milestone_id for m in new.milestones] == ["M1", "M2"]
    assert PLAN.version == 1 and len(PLAN.work_items) == 3  # old version untouched


def test_removing_a_pending_item() -> None:
    new = apply_patch(PLAN, patch(removed_items=["W03"]), succeeded=set(), replans_used=0, max_replans=1)
    assert [w.work_item_id for w in new.work_items] == ["W01", "W02"]


def test_stale_base_version_is_refused() -> None:
    v2 = make_plan(item("W01"), version=2)
    with pytest.raises(PlanPatchError) as info:
        apply_patch(v2, patch(base_version=1), succeeded=set(), replans_used=0, max_replans=3)
    assert info.value.code == "STALE_PLAN_VERSION"


@pytest.mark.parametrize(
    "fields",
    [
        {"changed_items": [item("W01", title="redo")], "kept_completed": ["W01"]},
        {"removed_items": ["W01"]},
        {"added_items": [item("W09")]},  # W01 not listed as kept
    ],
)
def test_succeeded_items_cannot_be_discarded(fields: dict[str, Any]) -> None:
    with pytest.raises(PlanPatchError) as info:
        apply_patch(PLAN, patch(**fields), succeeded={"W01"}, replans_used=0, max_replans=3)
    assert info.value.code == "SUCCEEDED_ITEM_DISCARDED"
    assert "W01" in info.value.message


def test_replan_limit() -> None:
    with pytest.raises(PlanPatchError) as info:
        apply_patch(PLAN, patch(), succeeded=set(), replans_used=2, max_replans=2)
    assert info.value.code == "REPLAN_LIMIT"


@pytest.mark.parametrize(
    "fields",
    [
        {"added_items": [item("W02")]},
        {"changed_items": [item("W77")]},
        {"removed_items": ["W77"]},
        {"removed_items": ["W02"], "changed_items": [item("W02")]},
        {"kept_completed": ["W02"]},  # claims W02 completed; facts say it did not
        {"added_milestones": [{"milestone_id": "M1", "title": "again"}]},
    ],
)
def test_inconsistent_patches_are_refused(fields: dict[str, Any]) -> None:
    with pytest.raises(PlanPatchError) as info:
        apply_patch(PLAN, patch(**fields), succeeded=set(), replans_used=0, max_replans=3)
    assert info.value.code == "INVALID_PLAN_PATCH"


@pytest.mark.parametrize("reason", ["TIMEOUT", "TRANSIENT_FAILURE", "RATE_LIMITED", ""])
def test_transient_failures_are_not_a_reason_to_replan(reason: str) -> None:
    with pytest.raises(PlanPatchError) as info:
        load_patch({"base_version": 1, "reason": reason, "evidence_ids": ["e"]})
    assert info.value.code == "INVALID_PLAN_PATCH"
    assert info.value.details["errors"][0]["loc"] == "reason"


def test_patch_needs_evidence() -> None:
    with pytest.raises(PlanPatchError) as info:
        load_patch({"base_version": 1, "reason": "SCOPE_CHANGED", "evidence_ids": []})
    assert info.value.details["errors"][0]["loc"] == "evidence_ids"


# --------------------------------------------------------------------------- states from facts


def attempts(*outcomes: tuple[str, str | None]) -> tuple[AttemptFact, ...]:
    return tuple(AttemptFact(outcome=AttemptOutcome(o), error_class=e) for o, e in outcomes)


def test_initial_states() -> None:
    assert derive_states(PLAN, ExecutionFacts()) == {"W01": S.READY, "W02": S.PENDING, "W03": S.PENDING}
    assert ready_items(PLAN, ExecutionFacts()) == ["W01"]


def test_a_models_done_is_not_success() -> None:
    facts = ExecutionFacts(attempts={"W01": attempts(("COMPLETED", None))})
    assert derive_states(PLAN, facts)["W01"] is S.RUNNING
    assert ready_items(PLAN, facts) == []
    verified = ExecutionFacts(attempts=facts.attempts, verified=("W01",))
    assert derive_states(PLAN, verified)["W01"] is S.SUCCEEDED
    assert ready_items(PLAN, verified) == ["W02"]


def test_retry_then_failure_blocks_dependents() -> None:
    once = ExecutionFacts(attempts={"W01": attempts(("FAILED", "TIMEOUT"))})
    assert derive_states(PLAN, once)["W01"] is S.RETRY_WAIT
    non_retryable = ExecutionFacts(attempts={"W01": attempts(("FAILED", "INVALID_ARGUMENT"))})
    assert derive_states(PLAN, non_retryable)["W01"] is S.FAILED
    exhausted = ExecutionFacts(attempts={"W01": attempts(*[("FAILED", "TIMEOUT")] * 3)})
    states = derive_states(PLAN, exhausted)
    assert states == {"W01": S.FAILED, "W02": S.BLOCKED, "W03": S.BLOCKED}


def test_approval_cancel_budget_and_bad_graphs() -> None:
    plan = make_plan(
        item("A"),
        item("B", ["A"], approval_required=True, risk_level="high"),
        item("C"),
        item("D", ["zzz"]),
        item("E", ["F"]),
        item("F", ["E"]),
        item("G", ["E"]),
    )
    facts = ExecutionFacts(verified=("A",), cancelled=("C",))
    states = derive_states(plan, facts)
    assert states["B"] is S.WAITING_FOR_APPROVAL
    assert states["C"] is S.CANCELLED
    assert states["D"] is S.BLOCKED  # unknown dependency
    assert states["E"] is S.BLOCKED and states["F"] is S.BLOCKED and states["G"] is S.BLOCKED  # cycle
    approved = ExecutionFacts(verified=("A",), approved=("B",))
    assert ready_items(plan, approved) == ["B", "C"]
    broke = ExecutionFacts(verified=("A",), approved=("B",), remaining_budget=RemainingBudget(tool_calls=1))
    assert derive_states(plan, broke)["B"] is S.BLOCKED


def test_running_item() -> None:
    facts = ExecutionFacts(attempts={"W01": attempts(("FAILED", "TIMEOUT"), ("RUNNING", None))})
    assert derive_states(PLAN, facts)["W01"] is S.RUNNING
