"""Command-line plugins: an installed package adds a command group through the ``stateward.cli`` entry point.

Each test installs a throwaway distribution (a ``.dist-info`` folder and a module) on a real
``stateward`` process's path, the way ``pip install`` would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

PLUGIN = '''
import typer
from stateward.cli.plugins import JsonOpt, emit_json, reported_errors
from stateward import UserError

app = typer.Typer(no_args_is_help=True, help="Greetings from an installed package.")

@app.command("hello")
def hello(name: str = "world", as_json: JsonOpt = False) -> None:
    """Say hello."""
    with reported_errors(as_json):
        if name == "mallory":
            raise UserError("no", code="NOT_WELCOME")
        emit_json({"hello": name})

@app.command("other")
def other() -> None:
    """A second command, so the group is a group."""

not_an_app = 42
'''


def install(tmp_path: Path, entry_points: str) -> dict[str, str]:
    """A distribution named ``greeter`` with these ``[stateward.cli]`` entry points; the env to see it."""
    (tmp_path / "greeter.py").write_text(textwrap.dedent(PLUGIN))
    dist = tmp_path / "greeter-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: greeter\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[stateward.cli]\n" + entry_points)
    env = {k: v for k, v in os.environ.items() if k != "STATEWARD_DB"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    return env


def stateward(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stateward.cli.main", *args],
        capture_output=True, text=True, env=env, cwd=cwd, timeout=120,
    )  # fmt: skip


def test_an_installed_group_is_mounted_by_its_name_and_reports_errors_like_a_builtin(tmp_path: Path) -> None:
    env = install(tmp_path, "greet = greeter:app\n")
    done = stateward("greet", "hello", "--name", "ada", "--json", env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"hello": "ada"}

    refused = stateward("greet", "hello", "--name", "mallory", "--json", env=env, cwd=tmp_path)
    assert refused.returncode == 3
    assert json.loads(refused.stdout)["error"]["code"] == "NOT_WELCOME"

    listed = stateward("--help", env=env, cwd=tmp_path)
    assert listed.returncode == 0 and "greet" in listed.stdout and "demo" in listed.stdout


def test_a_plugin_may_not_take_a_builtin_commands_name(tmp_path: Path) -> None:
    env = install(tmp_path, "runs = greeter:app\n")
    done = stateward("--help", "--json", env=env, cwd=tmp_path)
    assert done.returncode == 3
    assert json.loads(done.stdout)["error"]["code"] == "CLI_PLUGIN_CONFLICT"
    # A built-in command named on the command line never looks at plugins at all.
    ok = stateward("agents", "list", "--json", env=env, cwd=tmp_path)
    assert ok.returncode == 0, ok.stdout + ok.stderr


def test_a_plugin_that_is_not_a_typer_app_or_does_not_import_is_named(tmp_path: Path) -> None:
    env = install(tmp_path, "num = greeter:not_an_app\ngone = greeter_missing:app\n")
    for name in ("num", "gone"):
        done = stateward(name, "--json", env=env, cwd=tmp_path)
        assert done.returncode == 3, done.stdout + done.stderr
        assert json.loads(done.stdout)["error"]["code"] == "CLI_PLUGIN_BROKEN"
        assert "Traceback" not in done.stderr
