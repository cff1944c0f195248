"""The workflow and plan-and-execute memos are typed, and a stored memo reads back as the same dict.

A run's memo is part of its stored snapshot: a typed memo must write exactly the entries (and their
order) the stored snapshots of earlier versions hold, or a resumed run would see another state.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from stateward.controllers.plan_execute import PlanExecuteMemo, StepPlan
from stateward.controllers.workflow import WorkflowMemo

WORKFLOW_MEMOS: list[dict[str, Any]] = [
    {},
    {"node": None},
    {"node": "draft", "awaiting": "draft", "calls": {}},
    {"node": "fetch", "acted": {"node": "fetch", "step": 3}, "calls": {"fetch": 2}},
    {"node": "explore", "react": {"node": "explore", "steps": [4, 5]}, "calls": {"fetch": 1}},
]


@pytest.mark.parametrize("stored", WORKFLOW_MEMOS)
def test_a_stored_workflow_memo_reads_back_unchanged(stored: dict[str, Any]) -> None:
    dumped = WorkflowMemo.of(stored).dump()
    assert dumped == stored
    assert list(dumped) == list(stored)


def test_a_workflow_memo_tells_no_node_yet_from_no_node_left() -> None:
    assert WorkflowMemo.of({}).node_or("start") == "start"
    assert WorkflowMemo.of({"node": None}).node_or("start") is None
    assert WorkflowMemo.of({"node": "b"}).node_or("start") == "b"


def test_a_workflow_memo_with_an_unknown_entry_is_refused() -> None:
    with pytest.raises(ValidationError):
        WorkflowMemo.of({"node": "a", "nodes": "typo"})


def test_a_stored_plan_and_execute_memo_reads_back_unchanged() -> None:
    stored = {
        "plan": {
            "steps": [
                {"kind": "tool", "action": "read", "args": {"id": 1}},
                {"kind": "await_approval", "question": "ok?"},
                {"kind": "finish", "reason": "plan complete"},
            ]
        },
        "cursor": 2,
        "planned_after": "approval_001",
        "plan_version": 2,
    }
    memo = PlanExecuteMemo.model_validate(stored)
    assert memo.dump() == stored and list(memo.dump()) == list(stored)
    assert memo.model_copy(update={"cursor": 3}).dump() == {**stored, "cursor": 3}
    assert PlanExecuteMemo.model_validate({}).dump() == {}


def test_a_new_plan_is_stored_whole_defaults_included() -> None:
    """As before the memo was typed: the plan's JSON with every field, so a later version's defaults do
    not change what a stored plan says."""
    plan = StepPlan.model_validate({"steps": [{"kind": "tool", "action": "read"}, {"kind": "finish"}]})
    memo = PlanExecuteMemo(plan=plan, cursor=0, planned_after=None, plan_version=1)
    assert memo.dump()["plan"] == {
        "steps": [{"kind": "tool", "action": "read", "args": {}}, {"kind": "finish", "reason": "plan complete"}]
    }
