"""``stateward pause / resume / cancel``: an operator's lifecycle requests, each answered with the run's summary."""

from __future__ import annotations

import os

from stateward.cli import DEFAULT_DB
from stateward.cli.answer_cmd import ByOpt
from stateward.cli.output import emit_json, print_summary, reported_errors
from stateward.cli.plugins import DbOpt, JsonOpt
from stateward.cli.stores import open_backend


def _lifecycle(action: str, run_id: str, db: str, as_json: bool, by: str) -> None:
    from stateward.runtime.control import ControlRequest
    from stateward.runtime.summary import run_summary

    with reported_errors(as_json):
        runtime = open_backend(db, writes=True)
        if action == "pause":
            state = runtime.pause(run_id, by=by)
        elif action == "resume":
            state = runtime.resume(run_id, by=by)
        else:
            state = runtime.cancel(run_id, by=by)
        summary = run_summary(runtime.store, state)
        control = ControlRequest.decode(runtime.store.get_control(run_id))
        summary["control"] = None if control is None else control.kind
    if as_json:
        emit_json(summary)
    else:
        print_summary(summary)


def pause(
    run_id: str, db: DbOpt = DEFAULT_DB, by: ByOpt = os.environ.get("USER", "operator"), as_json: JsonOpt = False
) -> None:
    """RUNNING -> PAUSING -> PAUSED with a checkpoint (at the driving worker's next step), recorded as ``by``'s."""
    _lifecycle("pause", run_id, db, as_json, by)


def resume(
    run_id: str, db: DbOpt = DEFAULT_DB, by: ByOpt = os.environ.get("USER", "operator"), as_json: JsonOpt = False
) -> None:
    """Resume a PAUSED run from its checkpoint, reconciling side effects left in flight."""
    _lifecycle("resume", run_id, db, as_json, by)


def cancel(
    run_id: str, db: DbOpt = DEFAULT_DB, by: ByOpt = os.environ.get("USER", "operator"), as_json: JsonOpt = False
) -> None:
    """Cancel any non-terminal run; its open requests close and later answers are refused."""
    _lifecycle("cancel", run_id, db, as_json, by)
