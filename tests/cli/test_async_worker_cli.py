"""``stateward worker --async``: one process, one event loop, many runs; exit statuses as the threaded worker's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from stateward import RunStatus, Runtime
from stateward.store.sqlite import SQLiteStore

pytestmark = pytest.mark.slow

# Agents only the worker's process loads (STATEWARD_AGENTS, on its PYTHONPATH): an async model and an
# ``async def`` side-effecting tool whose every call is appended to a file.
AGENTS = textwrap.dedent("""
    import asyncio, os
    from stateward import Agent, AgentRegistry, Budget, ReActController, ToolContext, ToolRegistry, tool
    from stateward.testing import AsyncScriptedModel

    @tool(side_effect=True)
    async def stamp(ctx: ToolContext) -> dict:
        \"\"\"Stamp the run once.\"\"\"
        await asyncio.sleep(0.01)
        with open(os.environ["STAMPS"], "a") as out:
            out.write(ctx.run_id + "\\n")
        return {"stamped": True}

    def policy(request):
        if request.observations:
            return {"type": "FINISH", "reason": "stamped"}
        return {"type": "EXECUTE_TOOL", "action": "stamp", "args": {}}

    registry = AgentRegistry()

    @registry.agent("stamper")
    def build():
        \"\"\"Stamps once, then finishes.\"\"\"
        model = AsyncScriptedModel(policy, latency_s=0.05)
        return Agent(name="stamper", controller=ReActController(model), tools=ToolRegistry([stamp]),
                     budget=Budget(max_steps=5))
""")


WORKER_ARGS = ("--idle-exit", "1", "--poll", "0.05", "--json", "--db")


def test_worker_async_drives_every_run_once_and_prints_its_counts(tmp_path: Path) -> None:
    (tmp_path / "stamp_agents.py").write_text(AGENTS)
    db, stamps = tmp_path / "runs.db", tmp_path / "stamps.txt"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p),
        "STATEWARD_AGENTS": "stamp_agents:registry",
        "STAMPS": str(stamps),
    }
    sys.path.insert(0, str(tmp_path))
    try:
        import stamp_agents  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(tmp_path))
    runtime = Runtime(SQLiteStore(db), agents=stamp_agents.registry)
    ids = [runtime.submit(stamp_agents.registry.create("stamper"), f"stamp {i}").run_id for i in range(20)]
    proc = subprocess.run(
        [sys.executable, "-m", "stateward.cli.main", "worker", "--async", "--concurrency", "10", *WORKER_ARGS, str(db)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    counts = json.loads(proc.stdout)
    assert counts["claimed"] == 20 and counts["loop_errors"] == 0 and counts["errors"] == 0
    assert "async, one event loop" in proc.stderr
    assert [runtime.get(run_id).status for run_id in ids] == [RunStatus.COMPLETED] * 20
    assert sorted(stamps.read_text().split()) == sorted(ids)  # each side effect exactly once
    runtime.close()
