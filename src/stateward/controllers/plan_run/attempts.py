"""Ending a work item's attempt: its record, the ledger settled for what it spent, its loop state dropped."""

from __future__ import annotations

from typing import Any

from stateward.controllers.plan_run import facts as view
from stateward.controllers.plan_run.memo import PlanRunMemo
from stateward.core.events import EventType, NewEvent
from stateward.planning.patch import AttemptOutcome
from stateward.planning.plan import WorkItem


def end_attempt(
    memo: PlanRunMemo,
    item: WorkItem,
    outcome: AttemptOutcome,
    error: str | None,
    notes: list[NewEvent],
    partial: dict[str, Any] | None = None,
    verification: dict[str, Any] | None = None,
) -> None:
    """End the item's attempt with ``outcome``; ``verification``: how its accepted artifact passed."""
    run = memo.items[item.work_item_id]
    last = run.attempts[-1]
    run.attempts[-1] = last.model_copy(
        update={"outcome": outcome, "error_class": error, "tool_calls": tuple(run.calls)}
    )
    memo.ledger = memo.ledger.settle(item.work_item_id, view.spent(run))
    run.model_calls = run.tokens = 0
    # The attempt's loop state is spent: keeping it would make every later step rewrite it.
    run.tracker, run.steps, run.absorbed, run.calls = None, [], 0, []
    if error == "NO_PROGRESS":
        memo.no_progress_streak += 1
    memo.running = [w for w in memo.running if w != item.work_item_id]
    notes.append(
        NewEvent(
            type=EventType.WORK_ITEM_ENDED,
            payload={
                "work_item_id": item.work_item_id,
                "outcome": outcome.value,
                "error": error,
                "partial": partial,
                "output": run.output,
                **(verification or {}),
            },
        )
    )
