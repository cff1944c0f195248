"""A run's goal, tenant and caller-chosen id are checked where every run is created (Runtime.submit), so
the library, the CLI and the HTTP API refuse the same bad values with the same named error, and nothing
is written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.runtime.noop_loop import noop_agent

from stateward import Runtime, UserError

MAX_GOAL = 8192


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"goal": ""}, "INVALID_GOAL"),
        ({"goal": " \n\t "}, "INVALID_GOAL"),
        ({"goal": "x" * (MAX_GOAL + 1)}, "INVALID_GOAL"),
        ({"goal": 42}, "INVALID_GOAL"),
        ({"tenant": ""}, "INVALID_TENANT"),
        ({"tenant": "acme\u202e"}, "INVALID_TENANT"),
        ({"tenant": "a b"}, "INVALID_TENANT"),
        ({"tenant": "t" * 65}, "INVALID_TENANT"),
        ({"run_id": "../etc/passwd"}, "INVALID_RUN_ID"),
        ({"run_id": ""}, "INVALID_RUN_ID"),
        ({"run_id": "r" * 129}, "INVALID_RUN_ID"),
        ({"run_id": "run\n1"}, "INVALID_RUN_ID"),
    ],
)
def test_a_bad_goal_tenant_or_run_id_is_refused_before_anything_is_written(
    runtime: Runtime, kwargs: dict[str, object], code: str
) -> None:
    agent, model = noop_agent(1)
    args: dict[str, object] = {"goal": "do one thing", **kwargs}
    goal = args.pop("goal")
    with pytest.raises(UserError) as err:
        runtime.start(agent, goal, **args)  # type: ignore[arg-type]
    assert err.value.code == code
    assert runtime.list_runs().items == []
    assert model.calls == []


def test_the_bounds_themselves_are_accepted(runtime: Runtime) -> None:
    agent, _ = noop_agent(1)
    state = runtime.submit(agent, "g" * MAX_GOAL, tenant="t" * 64, run_id="R" + "r" * 127)
    assert (state.run_id, state.tenant, len(state.goal)) == ("R" + "r" * 127, "t" * 64, MAX_GOAL)
    assert runtime.get(state.run_id).goal == "g" * MAX_GOAL


def test_the_cli_reports_a_blank_goal_as_bad_input(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for argv in (["--goal", "   "], ["--goal", "ok", "--tenant", ""]):
        out = subprocess.run(
            [sys.executable, "-m", "stateward.cli.main", "run", "blog", *argv, "--db", str(db), "--json"],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert out.returncode == 3, out.stderr  # bad input (README: exit codes)
        assert json.loads(out.stdout)["error"]["code"] in {"INVALID_GOAL", "INVALID_TENANT"}
