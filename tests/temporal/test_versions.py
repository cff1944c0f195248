"""Agent versions on Temporal: a run starts on its agent version's task queue, and a worker polls only the queues
of the versions it builds. v1 and v2 workers side by side each drive their own runs; a v2-only fleet leaves
v1 runs untouched (no one takes them to refuse them) until a v1 worker comes."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from types import ModuleType

import pytest
from temporalio.api.enums.v1 import EventType
from tests.temporal.conftest import WorkerProcess, cli_env, wait_for

from stateward.core.errors import ErrorCode, StoreError
from stateward.core.status import RunStatus
from stateward.temporal.client import TemporalRuntime
from stateward.temporal.target import version_queue
from stateward.temporal.worker import queues

pytestmark = [pytest.mark.temporal, pytest.mark.slow]

AGENTS = """
from stateward import Agent, AgentRegistry, Budget, FinishNode, ToolContext, ToolNode, ToolRegistry
from stateward import WorkflowController, tool

BUILD = {build!r}
LEDGER = {ledger!r}


@tool(description="Record which build made this call.", timeout_s=30)
def stamp(node: int, ctx: ToolContext) -> dict:
    with open(LEDGER, "a") as out:
        out.write(f"{{BUILD}} {{ctx.run_id}} {{node}}\\n")
    return {{"node": node}}


registry = AgentRegistry()


@registry.agent("stamps", version=BUILD)
def build() -> Agent:
    nodes = [ToolNode(f"n{{i}}", "stamp", {{"node": i}}, next=f"n{{i + 1}}" if i < 1 else "done") for i in range(2)]
    nodes.append(FinishNode("done", "stamped"))
    return Agent(name="stamps", controller=WorkflowController(nodes), tools=ToolRegistry([stamp]),
                 budget=Budget(max_steps=6))
"""


def _agents(directory: Path, build: str, ledger: Path) -> ModuleType:
    path = directory / f"stamps_{build}.py"
    path.write_text(AGENTS.format(build=build, ledger=str(ledger)))
    spec = importlib.util.spec_from_file_location(f"stamps_{build}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _worker(url: str, build: str, directory: Path) -> WorkerProcess:
    log = directory / f"worker-{build}.log"
    env = cli_env()
    env["PYTHONPATH"] = os.pathsep.join([str(directory), env["PYTHONPATH"]])
    env.pop("STATEWARD_AGENTS")
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "stateward.cli.main", "worker", "--db", url, "--agents", f"stamps_{build}:registry"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )
    worker = WorkerProcess(proc, log)
    wait_for(lambda: "slot(s) on temporal://" in log.read_text(), f"the v{build} worker to poll", worker)
    return worker


def _tasks_started(runtime: TemporalRuntime, run_id: str) -> int:
    """Workflow tasks a worker took for the run (its history says; an open run's state needs a worker to read)."""

    async def count() -> int:
        history = await runtime._conn.handle(run_id).fetch_history()
        return sum(1 for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED)

    return runtime._conn.run(count())


def test_v1_and_v2_workers_each_drive_only_their_own_runs(temporal_url: str, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    v1, v2 = _agents(tmp_path, "1", ledger), _agents(tmp_path, "2", ledger)
    assert queues("q", v2.registry) == ["q", version_queue("q", "stamps", "2")]
    rt1 = TemporalRuntime.open(temporal_url, agents=v1.registry, query_timeout=timedelta(seconds=3))
    rt2 = TemporalRuntime.open(temporal_url, agents=v2.registry)
    old = [rt1.submit(v1.registry.create("stamps", {}), f"v1 run {i}") for i in range(4)]
    new = [rt2.submit(v2.registry.create("stamps", {}), f"v2 run {i}") for i in range(4)]
    assert {s.agent.version for s in old} == {"1"} and {s.agent.version for s in new} == {"2"}

    only_v2 = _worker(temporal_url, "2", tmp_path)
    try:
        for state in new:
            assert rt2.settled(state.run_id).status is RunStatus.COMPLETED
        assert [_tasks_started(rt1, s.run_id) for s in old] == [0] * len(old)  # the v2 build never took one
        assert rt1.get(old[0].run_id).status is RunStatus.RUNNING  # its state as committed: no worker needed
        with pytest.raises(StoreError) as unread:  # its events: no worker answers for the v1 queue, said, not hung
            rt1.events(old[0].run_id)
        assert unread.value.code is ErrorCode.STORE_UNAVAILABLE
        assert unread.value.details["task_queue"] == version_queue(rt1.target.task_queue, "stamps", "1")
        only_v1 = _worker(temporal_url, "1", tmp_path)
        try:
            for state in old:
                assert rt1.settled(state.run_id).status is RunStatus.COMPLETED
        finally:
            only_v1.stop()
    finally:
        only_v2.stop()
        rt1.close()
        rt2.close()
    rows = [line.split() for line in ledger.read_text().splitlines()]
    by_run = {run_id: {build for build, rid, _ in rows if rid == run_id} for _, run_id, _ in rows}
    assert {r: b for r, b in by_run.items()} == {
        **{s.run_id: {"1"} for s in old},
        **{s.run_id: {"2"} for s in new},
    }
    assert len(rows) == 2 * len(old + new)  # two stamps per run, each once
