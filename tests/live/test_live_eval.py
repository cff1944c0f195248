"""``stateward eval stop-signal`` against the real local model: every run ends in a named outcome, and
the Runtime never continues past a refused decision."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stateward.core.events import EventType
from stateward.models.local_server import LocalServer
from stateward.runtime.runtime import Runtime
from stateward_demos.blog import MODES
from stateward_demos.eval_cmd import app
from stateward_demos.live_eval import run_live_eval

pytestmark = [pytest.mark.live_model, pytest.mark.slow]

# A model server too slow to answer in time leaves the run PAUSED / model_unavailable (resumable), never FAILED.
KNOWN = ("wait_suspended", "budget_exhausted", "completed", "rejected_signal:", "model_unavailable")


def test_eval_runs_every_controller_to_a_named_outcome(live_env: LocalServer, tmp_path: Path) -> None:
    db = tmp_path / "eval.db"
    report = run_live_eval("openai+json:smollm2", 1, db, max_steps=4)

    assert [r["mode"] for r in report["rows"]] == list(MODES)
    for row in report["rows"]:
        assert row["model_calls"] >= 1, row
        assert row["outcome"].startswith(KNOWN) or row["status"] == "FAILED", row
        if row["outcome"] == "model_unavailable":
            assert row["status"] == "PAUSED", row
        if row["outcome"].startswith("rejected_signal:"):
            assert row["rejection_code"] and row["status"] == "FAILED"
        assert row["suspended"] == (row["outcome"] == "wait_suspended")
    assert report["integrity"]["continued_after_rejection"] == 0
    assert report["integrity"]["suspended_with_calls_after_wait"] == 0

    runtime = Runtime.open(str(db))
    try:
        for row in report["rows"]:
            events = runtime.store.read_events(row["run_id"])
            assert events[-1].type in (EventType.RUN_EXITED, EventType.BUDGET_EXHAUSTED)
            if row["rejection_code"]:
                tail = [e.type for e in events[-2:]]
                assert tail == [EventType.STATE_TRANSITION, EventType.RUN_EXITED]
    finally:
        runtime.close()


def test_eval_command_prints_json(live_env: LocalServer) -> None:
    args = ["stop-signal", "--model", "openai+json:smollm2", "--runs", "1", "--controllers", "workflow", "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert set(report["distribution"]) == {"workflow"}
    assert sum(report["distribution"]["workflow"].values()) == 1
    assert report["rows"][0]["model_calls"] >= 1
