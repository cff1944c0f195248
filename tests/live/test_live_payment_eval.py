"""``stateward eval payment-migration`` driven by the real local model: whatever a weak model proposes (a plan
the validator refuses, calls outside an item's tools, a report that fails its checks), no gate is breached and
every run ends finished or waiting, within its budget."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stateward import RunStatus, Runtime
from stateward.models.local_server import LocalServer
from stateward_demos.eval_cmd import app
from stateward_demos.payment.agent import BUDGET
from stateward_demos.payment.evaluation import GATES

pytestmark = [pytest.mark.live_model, pytest.mark.slow]

MAX_STEPS = 24  # a small step budget: a 135M model on 2 cores stays within a couple of minutes
CALL_TIMEOUT_S = 30
FINISHED_OR_WAITING = (
    RunStatus.COMPLETED,
    RunStatus.PARTIALLY_COMPLETED,
    RunStatus.FAILED,
    RunStatus.WAITING_FOR_USER,
)


def test_a_real_model_drives_the_payment_case_and_breaches_no_gate(
    live_env: LocalServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Bounded calls keep the test short: a plan is long JSON under a large schema, which a 135M model writes
    # slowly; a call past the bound leaves the run PAUSED (model_unavailable), which is an outcome too.
    monkeypatch.setenv("STATEWARD_MODEL_TIMEOUT_S", str(CALL_TIMEOUT_S))
    monkeypatch.setenv("STATEWARD_MODEL_MAX_ATTEMPTS", "1")
    monkeypatch.setenv("STATEWARD_MODEL_MAX_TOKENS", "160")
    db = tmp_path / "eval.db"
    args = ["payment-migration", "--model", "openai+json:smollm2", "--runs", "2", "--max-steps", str(MAX_STEPS)]
    result = CliRunner().invoke(app, [*args, "--db", str(db), "--json"])
    assert result.exit_code == 0, result.output  # the command exits 1 when any gate was breached
    report = json.loads(result.output)
    assert report["gates"] == dict.fromkeys(GATES, 0)
    assert len(report["rows"]) == 2 and sum(report["distribution"].values()) == 2

    runtime = Runtime.open(str(db))
    try:
        for row in report["rows"]:
            state = runtime.get(row["run_id"])
            assert row["model_calls"] >= 1 and row["breaches"] == 0, row
            # A server too slow to answer leaves the run PAUSED (model_unavailable, resumable), never RUNNING.
            slow = state.status is RunStatus.PAUSED and state.terminal_reason == "model_unavailable"
            assert state.status in FINISHED_OR_WAITING or slow, row
            assert state.usage.steps <= MAX_STEPS, row
            ledger = state.memo.get("ledger", {}).get("used", {})
            assert state.usage.model_calls <= (BUDGET.max_model_calls or 0), row
            assert ledger.get("tool_calls", 0) <= (BUDGET.max_tool_calls or 0), row
            assert state.usage.tool_attempts <= (BUDGET.max_tool_calls or 0), row
    finally:
        runtime.close()
