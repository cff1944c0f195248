"""What counts as broken in a harness report (the `stateward chaos` exit code follows it)."""

from __future__ import annotations

from typing import Any

from stateward.chaos.verify import MUST_BE_ZERO, broken


def _report(**changes: Any) -> dict[str, Any]:
    return {**dict.fromkeys(MUST_BE_ZERO, 0), "stale_writes_rejected": 7, "finished_or_waiting_ratio": 1.0, **changes}


def test_a_clean_storm_breaks_nothing() -> None:
    assert broken(_report()) == []  # rejected stale writes are the fence working, not a failure


def test_every_nonzero_invariant_and_a_low_finish_ratio_are_named() -> None:
    assert broken(_report(duplicate_side_effects=1, lost_runs=2)) == ["lost_runs", "duplicate_side_effects"]
    assert broken(_report(finished_or_waiting_ratio=0.94)) == ["finished_or_waiting_ratio"]
    assert broken(_report(finished_or_waiting_ratio=0.95)) == []
