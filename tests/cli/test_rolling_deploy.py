"""A rolling deploy: workers of build v1 and of build v2 side by side on one store, killed (SIGKILL) and
restarted while 100 runs are in flight. No run is driven by a build other than the one it records, and
none is lost: every run ends COMPLETED. The build of every tool call is written to a ledger by the tool
itself, so the check does not trust the runtime's own records."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from stateward import RunStatus, Runtime
from stateward.runtime.agent_registry import load_spec

pytestmark = pytest.mark.slow

AGENTS = """
import os, time
from stateward import Agent, AgentRegistry, Budget, FinishNode, ToolContext, ToolNode, ToolRegistry
from stateward import WorkflowController, tool

BUILD = {build!r}
LEDGER = {ledger!r}


@tool(description="Record which build made this call.", timeout_s=30)
def stamp(node: int, ctx: ToolContext) -> dict[str, int]:
    with open(LEDGER, "a") as out:
        out.write(f"{{BUILD}} {{ctx.run_id}} {{node}} {{os.getpid()}}\\n")
    time.sleep(0.02)
    return {{"node": node}}


registry = AgentRegistry()


@registry.agent("stamps", version=BUILD)
def build() -> Agent:
    nodes = [ToolNode(f"n{{i}}", "stamp", {{"node": i}}, next=f"n{{i + 1}}" if i < 2 else "done") for i in range(3)]
    nodes.append(FinishNode("done", "stamped"))
    return Agent(name="stamps", controller=WorkflowController(nodes), tools=ToolRegistry([stamp]),
                 budget=Budget(max_steps=8))
"""
RUNS_PER_BUILD = 50
DEADLINE_S = 120.0


def _worker(db: str, build: str, directory: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k not in {"STATEWARD_DB", "STATEWARD_AGENTS"}}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(directory), os.environ.get("PYTHONPATH")]))
    return subprocess.Popen(
        [sys.executable, "-m", "stateward.cli.main", "worker", "--db", db, "--agents", f"agents_{build}:registry",
         "--poll", "0.02", "--lease-ttl", "1.5", "--heartbeat", "0.5", "--concurrency", "4"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def test_v1_and_v2_workers_killed_and_restarted_each_drive_only_their_own_runs(tmp_path: Path) -> None:
    db, ledger = str(tmp_path / "runs.db"), tmp_path / "ledger.txt"
    for build in ("v1", "v2"):
        (tmp_path / f"agents_{build}.py").write_text(textwrap.dedent(AGENTS.format(build=build, ledger=str(ledger))))
    sys.path.insert(0, str(tmp_path))
    try:
        recorded: dict[str, str] = {}
        for build in ("v1", "v2"):
            registry = load_spec(f"agents_{build}:registry")
            runtime = Runtime.open(db, agents=registry)
            try:
                for i in range(RUNS_PER_BUILD):
                    recorded[runtime.submit(registry.create("stamps"), f"{build} run {i}").run_id] = build
            finally:
                runtime.close()
    finally:
        sys.path.remove(str(tmp_path))

    workers = {build: _worker(db, build, tmp_path) for build in ("v1", "v2")}
    kills = 0
    deadline = time.monotonic() + DEADLINE_S
    runtime = Runtime.open(db)
    try:
        while True:
            done = sum(runtime.get(run_id).status is RunStatus.COMPLETED for run_id in recorded)
            if done == len(recorded):
                break
            assert time.monotonic() < deadline, f"{done}/{len(recorded)} runs completed in {DEADLINE_S} s"
            if kills < 4 and ledger.exists() and len(ledger.read_text().splitlines()) > 40 * (kills + 1):
                build = ("v1", "v2")[kills % 2]
                workers[build].send_signal(signal.SIGKILL)  # mid-run: its leases expire, its runs are claimed again
                workers[build].wait(timeout=30)
                workers[build] = _worker(db, build, tmp_path)
                kills += 1
            time.sleep(0.05)
        statuses = {runtime.get(run_id).status for run_id in recorded}
    finally:
        runtime.close()
        for proc in workers.values():
            proc.send_signal(signal.SIGTERM)
        for proc in workers.values():
            proc.wait(timeout=60)
    assert kills == 4
    assert statuses == {RunStatus.COMPLETED}  # none lost
    calls = [line.split() for line in ledger.read_text().splitlines()]
    wrong = [(build, run_id) for build, run_id, _, _ in calls if recorded[run_id] != build]
    assert wrong == []  # no run was driven by an incompatible build
    assert {run_id for _, run_id, _, _ in calls} == set(recorded)
    assert {b for b, _, _, _ in calls} == {"v1", "v2"}
