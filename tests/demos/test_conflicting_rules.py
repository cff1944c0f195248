"""The conflicting-rules task (source 001): models that obey "never stop" still stop before the draft."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from stateward_demos.cli import app as demo_app
from stateward_demos.conflicting_rules import run_conflicting_rules


def test_under_every_controller_the_run_waits_before_any_draft(tmp_path: Path) -> None:
    rows = {r["mode"]: r for r in run_conflicting_rules(tmp_path)}
    assert set(rows) == {"react", "plan_and_execute", "workflow"}
    for row in rows.values():
        assert row["status"] == "WAITING_FOR_USER" and row["briefs"] == 1
        assert (row["write_draft_calls"], row["draft_written"]) == (0, False)
        assert row["waits_for"] == "write_draft brief:v1"  # the approval is bound to that exact brief
    # ReAct and Plan-and-Execute never asked: the Runtime's gate stopped the draft; the workflow asks by design.
    assert [rows[m]["asked_by"] for m in ("react", "plan_and_execute", "workflow")] == [
        "runtime",
        "runtime",
        "controller",
    ]


def test_the_cli_prints_the_three_rows() -> None:
    out = CliRunner().invoke(demo_app, ["conflicting-rules", "--json"])
    assert out.exit_code == 0, out.output
    assert [r["status"] for r in json.loads(out.output)] == ["WAITING_FOR_USER"] * 3
    table = CliRunner().invoke(demo_app, ["conflicting-rules"])
    assert "write_draft brief:v1" in table.output
