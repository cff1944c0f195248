"""The crash and race harness on the embedded store: hundreds of SIGKILLs, nothing may break."""

from __future__ import annotations

from pathlib import Path

import pytest

from stateward.chaos.config import ChaosConfig
from stateward.chaos.harness import Harness

pytestmark = pytest.mark.slow

ZERO = (
    "lost_runs",
    "duplicate_side_effects",
    "double_executions",
    "stale_writes_accepted",
    "illegal_transitions",
    "budget_resets",
    "mismatched_final_states",
)


def test_chaos_on_sqlite_breaks_nothing(tmp_path: Path) -> None:
    report = Harness(
        ChaosConfig(db=str(tmp_path / "chaos.db"), runs=150, kills=500, workers=3, seed=11, max_seconds=400)
    ).run()
    assert report["kills"] >= 500, report
    assert {k: report[k] for k in ZERO} == dict.fromkeys(ZERO, 0), report
    assert report["finished_or_waiting_ratio"] >= 0.95, report
    # The storm really reached the boundaries it claims to test.
    assert sum(report["kills_at_boundaries"].values()) > 0, report
    assert report["sigstops_past_ttl"] > 0, report
