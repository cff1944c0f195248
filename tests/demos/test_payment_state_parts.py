"""The payment run's large, rarely changing state is written once: its plan and each finished work item's
record are sealed by the controller and stored as parts of the run (store/parts.py), while the row keeps
what changes; every reader gets the plain memo back."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from stateward import RunStatus, Runtime
from stateward.core.sealed import Sealed
from stateward_demos.payment.agent import build_agent, goal


def test_the_plan_and_finished_records_are_parts_written_once(runtime: Runtime, db_path: Path) -> None:
    state = runtime.start(build_agent(), goal().objective)
    assert state.status is RunStatus.WAITING_FOR_USER
    assert type(state.memo["plan"]) is Sealed and all(type(r) is Sealed for r in state.memo["items"].values())
    db = sqlite3.connect(db_path)
    try:
        snapshot, parts = db.execute("SELECT snapshot, parts FROM runs WHERE run_id=?", (state.run_id,)).fetchone()
        bodies = [json.loads(b) for (b,) in db.execute("SELECT body FROM state_parts")]
    finally:
        db.close()
    row, refs = json.loads(snapshot)["memo"], json.loads(parts)
    verified = state.memo["verified"]
    assert len(verified) >= 10
    done = verified[:-1]  # the last one finished in the step that wrote the row: its new record is in it
    assert row["plan"] is None and refs["plan"] and all(row["items"][w] is None for w in done)
    assert row["items"][verified[-1]] == state.memo["items"][verified[-1]] and set(refs["items"]) == set(done)
    for wid in done:  # each finished record once, as it reads in the state
        assert bodies.count(state.memo["items"][wid]) == 1
    assert bodies.count(state.memo["plan"]) == 1
    loaded = runtime.store.load_run(state.run_id)
    assert loaded.model_dump() == state.model_dump() and type(loaded.memo["plan"]) is dict
