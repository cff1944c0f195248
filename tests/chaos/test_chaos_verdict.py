"""What counts as broken in a harness report (the `stateward chaos` exit code follows it), and which
stores the harness refuses to touch."""

from __future__ import annotations

import sqlite3
import tempfile
from pathlib import Path
from typing import Any

import pytest

from stateward.chaos.config import ChaosConfig
from stateward.chaos.harness import Harness
from stateward.chaos.verify import MUST_BE_ZERO, broken
from stateward.core.errors import UserError
from stateward.core.status import RunStatus
from stateward.runtime.runtime import Runtime
from stateward_demos.blog import build_agent
from stateward_demos.blog_fixtures import GOAL


def _report(**changes: Any) -> dict[str, Any]:
    return {**dict.fromkeys(MUST_BE_ZERO, 0), "stale_writes_rejected": 7, "finished_or_waiting_ratio": 1.0, **changes}


def test_a_clean_storm_breaks_nothing() -> None:
    assert broken(_report()) == []  # rejected stale writes are the fence working, not a failure


def test_every_nonzero_invariant_and_a_low_finish_ratio_are_named() -> None:
    assert broken(_report(duplicate_side_effects=1, lost_runs=2)) == ["lost_runs", "duplicate_side_effects"]
    assert broken(_report(finished_or_waiting_ratio=0.94)) == ["finished_or_waiting_ratio"]
    assert broken(_report(finished_or_waiting_ratio=0.95)) == []


def test_a_hung_child_or_an_unfinished_storm_breaks_the_storm_whatever_the_counts() -> None:
    hung = [{"role": "worker", "pid": 4242, "waited_s": 30.1}]
    assert broken(_report(hung_children=hung)) == ["hung_children"]
    assert broken(_report(timed_out=True)) == ["timed_out"]
    assert broken(_report(hung_children=[], timed_out=False)) == []


def test_the_storm_refuses_a_store_that_holds_runs_and_touches_nothing(tmp_path: Path) -> None:
    # It approves every open request and drives every runnable run in its store: a user's runs included.
    db = str(tmp_path / "mine.db")
    runtime = Runtime.open(db)
    waiting = runtime.start(build_agent("react"), GOAL)
    runtime.close()
    kill_logs = set(Path(tempfile.gettempdir()).glob("stateward-chaos-*.kills"))
    with pytest.raises(UserError) as err:
        Harness(ChaosConfig(db=db, runs=1, kills=0, workers=1)).run()
    assert err.value.code == "CHAOS_STORE_IN_USE"
    runtime = Runtime.open(db)
    assert runtime.get(waiting.run_id).status is RunStatus.WAITING_FOR_USER
    runtime.close()
    tables = sqlite3.connect(db).execute("SELECT name FROM sqlite_master WHERE name LIKE 'chaos%'").fetchall()
    assert tables == []  # its ledger was neither created nor reset
    assert set(Path(tempfile.gettempdir()).glob("stateward-chaos-*.kills")) == kill_logs


def test_a_fenced_lookup_refuses_the_superseded_holders_late_post(tmp_path: Path) -> None:
    # Holder 1 is paused mid-call; holder 2 asks the ledger (NOT_EXECUTED) and will retry. Holder 1's post
    # arriving in between must not land: the lookup raised the run's fence to token 2.
    from stateward.chaos.ledger import StaleFencingToken, ledger_for
    from stateward.tools.types import LookupStatus

    ledger = ledger_for(str(tmp_path / "ledger.db"))
    ledger.setup()
    assert ledger.lookup("idem_1", run_id="run_1", fencing_token=2) == (LookupStatus.NOT_EXECUTED, None)
    with pytest.raises(StaleFencingToken):
        ledger.apply("idem_1", "run_1", op=1, amount=5, token=1)
    assert ledger.apply("idem_1", "run_1", op=1, amount=5, token=2) == {"posted": 1, "amount": 5}
    outcomes = ledger.rows("SELECT outcome FROM chaos_calls ORDER BY rowid")
    assert outcomes == [("stale_token",), ("applied",)]  # asked twice, done once, never a duplicate
    ledger.close()
