"""Chaos on the Temporal backend: stateward's Temporal workers SIGKILLed mid-activity and mid-workflow-task, and
the server itself killed and restarted on the same database file. Nothing is lost, no side effect happens twice,
every run ends finished (a refund the handler performed before a kill is found by the tool's lookup under its
idempotency key, never performed again)."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import pytest
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer
from tests.temporal.conftest import DEADLINE_S, start_worker_process, wait_for
from tests.temporal.temporal_agents import registry

from stateward.core.errors import ErrorCode, StoreError
from stateward.core.state import RunState
from stateward.core.status import RunStatus
from stateward.temporal.client import TemporalRuntime
from stateward.temporal.dev_server import DevServer
from stateward.temporal.worker import run_worker, sandbox
from stateward.temporal.workflow import RunWorkflow

pytestmark = [pytest.mark.temporal, pytest.mark.slow]


def _lines(ledger: Path) -> list[str]:
    return ledger.read_text().split() if ledger.exists() else []


def test_a_worker_killed_while_the_refund_is_in_flight_leaves_it_performed_once(
    runtime: TemporalRuntime, temporal_url: str, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    first = start_worker_process(temporal_url, tmp_path / "w1.log")
    try:
        agent = registry.create("refunds", {"ledger": str(ledger), "hold_s": 30.0})
        state = runtime.start(agent, "refund A-1")
        assert state.status is RunStatus.WAITING_FOR_USER and state.pending is not None
        runtime.approve(state.run_id, state.pending.request_id, by="alice", drive=False)
        wait_for(lambda: len(_lines(ledger)) == 1, "the refund handler to run", first)
        first.kill()  # the refund happened; the worker never reported it
    finally:
        first.stop()
    second = start_worker_process(temporal_url, tmp_path / "w2.log")
    try:
        done = runtime.settled(state.run_id)
        events = runtime.events(state.run_id)  # with a worker up: the run's workflow may be writing its notices
    finally:
        second.stop()
    assert (done.status, done.terminal_reason) == (RunStatus.COMPLETED, "completed")
    assert len(_lines(ledger)) == 1  # reconciled by its lookup, not run again
    attempts = [e.payload for e in events if e.type.value == "tool_attempted"]
    refund = [a for a in attempts if a["observation"]["action"] == "refund_order"]
    assert [a["observation"]["status"] for a in refund] == ["SUCCESS"]


def test_a_worker_killed_in_the_middle_of_a_workflow_task_loses_nothing(
    runtime: TemporalRuntime, temporal_url: str, tmp_path: Path
) -> None:
    ledger, mark = tmp_path / "ledger", tmp_path / "in-workflow-task"
    first = start_worker_process(temporal_url, tmp_path / "w1.log")
    try:
        agent = registry.create("refunds", {"ledger": str(ledger), "hold_workflow_mark": str(mark)})
        state = runtime.submit(agent, "refund A-1")
        wait_for(mark.exists, "a workflow task to be under way", first)
        first.kill()
    finally:
        first.stop()
    second = start_worker_process(temporal_url, tmp_path / "w2.log")
    try:
        waiting = runtime.settled(state.run_id)
        assert waiting.status is RunStatus.WAITING_FOR_USER and waiting.pending is not None
        done = runtime.approve(state.run_id, waiting.pending.request_id, by="alice")
        events = runtime.events(state.run_id)
    finally:
        second.stop()
    assert done.state.status is RunStatus.COMPLETED
    assert len(_lines(ledger)) == 1
    types = [e.type.value for e in events]
    assert types.count("run_started") == 1 and types.count("request_answered") == 1


def _read(runtime: TemporalRuntime, run_id: str) -> RunState | None:
    """The run, or None while no worker answers for it (one was just killed; its queue moves on within seconds)."""
    try:
        return runtime.get(run_id)
    except StoreError as unavailable:
        assert unavailable.code is ErrorCode.STORE_UNAVAILABLE
        return None


def test_workers_killed_at_random_lose_no_run_and_repeat_no_refund(
    runtime: TemporalRuntime, temporal_url: str, tmp_path: Path
) -> None:
    runs = 6
    ledgers = [tmp_path / f"ledger-{i}" for i in range(runs)]
    rng = random.Random(30)
    worker = start_worker_process(temporal_url, tmp_path / "w0.log")
    kills = 0
    try:
        states = [
            runtime.submit(registry.create("refunds", {"ledger": str(ledger), "hold_s": 0.3}), f"refund {i}")
            for i, ledger in enumerate(ledgers)
        ]
        pending = {s.run_id for s in states}
        answered: set[str] = set()
        deadline = time.monotonic() + 4 * DEADLINE_S
        while pending:
            assert time.monotonic() < deadline, f"runs neither finished nor waiting: {sorted(pending)}"
            for run_id in sorted(pending):
                state = _read(runtime, run_id)
                if state is None:
                    continue  # its worker was just killed: read it again on the next round
                if state.status is RunStatus.WAITING_FOR_USER and run_id not in answered:
                    assert state.pending is not None
                    runtime.approve(run_id, state.pending.request_id, by="alice", drive=False)
                    answered.add(run_id)
                elif state.status.is_terminal:
                    pending.discard(run_id)
            if pending and kills < 3:
                threading.Event().wait(rng.uniform(0.1, 0.6))
                worker.kill()
                kills += 1
                worker = start_worker_process(temporal_url, tmp_path / f"w{kills}.log")
        # Read while a worker is up: a run that just ended may still be writing its notices (its workflow open).
        ended = [runtime.get(s.run_id) for s in states]
    finally:
        worker.stop()
    assert [s.status for s in ended] == [RunStatus.COMPLETED] * runs
    assert [len(_lines(ledger)) for ledger in ledgers] == [1] * runs
    assert kills >= 2  # killed while runs were in flight (a kill comes only while one is pending)


def test_the_server_killed_and_restarted_on_its_database_keeps_the_waiting_run(tmp_path: Path) -> None:
    server = DevServer(tmp_path / "own.db").start()
    url = server.url(task_queue="chaos-server")
    ledger = tmp_path / "ledger"
    stop = threading.Event()
    try:
        thread = threading.Thread(target=run_worker, args=(url, registry), kwargs={"stop": stop}, daemon=True)
        thread.start()
        runtime = TemporalRuntime.open(url, agents=registry)
        state = runtime.start(registry.create("refunds", {"ledger": str(ledger)}), "refund A-1")
        assert state.status is RunStatus.WAITING_FOR_USER and state.pending is not None
        runtime.close()
        stop.set()
        thread.join(60)
        server.kill()
        server.start()  # the same port, the same database file
        stop = threading.Event()
        thread = threading.Thread(target=run_worker, args=(url, registry), kwargs={"stop": stop}, daemon=True)
        thread.start()
        runtime = TemporalRuntime.open(url, agents=registry)
        assert runtime.get(state.run_id).status is RunStatus.WAITING_FOR_USER
        done = runtime.approve(state.run_id, state.pending.request_id, by="alice")
        assert done.state.status is RunStatus.COMPLETED
        assert len(_lines(ledger)) == 1
        runtime.close()
    finally:
        stop.set()
        server.stop()


def test_every_recorded_history_replays_deterministically(
    runtime: TemporalRuntime, worker: None, tmp_path: Path
) -> None:
    """The SDK's replayer re-runs the workflow code over a finished run's history (an approval, a continue-as-new
    boundary's book, a reconciliation): any decision that came out differently (a clock, an id, an order) is a
    nondeterminism error, which a worker restarted mid-run would hit."""
    ledger = tmp_path / "ledger"
    state = runtime.start(registry.create("refunds", {"ledger": str(ledger)}), "refund A-1")
    assert state.pending is not None
    runtime.approve(state.run_id, state.pending.request_id, by="alice")
    lost = runtime.start(
        registry.create("refunds", {"ledger": str(ledger), "lookup": False, "timeout_s": 0.3, "hold_s": 1.0}),
        "refund A-2",
    )
    assert lost.pending is not None
    asked = runtime.approve(lost.run_id, lost.pending.request_id, by="alice").state
    assert asked.pending is not None
    runtime.reconcile(lost.run_id, asked.pending.request_id, happened=True, by="ops")

    async def replay() -> None:
        replayer = Replayer(workflows=[RunWorkflow], workflow_runner=sandbox(), data_converter=pydantic_data_converter)
        for run_id in (state.run_id, lost.run_id):
            history = await runtime._conn.handle(run_id).fetch_history()
            await replayer.replay_workflow(history)  # raises on any nondeterminism

    runtime._conn.run(replay())
