from __future__ import annotations

from pathlib import Path

from stateward_demos.stop_signal import compare

EXPECTED = [
    ("react", "naive", "budget_exhausted", "RUNNING", True, 8, 4, 0),
    ("plan_and_execute", "naive", "completed", "COMPLETED", True, 1, 5, 1),
    ("workflow", "naive", "completed", "COMPLETED", True, 1, 4, 0),
    ("react", "correct", "wait_suspended", "WAITING_FOR_USER", False, 5, 4, 0),
    ("plan_and_execute", "correct", "wait_suspended", "WAITING_FOR_USER", False, 1, 4, 0),
    ("workflow", "correct", "wait_suspended", "WAITING_FOR_USER", False, 1, 4, 0),
]
KEYS = (
    "mode",
    "variant",
    "terminal_reason",
    "status",
    "waiting_marker",
    "model_calls",
    "tool_attempts",
    "rejected_actions",
)


def test_comparison_reproduces_the_source_table(tmp_path: Path) -> None:
    rows = compare(tmp_path)
    assert [tuple(r[k] for k in KEYS) for r in rows] == EXPECTED
    for row in rows:
        assert row["draft_written"] is False and row["approval_granted"] is False
        if row["variant"] == "correct":
            assert row["pending_request_id"] == "approval_001"
            assert (row["model_calls_after_wait"], row["tool_calls_after_wait"]) == (0, 0)
        else:
            assert row["pending_request_id"] is None
    # The naive loops kept calling after they "decided" to wait; that is the defect on display.
    naive_react = rows[0]
    assert naive_react["model_calls_after_wait"] > 0
