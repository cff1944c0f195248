"""The refund demo's table comes from real runs through the gateway and must match the issue."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from stateward_demos.cli import app as demo_app
from stateward_demos.refund import run_refund_scenarios

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


def test_the_command_prints_every_scenario_as_a_table_and_as_json() -> None:
    table = CliRunner().invoke(demo_app, ["refund"])
    assert table.exit_code == 0
    for scenario, *_ in EXPECTED:
        assert scenario in table.stdout
    assert "AWAIT_RECONCILIATION" in table.stdout and "null" in table.stdout
    as_json = CliRunner().invoke(demo_app, ["refund", "--json"])
    assert as_json.exit_code == 0
    assert [tuple(row[k] for k in KEYS) for row in json.loads(as_json.stdout)] == EXPECTED
