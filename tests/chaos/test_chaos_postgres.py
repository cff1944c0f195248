"""The crash and race harness on PostgreSQL with several workers claiming with SKIP LOCKED."""

from __future__ import annotations

import pytest

from stateward.chaos.harness import ChaosConfig, Harness

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

ZERO = (
    "lost_runs",
    "duplicate_side_effects",
    "double_executions",
    "stale_writes_accepted",
    "illegal_transitions",
    "budget_resets",
    "mismatched_final_states",
)


def test_chaos_on_postgres_breaks_nothing(pg_url: str) -> None:
    report = Harness(ChaosConfig(db=pg_url, runs=150, kills=500, workers=3, seed=12, max_seconds=500)).run()
    assert report["kills"] >= 500, report
    assert {k: report[k] for k in ZERO} == dict.fromkeys(ZERO, 0), report
    assert report["finished_or_waiting_ratio"] >= 0.95, report
    assert sum(report["kills_at_boundaries"].values()) > 0, report
