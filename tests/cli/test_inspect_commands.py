"""The inspection and lifecycle commands report what the store holds, and name what it does not."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from stateward.cli.app import app
from stateward.demos.blog import build_agent
from stateward.demos.blog_fixtures import GOAL
from stateward.runtime.runtime import Runtime


def _cli(*args: str) -> tuple[int, Any]:
    result = CliRunner().invoke(app, [*args, "--json"])
    return result.exit_code, json.loads(result.stdout)


def _two_waiting_runs(db: Path) -> tuple[str, str]:
    runtime = Runtime.open(str(db))
    try:
        first = runtime.start(build_agent("react"), GOAL).run_id
        second = runtime.start(build_agent("workflow"), GOAL).run_id
    finally:
        runtime.close()
    return first, second


def test_trace_of_an_unknown_run_is_run_not_found(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    _two_waiting_runs(db)
    code, out = _cli("trace", "run_nope", "--db", str(db))
    assert (code, out["error"]["code"]) == (1, "RUN_NOT_FOUND")


def test_the_inbox_lists_open_requests_only(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    first, second = _two_waiting_runs(db)
    code, inbox = _cli("requests", "list", "--db", str(db))
    assert code == 0 and sorted(r["run_id"] for r in inbox) == sorted([first, second])
    assert _cli("approve", first, "approval_001", "--db", str(db), "--no-drive")[0] == 0
    code, inbox = _cli("requests", "list", "--db", str(db))
    assert code == 0 and [(r["run_id"], r["request_id"]) for r in inbox] == [(second, "approval_001")]


def test_lifecycle_commands_report_the_control_flag(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    runtime = Runtime.open(str(db))
    run_id = runtime.submit(build_agent("react"), GOAL).run_id  # RUNNING, nobody driving it
    runtime.close()
    code, paused = _cli("pause", run_id, "--db", str(db))
    assert code == 0 and paused["status"] == "PAUSED" and "control" in paused
    code, cancelled = _cli("cancel", run_id, "--db", str(db))
    assert code == 0 and cancelled["status"] == "CANCELLED" and cancelled["control"] is None
