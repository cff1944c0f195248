"""``stateward stats``: the figures computed from the event log, on runs whose outcomes are known."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from tests.observability.agents_for_metrics import AGENTS, refunder
from typer.testing import CliRunner

from stateward import Budget, RunStatus, Runtime, UserError
from stateward.cli.app import app
from stateward.observability.stats import compute_stats, parse_since


@pytest.fixture
def db(tmp_path: Path) -> Path:
    from stateward_demos.payment.agent import build_agent, goal

    path = tmp_path / "runs.db"
    runtime = Runtime.open(str(path), agents=AGENTS)
    waiting = runtime.start(build_agent(), goal().objective)
    runtime.approve(waiting.run_id, "approval_001", by="ann")  # report v1 fails, v2 passes, delivered
    assert runtime.start(refunder(), "refund c-1").status is RunStatus.WAITING_FOR_USER
    short = runtime.start(refunder(), "refund c-2", budget=Budget(max_steps=1))
    assert short.terminal_reason == "budget_exhausted"
    runtime.close()
    return path


def test_the_figures_say_what_the_runs_did(db: Path) -> None:
    runtime = Runtime.open(str(db), agents=AGENTS)
    now = datetime.now(UTC)
    report = compute_stats(runtime.store, now=now)
    assert report.runs_scanned == 3 and not report.truncated
    assert report.runs_by_status["WAITING_FOR_USER"] == 1 and report.runs_by_status["COMPLETED"] == 1
    assert report.runs_by_status["FAILED"] == 1
    assert report.oldest_waiting_request_age_s is not None and report.oldest_waiting_request_age_s > 0
    assert report.plan_first_pass_rate.rate == 1.0 and report.plan_first_pass_rate.whole == 1
    assert report.work_item_success_rate.part == report.work_item_success_rate.whole == 18
    assert (report.verification_pass_rate.part, report.verification_pass_rate.whole) == (1, 2)
    assert report.claims_without_evidence == 1  # report v1 had a bare claim; v2 was repaired
    assert report.budget_overruns == 1
    assert report.retry_success_rate.rate is None  # nothing was retried: no rate, not 0%
    assert report.counts["tool_calls"] == report.duplicate_call_rate.whole > 0
    assert report.tokens["input"] > 0 and report.tokens["output"] > 0
    assert report.illegal_transitions == 0
    later = compute_stats(runtime.store, now=now, since=now + timedelta(seconds=1))
    assert later.runs_scanned == 0 and later.work_item_success_rate.rate is None
    capped = compute_stats(runtime.store, now=now, max_runs=2)
    assert capped.runs_scanned == 2 and capped.truncated
    runtime.close()


def test_the_cli_prints_the_same_figures(db: Path) -> None:
    out = CliRunner().invoke(app, ["stats", "--db", str(db), "--since", "1h", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["runs_scanned"] == 3 and data["budget_overruns"] == 1
    assert data["verification_pass_rate"] == {"part": 1, "whole": 2, "rate": 0.5}
    bad = CliRunner().invoke(app, ["stats", "--db", str(db), "--since", "yesterday", "--json"])
    assert bad.exit_code != 0 and json.loads(bad.output)["error"]["code"] == "INVALID_SINCE"


def test_since_accepts_durations_and_zoned_times() -> None:
    now = datetime(2026, 1, 2, tzinfo=UTC)
    assert parse_since("24h", now) == datetime(2026, 1, 1, tzinfo=UTC)
    assert parse_since("30m", now) == now - timedelta(minutes=30)
    assert parse_since("2025-12-31T00:00:00+00:00", now) == datetime(2025, 12, 31, tzinfo=UTC)
    for bad in ("7 days", "2025-12-31T00:00:00", ""):
        with pytest.raises(UserError) as err:
            parse_since(bad, now)
        assert err.value.code == "INVALID_SINCE"
