"""approve / reject / reply in new processes against a real SQLite file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow


def sw(*args: str, db: Path, check: bool = True) -> tuple[int, Any]:
    env = {**os.environ, "STATEWARD_DB": str(db)}
    proc = subprocess.run(
        [sys.executable, "-m", "stateward.cli.main", *args, "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    if check:
        assert proc.returncode == 0, proc.stderr + proc.stdout
    return proc.returncode, json.loads(proc.stdout)


def test_suspend_then_approve_in_another_process(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    _, started = sw("demo", "blog", "--controller", "react", db=db)
    assert started["status"] == "WAITING_FOR_USER" and started["pending_request_id"] == "approval_001"
    run_id = started["run_id"]

    _, shown = sw("runs", "show", run_id, db=db)
    assert shown["suspended"] is True
    assert shown["pending"]["request_id"] == "approval_001"
    assert shown["pending"]["state_before"] == "RUNNING"
    assert shown["counters"]["model_calls_after_wait"] == 0 and shown["counters"]["tool_calls_after_wait"] == 0
    assert [a["name"] for a in shown["artifacts"]] == ["brief"]

    _, approved = sw("approve", run_id, "approval_001", "--by", "alice", db=db)
    assert approved["status"] == "COMPLETED" and approved["already_answered"] is False
    # Usage carries on across processes: never reset by the resume.
    for counter in ("model_calls", "input_tokens", "output_tokens", "tool_attempts"):
        assert approved["counters"][counter] > shown["counters"][counter], counter
    assert sorted((a["name"], a["version"]) for a in approved["artifacts"]) == [("brief", 1), ("draft", 1)]

    _, again = sw("approve", run_id, "approval_001", "--by", "mallory", db=db)
    assert again["already_answered"] is True and again["answer"]["by"] == "alice"
    _, trace = sw("trace", run_id, db=db)
    assert [e["seq"] for e in trace] == list(range(1, len(trace) + 1))
    assert sum(1 for e in trace if e["type"] == "request_answered") == 1


def test_reject_then_stale_and_unknown_ids_are_refused(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    _, started = sw("demo", "blog", "--controller", "workflow", db=db)
    run_id = started["run_id"]
    _, rejected = sw("reject", run_id, "approval_001", "--comment", "cover the breaker", db=db)
    assert rejected["pending"]["request_id"] == "approval_002"
    assert [(a["name"], a["version"]) for a in rejected["artifacts"]] == [("brief", 1), ("brief", 2)]

    _, before = sw("trace", run_id, db=db)
    for request_id, code in [("approval_001", "REQUEST_ALREADY_ANSWERED"), ("approval_077", "UNKNOWN_REQUEST")]:
        rc, out = sw("approve", run_id, request_id, db=db, check=False)
        assert rc != 0 and out["error"]["code"] == code
    rc, out = sw("approve", "run_nope", "approval_001", db=db, check=False)
    assert rc != 0 and out["error"]["code"] == "RUN_NOT_FOUND"
    _, after = sw("trace", run_id, db=db)
    assert after == before


def test_reply_to_an_approval_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    _, started = sw("demo", "blog", "--controller", "plan_and_execute", db=db)
    rc, out = sw("reply", started["run_id"], "approval_001", "--text", "sure", db=db, check=False)
    assert rc != 0 and out["error"]["code"] == "WRONG_ANSWER_KIND"
    _, shown = sw("runs", "show", started["run_id"], db=db)
    assert shown["suspended"] is True
