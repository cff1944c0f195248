"""The refund demo's table comes from real runs through the gateway and must match the issue."""

from __future__ import annotations

import json

from rich.console import Console

from stateward.demos.refund import render_table, rows_as_json, run_refund_scenarios

EXPECTED = [
    ("unknown_tool", "UNKNOWN_TOOL", None, "REJECT", "REJECTED", 0),
    ("tool_unavailable", "TOOL_UNAVAILABLE", None, "REJECT", "REJECTED", 0),
    ("missing_argument", "INVALID_ARGUMENT", None, "REJECT", "REJECTED", 0),
    ("normal", None, "SUCCEEDED", "EXECUTE", "SUCCESS", 1),
    ("timeout_already_succeeded", "TIMEOUT", "SUCCEEDED", "REPLAY_SUCCESS", "SUCCESS", 1),
    ("timeout_not_executed", "TIMEOUT", "NOT_EXECUTED", "RETRY_ONCE", "SUCCESS", 1),
    ("timeout_unknown", "TIMEOUT", "UNKNOWN", "AWAIT_RECONCILIATION", "PENDING_VERIFICATION", 1),
]
KEYS = ("scenario", "error_code", "idempotency_status", "runtime_action", "final", "handler_execution_count")


def test_rows_match_the_expected_table() -> None:
    rows = run_refund_scenarios(timeout_s=0.05)
    assert rows == [dict(zip(KEYS, row, strict=True)) for row in EXPECTED]
    assert json.loads(rows_as_json(rows)) == rows

    console = Console(record=True, width=200)
    console.print(render_table(rows))
    text = console.export_text()
    assert "timeout_not_executed" in text and "AWAIT_RECONCILIATION" in text and "null" in text
