"""The payment demo's final summary, as checked from outside: the source's final state, read from the store.

Every figure is read back from an artifact the run recorded; the completion mode and the rung are what the
controller concluded from verified outputs and the goal's success criteria.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stateward import RunStatus, Runtime
from stateward_demos.cli import app as demo_app
from stateward_demos.payment import tools as payment_tools
from stateward_demos.payment.agent import build_agent, goal, summary

V2 = "migration-assessment:v2"
FIELDS = {
    "status",
    "completion_mode",
    "plan_version",
    "coverage",
    "breaking_changes",
    "call_sites",
    "risk",
    "report_versions",
    "final_artifact",
    "unresolved_issues",
    "pending",
    "stages",
    "stage",
}
START = datetime(2030, 1, 1, tzinfo=UTC)
SOURCE_STAGES = ["INTAKE", "PLAN", "VALIDATE_PLAN", "EXECUTE", "VERIFY", "HUMAN_APPROVAL", "DELIVER"]


@pytest.fixture(autouse=True)
def delivery_log(monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, str]]:
    log: dict[str, dict[str, str]] = {}
    monkeypatch.setattr(payment_tools, "DELIVERY_LOG", log)
    return log


def test_the_cli_prints_the_sources_final_summary(tmp_path: Path) -> None:
    cli = CliRunner()
    db = str(tmp_path / "s.db")
    waiting = json.loads(cli.invoke(demo_app, ["payment-migration", "--db", db, "--json"]).output)
    assert set(waiting) >= FIELDS
    assert waiting["status"] == "WAITING_FOR_USER" and waiting["completion_mode"] is None
    assert waiting["pending"]["kind"] == "approval"
    assert waiting["stage"] == "HUMAN_APPROVAL" and waiting["stages"] == SOURCE_STAGES[:-1]
    assert waiting["pending"]["action"] == {"tool": "deliver_report", "args": {"report_ref": V2}}

    done = json.loads(cli.invoke(demo_app, ["payment-migration", "--db", db, "--json", "--approve"]).output)
    assert done["status"] == "COMPLETED" and done["pending"] is None
    assert done["stages"] == SOURCE_STAGES and done["stage"] == "DELIVER"  # the source's global stages, in order
    # The source ends COMPLETED / DEGRADED: everything verified, one repository could not be read.
    assert (done["completion_mode"], done["rung"]) == ("DEGRADED", "REPORT_WITH_GAPS")
    assert done["plan_version"] == 2  # patched once the inventory showed billing-worker unreadable
    assert done["coverage"] == {"expected": 12, "accessible": 11, "analysed": 11}
    assert (done["breaking_changes"], done["call_sites"], done["risk"]) == (8, 37, {"high": 3, "medium": 5})
    assert done["report_versions"] == ["migration-assessment:v1", V2] and done["final_artifact"] == V2
    [issue] = done["unresolved_issues"]
    assert issue.startswith("billing-worker: no access")
    text = cli.invoke(demo_app, ["payment-migration", "--db", db, "--approve"]).output
    assert "completion_mode DEGRADED" in text and "billing-worker" in text and V2 in text


def test_a_token_budget_is_charged_and_stops_the_run_with_a_budget_estimate(runtime: Runtime) -> None:
    # The plan estimates 90,000 tokens for its model items; the scripted run needs ~102,000 with its planner
    # calls. The run must count every token, stop before going past the limit, deliver only verified facts, and
    # say what continuing would cost.
    state = runtime.start(build_agent(budget={"max_tokens": 96_000}), goal().objective)
    out = summary(runtime, state)
    used = state.memo["ledger"]["used"]
    assert state.status is RunStatus.PARTIALLY_COMPLETED
    assert 0 < used["tokens"] <= 96_000 and used["tokens"] == state.usage.input_tokens + state.usage.output_tokens
    assert (out["completion_mode"], out["rung"]) == ("DEGRADED", "FACTS_AND_RISK_CANDIDATES")
    assert out["report_versions"] == [] and out["final_artifact"] == "partial-delivery:v1"
    assert out["budget_to_continue"]["tokens"] > 96_000 - used["tokens"]
    delivered = runtime.store.get_artifact(state.run_id, "partial-delivery")
    assert delivered is not None
    partial = json.loads(delivered.content)
    assert partial["reason_code"] == "BUDGET_EXHAUSTED" and partial["missing_scope"]
    assert any(n.startswith("budget to continue:") for n in partial["needed_to_continue"])


class _Overrun:
    """The world's clock: every reading after the first is 46 minutes later (the goal allows 45)."""

    def __init__(self) -> None:
        self.readings = 0

    def __call__(self) -> datetime:
        self.readings += 1
        return START + (timedelta(0) if self.readings == 1 else timedelta(minutes=46))


def test_a_run_with_nothing_confirmed_and_nothing_safe_to_deliver_fails_safely(runtime: Runtime) -> None:
    # The ladder's lowest rung: the deadline (a hard constraint that blocks) is gone before any fact is confirmed,
    # so nothing is verified, nothing may be delivered, and nothing is - the run fails with SAFE_FAILURE.
    state = runtime.start(build_agent(clock=_Overrun()), goal().objective)
    out = summary(runtime, state)
    assert (state.status, state.terminal_reason) == (RunStatus.FAILED, "hard_constraint_violated")
    assert (out["rung"], out["completion_mode"]) == ("SAFE_FAILURE", "NONE")
    assert state.memo["verified"] == [] and out["final_artifact"] is None
    assert out["artifacts"] == [] and out["delivery_receipt"] is None and out["report_versions"] == []
    assert "DELIVER" not in out["stages"]
