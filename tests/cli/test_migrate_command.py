"""``stateward runs migrate``: a waiting v1 run moved by a v2 operator process; ``runs list`` and
``agents list`` show the versions. Real ``stateward`` processes, each with its own agent registry."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

REGISTRY = '''
from stateward import Agent, AgentRegistry, ReActController, ToolRegistry, tool
from stateward.testing import ScriptedModel

VERSION = {version!r}


@tool(requires_approval=True, side_effect=True)
def {tool}(invoice: str) -> dict[str, str]:
    """Pay an invoice (guarded)."""
    return {{"paid": invoice}}


def _note(state):
    return state.model_copy(update={{"facts": {{**state.facts, "migrated": True}}}})


agents = AgentRegistry()


@agents.agent("payer", version=VERSION, migrations={migrations})
def make_payer() -> Agent:
    """Pays INV-7 once approved."""

    def decide(request):
        if any(o["status"] == "SUCCESS" for o in request.observations):
            return {{"type": "FINISH", "reason": "paid"}}
        if request.observations:
            return {{"type": "REQUEST_USER_INPUT", "question": "what now?"}}
        return {{"type": "EXECUTE_TOOL", "action": "{tool}", "args": {{"invoice": "INV-7"}}}}

    return Agent(name="payer", controller=ReActController(ScriptedModel(decide)), tools=ToolRegistry([{tool}]))
'''


def _registry(tmp_path: Path, name: str, version: str, tool: str, migrations: str) -> Path:
    directory = tmp_path / name
    directory.mkdir()
    body = REGISTRY.format(version=version, tool=tool, migrations=migrations)
    (directory / "payer_agents.py").write_text(textwrap.dedent(body))
    return directory


def sw(*args: str, cwd: Path, agents_dir: Path) -> tuple[int, Any]:
    env = {k: v for k, v in os.environ.items() if k not in {"STATEWARD_DB", "STATEWARD_AGENTS"}}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(agents_dir), os.environ.get("PYTHONPATH")]))
    env["STATEWARD_AGENTS"] = "payer_agents:agents"
    done = subprocess.run(
        [sys.executable, "-m", "stateward.cli.main", *args, "--json"],
        cwd=cwd, capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout)


@pytest.mark.parametrize(("tool", "stale"), [("pay", False), ("settle", True)])
def test_a_v2_process_migrates_a_waiting_v1_run(tmp_path: Path, tool: str, stale: bool) -> None:
    v1 = _registry(tmp_path, "v1", "1", "pay", "{}")
    v2 = _registry(tmp_path, "v2", "2", tool, '{"1": _note}')
    v3 = _registry(tmp_path, "v3", "3", tool, "{}")
    db = str(tmp_path / "runs.db")
    code, started = sw("run", "payer", "--goal", "pay", "--db", db, cwd=tmp_path, agents_dir=v1)
    assert code == 0 and started["status"] == "WAITING_FOR_USER"
    run_id = started["run_id"]

    code, agents = sw("agents", "list", cwd=tmp_path, agents_dir=v2)
    payer = next(a for a in agents if a["name"] == "payer")
    assert (payer["version"], payer["migrates_from"]) == ("2", ["1"])

    code, refused = sw("runs", "migrate", run_id, "--to", "3", "--db", db, cwd=tmp_path, agents_dir=v3)
    assert code != 0 and refused["error"]["code"] == "AGENT_MIGRATION_NOT_REGISTERED"
    code, listed = sw("runs", "list", "--db", db, cwd=tmp_path, agents_dir=v3)
    assert [(r["run_id"], r["agent_version"]) for r in listed["runs"]] == [(run_id, "1")]

    code, moved = sw("runs", "migrate", run_id, "--to", "2", "--by", "ops-bob", "--db", db, cwd=tmp_path, agents_dir=v2)
    assert code == 0, moved
    assert (moved["from_version"], moved["to_version"], moved["by"]) == ("1", "2", "ops-bob")
    assert bool(moved["stale"]) is stale
    assert moved["status"] == ("RUNNING" if stale else "WAITING_FOR_USER")
    code, listed = sw("runs", "list", "--db", db, cwd=tmp_path, agents_dir=v2)
    assert [(r["run_id"], r["agent_version"]) for r in listed["runs"]] == [(run_id, "2")]
    code, shown = sw("runs", "show", run_id, "--db", db, cwd=tmp_path, agents_dir=v2)
    assert shown["agent_version"] == "2"
