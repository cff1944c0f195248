from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from stateward import ModelRequest
from stateward.models import ScriptedModel
from stateward.models.recording import RecordingModel
from stateward_demos import blog_fixtures as fx
from stateward_demos.cli import app as demo_app
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


def _one_model(req: ModelRequest) -> Any:
    """The three scripted policies as one model, told apart by what is asked (decide / plan / content)."""
    policy = {"decide": fx.react_policy, "plan": fx.planner_policy}.get(req.purpose, fx.brief_writer_policy)
    return policy(req)


def test_with_a_model_the_same_comparison_is_driven_by_that_model(tmp_path: Path) -> None:
    # Record one model's answers to every request of the comparison, then run the CLI with --model replay:<it>:
    # every row (naive and correct) is driven by the replayed model. A request it was not recorded answering
    # would be a REPLAY_MISS, so matching rows show the model drove them all.
    recording = tmp_path / "one-model.jsonl"
    recorded = compare(tmp_path, model=RecordingModel(ScriptedModel(_one_model, name="one"), recording))
    assert [tuple(r[k] for k in KEYS) for r in recorded] == EXPECTED
    out = CliRunner().invoke(demo_app, ["stop-signal", "--model", f"replay:{recording}", "--json"])
    assert out.exit_code == 0, out.output
    assert [tuple(r[k] for k in KEYS) for r in json.loads(out.output)] == EXPECTED
    missing = tmp_path / "empty.jsonl"
    missing.write_text("")
    failed = CliRunner().invoke(demo_app, ["stop-signal", "--model", f"replay:{missing}", "--json"])
    assert failed.exit_code != 0 and "REPLAY_MISS" in failed.output


def test_the_refund_demo_says_it_uses_no_model_and_takes_no_model_option() -> None:
    cli = CliRunner()
    assert "No model is involved" in " ".join(cli.invoke(demo_app, ["refund", "--help"]).output.split())
    assert cli.invoke(demo_app, ["refund", "--model", "openai:x"]).exit_code != 0
