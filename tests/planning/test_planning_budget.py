"""Budget ledger: reserve before work, settle after, never reset by a resume."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from stateward.planning import (
    BudgetAmount,
    BudgetError,
    BudgetLedger,
    BudgetLimits,
    EstimatedCost,
    ExecutionFacts,
    WorkItemState,
    derive_states,
    load_plan,
)

# The reference budget document (section 12.1).
REFERENCE = {
    "max_elapsed_seconds": 2700,
    "max_tool_calls": 120,
    "max_model_calls": 35,
    "max_tokens": 180000,
    "max_total_attempts": 80,
    "max_replans": 2,
    "max_reflections_per_artifact": 1,
}


def ledger(**limits: float) -> BudgetLedger:
    return BudgetLedger(limits=BudgetLimits.model_validate(limits or REFERENCE))


def test_reference_budget_document_loads_as_limits() -> None:
    limits = BudgetLimits.model_validate(REFERENCE)
    assert (limits.max_tool_calls, limits.max_total_attempts, limits.max_reflections_per_artifact) == (120, 80, 1)
    assert limits.max_cost is None


def test_an_item_estimated_at_8_tool_calls_does_not_start_with_2_left() -> None:
    led = ledger().charge(BudgetAmount(tool_calls=118))
    with pytest.raises(BudgetError) as err:
        led.reserve("W07", BudgetAmount(tool_calls=8))
    assert err.value.code == "BUDGET_EXCEEDED"
    assert err.value.details["shortfalls"] == [{"dimension": "tool_calls", "needed": 8, "available": 2}]
    assert led.reserve("W08", BudgetAmount(tool_calls=2)).remaining().tool_calls == 0


def test_reservations_count_against_later_reservations() -> None:
    led = ledger(max_tool_calls=10).reserve("A", BudgetAmount(tool_calls=6))
    with pytest.raises(BudgetError):
        led.reserve("B", BudgetAmount(tool_calls=5))
    assert led.remaining().tool_calls == 4
    assert led.used.tool_calls == 0


@pytest.mark.parametrize(
    ("limit", "need"),
    [
        ({"max_tool_calls": 3}, BudgetAmount(tool_calls=4)),
        ({"max_model_calls": 3}, BudgetAmount(model_calls=4)),
        ({"max_tokens": 1000}, BudgetAmount(tokens=1001)),
        ({"max_elapsed_seconds": 60}, BudgetAmount(elapsed_seconds=60.5)),
        ({"max_total_attempts": 2}, BudgetAmount(attempts=3)),
        ({"max_replans": 2}, BudgetAmount(replans=3)),
        ({"max_cost": 1.5}, BudgetAmount(cost=1.75)),
    ],
)
def test_every_dimension_is_enforced(limit: dict[str, float], need: BudgetAmount) -> None:
    with pytest.raises(BudgetError) as err:
        ledger(**limit).reserve("W", need)
    assert err.value.code == "BUDGET_EXCEEDED"


def test_unlimited_dimensions_never_refuse() -> None:
    led = ledger(max_tool_calls=5).reserve("W", BudgetAmount(tokens=10**9, model_calls=10**6))
    assert led.remaining().tokens is None


def test_settle_moves_the_reservation_to_used_at_the_actual_amount() -> None:
    led = ledger(max_tool_calls=10).reserve("A", BudgetAmount(tool_calls=8))
    below = led.settle("A", BudgetAmount(tool_calls=3))
    assert (below.used.tool_calls, below.reserved, below.remaining().tool_calls) == (3, {}, 7)
    above = led.settle("A", BudgetAmount(tool_calls=12))  # facts are recorded even past the limit
    assert above.used.tool_calls == 12
    assert above.overrun() == ["tool_calls"] and above.exhausted() == ["tool_calls"]
    with pytest.raises(BudgetError):
        above.reserve("B", BudgetAmount(tool_calls=1))


def test_release_gives_the_reservation_back() -> None:
    led = ledger(max_tool_calls=10).reserve("A", BudgetAmount(tool_calls=8)).release("A")
    assert led.remaining().tool_calls == 10 and led.used == BudgetAmount()


def test_ledger_is_immutable() -> None:
    led = ledger(max_tool_calls=10)
    led.reserve("A", BudgetAmount(tool_calls=8))
    assert led.reserved == {} and led.remaining().tool_calls == 10


@pytest.mark.parametrize(
    ("op", "code"),
    [
        (lambda led: led.reserve("A", BudgetAmount()), "RESERVATION_EXISTS"),
        (lambda led: led.settle("nope", BudgetAmount()), "UNKNOWN_RESERVATION"),
        (lambda led: led.release("nope"), "UNKNOWN_RESERVATION"),
    ],
)
def test_reservation_misuse_is_named(op: Callable[[BudgetLedger], object], code: str) -> None:
    led = ledger().reserve("A", BudgetAmount(tool_calls=1))
    with pytest.raises(BudgetError) as err:
        op(led)
    assert err.value.code == code


def test_reflections_are_counted_per_artifact() -> None:
    led = ledger().record_reflection("risk-matrix")
    assert led.reflections_left("risk-matrix") == 0
    with pytest.raises(BudgetError) as err:
        led.record_reflection("risk-matrix")
    assert err.value.code == "BUDGET_EXCEEDED"
    assert led.record_reflection("migration-assessment").reflections == {"risk-matrix": 1, "migration-assessment": 1}


def test_a_resume_restores_the_stored_ledger_and_never_lowers_what_was_spent() -> None:
    stored = ledger().charge(BudgetAmount(tool_calls=40, model_calls=9)).record_reflection("risk-matrix")
    fresh = ledger()  # a new process builds a ledger from the agent's configuration
    restored = fresh.restore_from(BudgetLedger.model_validate_json(stored.model_dump_json()))
    assert restored == stored
    with pytest.raises(BudgetError) as err:
        restored.restore_from(ledger().charge(BudgetAmount(tool_calls=39, model_calls=9)))
    assert err.value.code == "BUDGET_RESET_REFUSED"
    assert err.value.details["dimensions"] == ["tool_calls", "reflections[risk-matrix]"]


def test_resets_counter_only_grows_and_a_snapshot_with_fewer_resets_is_refused() -> None:
    led = ledger().with_refused_reset()
    assert led.resets == 1
    with pytest.raises(BudgetError) as err:
        led.restore_from(ledger())
    assert err.value.code == "BUDGET_RESET_REFUSED" and err.value.details["dimensions"] == ["resets"]


def test_granting_more_budget_keeps_what_was_spent() -> None:
    led = ledger(max_tool_calls=10).charge(BudgetAmount(tool_calls=10))
    more = led.raise_limits(BudgetLimits(max_tool_calls=30))
    assert more.used.tool_calls == 10 and more.remaining().tool_calls == 20


def test_remaining_budget_blocks_plan_items_that_do_not_fit() -> None:
    plan = load_plan(
        {
            "plan_id": "p",
            "version": 1,
            "goal_id": "g",
            "milestones": [{"milestone_id": "M3", "title": "code analysis"}],
            "work_items": [
                {
                    "work_item_id": "W10",
                    "milestone_id": "M3",
                    "title": "find wrapper classes",
                    "task_type": "LOCAL_REACT",
                    "output_spec": {"artifact_type": "call-sites"},
                    "estimated_cost": {"tool_calls": 8},
                }
            ],
        }
    )
    led = ledger().charge(BudgetAmount(tool_calls=118))
    facts = ExecutionFacts(remaining_budget=led.remaining().to_plan_budget())
    assert derive_states(plan, facts)["W10"] is WorkItemState.BLOCKED
    assert BudgetAmount.from_estimate(EstimatedCost(tool_calls=8)) == BudgetAmount(tool_calls=8, attempts=1)
