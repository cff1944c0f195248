"""The payment case under each of its faults: the outcome the source expects, read back from the store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stateward import EventType, Runtime
from stateward_demos.cli import app as demo_app
from stateward_demos.payment import tools as payment_tools
from stateward_demos.payment.fault_runs import run_fault
from stateward_demos.payment.faults import Fault


@pytest.fixture(autouse=True)
def delivery_log(monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, str]]:
    log: dict[str, dict[str, str]] = {}
    monkeypatch.setattr(payment_tools, "DELIVERY_LOG", log)
    return log


def test_document_search_timing_out_falls_back_to_the_audited_cache_then_hands_off(tmp_path: Path) -> None:
    row = run_fault(Fault.DOC_SEARCH_TIMEOUT, tmp_path)
    assert row["as_expected"], row["observed"]
    assert row["status"] == "WAITING_FOR_USER" and row["summary"]["pending"]["kind"] == "handoff"
    assert "audited cache tried 2x" in row["observed"] and "DEPENDENCY_UNAVAILABLE" in row["observed"]


def test_conflicting_authorities_hand_off(tmp_path: Path) -> None:
    row = run_fault(Fault.AUTHORITY_CONFLICT, tmp_path)
    assert row["as_expected"], row["observed"]
    assert row["summary"]["report_versions"] == []  # nothing is concluded over the conflict


def test_a_budget_running_out_delivers_confirmed_facts_and_an_estimate(tmp_path: Path) -> None:
    row = run_fault(Fault.BUDGET, tmp_path)
    out = row["summary"]
    assert row["as_expected"], row["observed"]
    assert (row["status"], out["completion_mode"]) == ("PARTIALLY_COMPLETED", "DEGRADED")
    assert out["coverage"] == {"expected": 12, "accessible": 11, "analysed": 11}  # the facts that were confirmed
    assert out["breaking_changes"] == 8 and out["risk"] is None  # no unverified risk ranking
    # The goal's third failure criterion (budget insufficient for the risk verification, on_met DEGRADE) is met
    # once the fact lists are confirmed (W11): W12-W14 no longer fit the one attempt left, so nothing more starts.
    assert out["budget_to_continue"]["attempts"] == 7
    runtime = Runtime.open(str(tmp_path / "budget.db"))
    [row_] = runtime.list_runs().items
    state = runtime.get(row_.run_id)
    events = runtime.store.read_events(state.run_id)
    [verdict] = [e.payload for e in events if e.type is EventType.TERMINATION_RECORDED]
    assert (verdict["reason"], verdict["constraint_ids"]) == (
        "GOAL_FAILURE_CRITERION",
        ["no-budget-for-risk-verification"],
    )
    started = [e.payload["work_item_id"] for e in events if e.type is EventType.WORK_ITEM_STARTED]
    assert started[-1] == "W11" and state.memo["verified"][-1] == "W11"
    runtime.close()


def test_pause_and_resume_in_another_process_give_the_same_result(tmp_path: Path) -> None:
    row = run_fault(Fault.PAUSE_RESUME, tmp_path)
    assert row["as_expected"], row["observed"]
    assert "paused at step 40 (PAUSED)" in row["observed"] and "identical summary" in row["observed"]


def test_an_injected_instruction_has_no_effect(tmp_path: Path, delivery_log: dict[str, dict[str, str]]) -> None:
    row = run_fault(Fault.INJECTION, tmp_path)
    assert row["as_expected"], row["observed"]
    assert delivery_log == {}
    assert row["summary"]["report_versions"] == ["migration-assessment:v1", "migration-assessment:v2"]


def test_the_cli_prints_one_fault_with_its_summary_and_refuses_an_unknown_one() -> None:
    cli = CliRunner()
    out = cli.invoke(demo_app, ["payment-migration", "--fault", "authority-conflict", "--json"])
    assert out.exit_code == 0, out.output
    row = json.loads(out.output)
    assert row["fault"] == "authority-conflict" and row["as_expected"] is True and "summary" in row
    bad = cli.invoke(demo_app, ["payment-migration", "--fault", "meteor"])
    assert bad.exit_code != 0 and "unknown fault" in bad.output


def test_a_search_that_times_out_once_is_retried_and_the_report_waits_for_approval(tmp_path: Path) -> None:
    row = run_fault(Fault.DOC_SEARCH_TIMEOUT_ONCE, tmp_path)
    assert row["as_expected"], row["observed"]
    assert row["status"] == "WAITING_FOR_USER" and "recovered 1x" in row["observed"]


def test_a_repeated_search_is_stopped_as_no_progress_and_the_run_ends(tmp_path: Path) -> None:
    row = run_fault(Fault.SAME_SEARCH, tmp_path)
    assert row["as_expected"], row["observed"]
    # Nothing else can run without W05 (a LOCAL_REACT item: the model's loop is stopped): a person is asked
    # (nothing runnable hands off, it does not degrade).
    assert row["status"] == "WAITING_FOR_USER" and row["rung"] == "HANDOFF_PACKAGE" and "W05" in row["observed"]


def test_a_high_risk_assessment_at_low_confidence_is_never_delivered_and_goes_to_a_person(tmp_path: Path) -> None:
    row = run_fault(Fault.HIGH_RISK_LOW_CONFIDENCE, tmp_path)
    assert row["as_expected"], row["observed"]
    assert row["status"] == "WAITING_FOR_USER" and row["rung"] == "HANDOFF_PACKAGE"
    assert "deliveries 0" in row["observed"] and "handoff HIGH_RISK_LOW_CONFIDENCE" in row["observed"]
