"""``stateward worker`` starts lean: a synchronous worker that drives a run of typed, synchronous tools loads
no asyncio machinery, no JSON Schema validator, no HTTP service, MCP, model SDK, Rich or OpenTelemetry;
neither do ``runs list --json`` and ``approve`` (which resumes a run in its own process).

Every process of a fleet pays its start-up before its first step (``benchmarks/bench_workers.py`` prints
it); these imports (and Typer, which a well-formed worker command line skips) were about two fifths of an
idle SQLite worker's CPU, and came back one convenient top-level import at a time. The probe runs the real
command in a fresh interpreter and reads ``sys.modules`` when it exits.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

from tests.blog_runs import suspended_blog_run

from stateward import Runtime

# Top-level packages a sync worker, `runs list` and `approve` have no use for (each loads on first use:
# the async worker / bridge, a JSON-Schema (MCP) tool, `serve`, a model spec, a table, an OTEL_* variable).
HEAVY = frozenset(
    {
        "asyncio",
        "greenlet",
        "jsonschema",
        "referencing",
        "fastapi",
        "starlette",
        "uvicorn",
        "mcp",
        "openai",
        "anthropic",
        "httpx",
        "rich",
        "opentelemetry",
    }
)

AGENTS = textwrap.dedent("""
    from stateward import Agent, AgentRegistry, FinishNode, ToolNode, ToolRegistry, WorkflowController, tool

    @tool(description="Add one to n; no side effect.")
    def add_one(n: int) -> dict[str, int]:
        return {"n": n + 1}

    registry = AgentRegistry()

    @registry.agent("lean")
    def build() -> Agent:
        nodes = [ToolNode("add", "add_one", {"n": 1}, next="done"), FinishNode("done", "added one")]
        return Agent(name="lean", controller=WorkflowController(nodes), tools=ToolRegistry([add_one]))
""")

PROBE = textwrap.dedent("""
    import json, sys
    from stateward.cli.main import main
    sys.argv = ["stateward", *json.loads(sys.argv[1])]
    try:
        main()
    finally:
        sys.stderr.write("\\nLOADED=" + json.dumps(sorted({m.split(".")[0] for m in sys.modules})))
""")


def _agents(tmp_path: Path) -> ModuleType:
    path = tmp_path / "lean_agents.py"
    path.write_text(AGENTS)
    spec = importlib.util.spec_from_file_location("lean_agents", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _stateward(tmp_path: Path, *args: str) -> tuple[str, set[str]]:
    """(stdout, top-level packages loaded) of ``stateward ARGS`` run in a fresh interpreter (which may build
    the agents of ``_agents(tmp_path)`` once it was called)."""
    paths = [str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = os.pathsep.join(paths)
    if (tmp_path / "lean_agents.py").exists():
        env["STATEWARD_AGENTS"] = "lean_agents:registry"
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(args)], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    loaded = json.loads(proc.stderr.rsplit("LOADED=", 1)[1])
    return proc.stdout, set(loaded)


def test_a_sync_worker_drives_a_run_without_loading_heavy_packages(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    runtime = Runtime.open(str(db))
    run_id = runtime.submit(_agents(tmp_path).registry.create("lean"), "Add one.").run_id
    runtime.close()
    out, loaded = _stateward(tmp_path, "worker", "--db", str(db), "--idle-exit", "0.05", "--json")
    assert json.loads(out)["claimed"] == 1
    runtime = Runtime.open(str(db), create=False)
    assert runtime.get(run_id).status.value == "COMPLETED"
    runtime.close()
    assert "stateward" in loaded and "pydantic" in loaded  # the probe sees what the command imported
    assert sorted(loaded & HEAVY) == []
    assert sorted(loaded & {"typer", "click"}) == []  # a well-formed worker command line skips Typer


def test_a_worker_supervisor_preloads_the_agents_and_nothing_heavy_before_it_forks(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    runtime = Runtime.open(str(db))
    run_id = runtime.submit(_agents(tmp_path).registry.create("lean"), "Add one.").run_id
    runtime.close()
    out, loaded = _stateward(tmp_path, "worker", "--db", str(db), "--idle-exit", "0.05", "--processes", "2", "--json")
    assert json.loads(out)["claimed"] == 1
    runtime = Runtime.open(str(db), create=False)
    assert runtime.get(run_id).status.value == "COMPLETED"
    runtime.close()
    assert "lean_agents" in loaded  # imported once, before the fork, for every child
    assert sorted(loaded & HEAVY) == []
    assert sorted(loaded & {"typer", "click"}) == []


def test_an_async_worker_loads_the_event_loop_machinery_it_runs_on(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    Runtime.open(str(db)).close()
    _, loaded = _stateward(tmp_path, "worker", "--db", str(db), "--idle-exit", "0.05", "--async")
    assert {"asyncio", "greenlet"} <= loaded


def test_listing_runs_loads_no_heavy_package(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    runtime = Runtime.open(str(db))
    runtime.submit(_agents(tmp_path).registry.create("lean"), "Add one.")
    runtime.close()
    out, loaded = _stateward(tmp_path, "runs", "list", "--db", str(db), "--json")
    assert [r["status"] for r in json.loads(out)["runs"]] == ["RUNNING"]
    assert sorted(loaded & HEAVY) == []


def test_approving_a_request_resumes_the_run_without_heavy_packages(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    run_id = suspended_blog_run(db)  # the demos' blog agent: a scripted model and typed tools
    out, loaded = _stateward(tmp_path, "approve", run_id, "approval_001", "--db", str(db), "--json")
    assert json.loads(out)["status"] == "COMPLETED"
    assert sorted(loaded & HEAVY) == []
