"""A plan run's memo in and out of the run's state (MemoSeals): the plan and each work item's record sealed,
the same documents while they stay the same, a new one as soon as one changes, in place or not."""

from __future__ import annotations

from typing import Any

from stateward.controllers.plan_run.memo import ItemRun, MemoSeals, PlanRunMemo
from stateward.core.sealed import Sealed
from stateward.planning.patch import AttemptFact, AttemptOutcome
from stateward.planning.plan import Plan


def plan(version: int = 1) -> Plan:
    items = [
        {
            "work_item_id": wid,
            "milestone_id": "M1",
            "title": f"item {wid}",
            "task_type": "LOCAL_REACT",
            "output_spec": {"artifact_type": f"out_{wid}"},
        }
        for wid in ("W1", "W2", "W3")
    ]
    doc = {"plan_id": "p1", "version": version, "goal_id": "g1", "milestones": [{"milestone_id": "M1", "title": "all"}]}
    return Plan.model_validate({**doc, "work_items": items})


def stored_memo() -> dict[str, Any]:
    """A memo as earlier versions kept it, and as every store returns it: plain data."""
    memo = PlanRunMemo(
        plan=plan(),
        items={
            "W1": ItemRun(attempts=[AttemptFact(outcome=AttemptOutcome.COMPLETED)], output="out_W1:v1"),
            "W2": ItemRun(attempts=[AttemptFact(outcome=AttemptOutcome.RUNNING)], steps=[4, 5]),
        },
        running=["W2"],
        verified=["W1"],
    )
    return memo.model_dump(mode="json")


def test_a_memo_of_the_earlier_shape_reads_and_writes_the_same_memo() -> None:
    seals = MemoSeals()
    stored = stored_memo()
    written = seals.write(seals.read(stored))
    assert written == stored and list(written) == list(stored)
    assert type(written["plan"]) is Sealed and all(type(r) is Sealed for r in written["items"].values())
    assert seals.read(written).model_dump() == seals.read(stored).model_dump()  # sealed reads as plain


def test_unchanged_parts_are_the_same_documents_step_after_step() -> None:
    seals = MemoSeals()
    first = seals.write(seals.read(stored_memo()))
    memo = seals.read(first)
    memo.turn += 1
    second = seals.write(memo)
    assert second["plan"] is first["plan"] and second["items"]["W1"] is first["items"]["W1"]
    assert second["turn"] == first["turn"] + 1


def test_a_record_changed_in_place_is_a_new_document_and_never_lost() -> None:
    seals = MemoSeals()
    first = seals.write(seals.read(stored_memo()))
    memo = seals.read(first)
    memo.items["W2"].steps.append(6)  # the controller changes the record where it lies
    memo.items["W3"] = ItemRun()
    second = seals.write(memo)
    assert second["items"]["W2"] is not first["items"]["W2"] and second["items"]["W2"]["steps"] == [4, 5, 6]
    assert second["items"]["W1"] is first["items"]["W1"] and second["items"]["W3"] == ItemRun().model_dump()
    assert seals.read(second).items["W2"].steps == [4, 5, 6]
    assert first["items"]["W2"]["steps"] == [4, 5]  # the earlier document still says what it said


def test_a_new_plan_is_a_new_document() -> None:
    seals = MemoSeals()
    first = seals.write(seals.read(stored_memo()))
    memo = seals.read(first)
    assert memo.plan is seals.read(first).plan  # read once per document: the plan is immutable
    memo.plan = plan(version=2)
    second = seals.write(memo)
    assert second["plan"] is not first["plan"] and second["plan"]["version"] == 2
    assert seals.read(second).plan == plan(version=2)
    fresh = MemoSeals()  # another process (or a forgotten document) reads the same memo from the text
    assert fresh.read(second) == seals.read(second)
