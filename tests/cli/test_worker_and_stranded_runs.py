"""``stateward worker`` exit statuses and ``stateward approve`` in a process that cannot build the agent."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from stateward import RunStatus, Runtime
from stateward.core.state import AgentRef
from stateward.store.sqlite import SQLiteStore
from stateward_demos import blog_fixtures as fx
from stateward_demos.blog import build_agent

pytestmark = pytest.mark.slow

# An agent registry only the worker's process loads (named by STATEWARD_AGENTS, on its PYTHONPATH).
CRASHY = textwrap.dedent("""
    import dataclasses
    from stateward import AgentRegistry
    from stateward_demos.blog import build_agent

    class Raising:
        mode = "react"
        def decide(self, ctx):
            raise ValueError("cannot hash NaN")

    registry = AgentRegistry()

    @registry.agent("crashy")
    def build():
        return dataclasses.replace(build_agent("react"), controller=Raising())
""")


def sw(*args: str, db: Path, extra_path: Path | None = None) -> tuple[int, Any, str]:
    paths = [p for p in (str(extra_path) if extra_path else None, os.environ.get("PYTHONPATH")) if p]
    env = {**os.environ, "STATEWARD_DB": str(db), "PYTHONPATH": os.pathsep.join(paths)}
    if extra_path:
        env["STATEWARD_AGENTS"] = "crashy_agents:registry"
    proc = subprocess.run(
        [sys.executable, "-m", "stateward.cli.main", *args, "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    return proc.returncode, json.loads(proc.stdout) if proc.stdout.strip() else None, proc.stderr


def crashy_run(tmp_path: Path, db: Path) -> str:
    (tmp_path / "crashy_agents.py").write_text(CRASHY)
    runtime = Runtime(SQLiteStore(db))
    agent = dataclasses.replace(build_agent("react"), ref=AgentRef(name="crashy"))
    run_id = runtime.submit(agent, fx.GOAL).run_id
    runtime.close()
    return run_id


def test_a_worker_on_idle_exit_after_failing_a_crashing_run_exits_5(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    run_id = crashy_run(tmp_path, db)
    rc, counts, err = sw("worker", "--idle-exit", "0.5", "--crash-retries", "0", db=db, extra_path=tmp_path)
    assert rc == 5, err
    assert (counts["crashed_steps"], counts["runs_failed"], counts["loop_errors"]) == (1, 1, 0)
    _, shown, _ = sw("runs", "show", run_id, db=db)
    assert (shown["status"], shown["terminal_reason"]) == ("FAILED", "step_crashed")


def test_a_worker_stops_with_5_at_max_crashes_and_leaves_the_run_for_later(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    run_id = crashy_run(tmp_path, db)
    rc, counts, err = sw("worker", "--idle-exit", "30", "--max-crashes", "1", db=db, extra_path=tmp_path)
    assert rc == 5, err
    assert counts["stopped_on_crashes"] is True and counts["crashed_steps"] == 1
    _, shown, _ = sw("runs", "show", run_id, db=db)
    assert shown["status"] == "RUNNING"
    assert shown["setback"]["kind"] == "step_crashed" and shown["setback"]["retry_at"] is not None


def test_a_worker_with_nothing_troubling_exits_0(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    runtime = Runtime(SQLiteStore(db))
    run_id = runtime.submit(build_agent("workflow"), fx.GOAL).run_id
    runtime.close()
    rc, counts, err = sw("worker", "--idle-exit", "0.5", db=db)
    assert rc == 0, err
    assert counts["claimed"] == 1 and counts["crashed_steps"] == 0
    _, shown, _ = sw("runs", "show", run_id, db=db)
    assert shown["status"] == "WAITING_FOR_USER"


def test_approve_where_the_agent_cannot_be_built_says_what_to_run_next(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    runtime = Runtime(SQLiteStore(db))
    agent = dataclasses.replace(build_agent("react"), ref=AgentRef(name="stateward_no_such_agents:build"))
    state = runtime.start(agent, fx.GOAL)
    assert state.status is RunStatus.WAITING_FOR_USER

    rc, out, err = sw("approve", state.run_id, "approval_001", "--by", "alice", db=db)
    assert rc == 4, err
    assert out["driven"] is False and out["status"] == "RUNNING"
    assert out["not_driven"]["code"] == "AGENT_NOT_REGISTERED"
    assert out["not_driven"]["next"].startswith(f"stateward resume {state.run_id}")
    assert f"stateward resume {state.run_id}" in err

    rc, again, _ = sw("approve", state.run_id, "approval_001", "--by", "alice", db=db)
    assert rc == 4 and again["already_answered"] is True and again["status"] == "RUNNING"

    # Where the agent can be built, the same answer drives the run on.
    assert runtime.approve(state.run_id, "approval_001", by="alice").state.status is RunStatus.COMPLETED
    runtime.close()
