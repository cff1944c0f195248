"""The operator's surfaces against ``--db temporal://...``: ``run``, ``requests list``, ``runs list``, ``trace``,
``pause``/``resume``, with the JSON a store gives; budgets carried across a wait; what a Temporal backend does
not take refused by name. Listings read Temporal's visibility, which catches up a moment after a step: the
tests wait for it as an operator's inbox would."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from tests.temporal.conftest import cli, hosted_worker, start_worker_process, wait_for
from tests.temporal.temporal_agents import registry

from stateward.core.errors import ErrorCode, StoreError, UserError
from stateward.core.status import RunStatus
from stateward.temporal.client import TemporalRuntime
from stateward.temporal.dev_server import DevServer

pytestmark = [pytest.mark.temporal, pytest.mark.slow]


def _json(*args: str) -> Any:
    done = cli(*args, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def test_run_then_the_inbox_lists_it_and_approve_finishes_it(worker: None, temporal_url: str, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    started = _json("run", "refunds", "--goal", "refund A-1", "--param", f"ledger={ledger}", "--db", temporal_url)
    assert (started["status"], started["pending_request_id"]) == ("WAITING_FOR_USER", "approval_001")
    run_id = started["run_id"]

    def listed() -> list[dict[str, Any]]:
        return [r for r in _json("requests", "list", "--db", temporal_url) if r["run_id"] == run_id]

    wait_for(lambda: len(listed()) == 1, "the inbox to list the request")
    (item,) = listed()
    assert item["guarded_action"]["tool"] == "refund_order"
    assert item["guarded_action"]["args"] == {"order_id": "A-1", "amount_cents": 1250}
    waiting = _json("runs", "list", "--status", "WAITING_FOR_USER", "--db", temporal_url)
    assert run_id in [r["run_id"] for r in waiting["runs"]]

    done = _json("approve", run_id, "approval_001", "--db", temporal_url, "--by", "alice")
    assert done["status"] == "COMPLETED"
    wait_for(lambda: listed() == [], "the inbox to drop the answered request")
    traced = _json("trace", run_id, "--db", temporal_url)
    assert (traced[0]["type"], traced[-1]["type"]) == ("run_started", "run_exited")
    assert ledger.read_text().count("\n") == 1


def test_pause_at_a_step_boundary_then_resume_with_usage_carried(
    runtime: TemporalRuntime, worker: None, temporal_url: str, tmp_path: Path
) -> None:
    agent = registry.create("refunds", {"ledger": str(tmp_path / "ledger"), "think_s": 1.0})
    state = runtime.submit(agent, "refund A-1")
    assert runtime.pause(state.run_id, by="ops").status is RunStatus.RUNNING  # honoured at its next step boundary
    settled = runtime.settled(state.run_id)
    assert settled.status is RunStatus.PAUSED
    spent = settled.usage
    resumed = _json("resume", state.run_id, "--db", temporal_url, "--by", "ops")
    assert resumed["status"] == "WAITING_FOR_USER"
    after = runtime.get(state.run_id).usage
    assert after.steps > spent.steps and after.model_calls >= spent.model_calls  # carried on, never reset
    moves = [
        (e.payload["state_after"], e.payload["reason"], e.payload.get("by"))
        for e in runtime.events(state.run_id)
        if e.type.value == "state_transition"
    ]
    assert ("PAUSED", "paused", "ops") in moves and ("RUNNING", "resumed", "ops") in moves


def test_a_budget_spent_before_a_wait_stays_spent_after_it(
    runtime: TemporalRuntime, worker: None, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    state = runtime.start(registry.create("refunds", {"ledger": str(ledger), "max_steps": 2}), "refund A-1")
    assert state.status is RunStatus.WAITING_FOR_USER and state.pending is not None
    assert state.usage.steps == 2
    done = runtime.approve(state.run_id, state.pending.request_id, by="alice").state
    assert (done.status, done.terminal_reason) == (RunStatus.FAILED, "budget_exhausted")
    assert done.usage.steps == 2
    assert not ledger.exists()  # the approved call was not made past the bound


def test_commands_and_urls_a_temporal_backend_does_not_take_are_refused_by_name(temporal_url: str) -> None:
    fork = cli("runs", "fork", "run_x", "--at", "1", "--db", temporal_url, "--json")
    assert fork.returncode != 0
    assert json.loads(fork.stdout)["error"]["code"] == "STORE_UNSUPPORTED"
    with pytest.raises(UserError) as bad:
        TemporalRuntime.open("temporal://127.0.0.1:7233/a/b")
    assert bad.value.code is ErrorCode.CONFIGURATION_ERROR
    with pytest.raises(UserError) as unknown:
        TemporalRuntime.open("temporal://127.0.0.1:7233/default?queue=x")
    assert unknown.value.code is ErrorCode.CONFIGURATION_ERROR
    with pytest.raises(StoreError) as down:
        TemporalRuntime.open("temporal://127.0.0.1:1/default")
    assert down.value.code is ErrorCode.STORE_UNAVAILABLE


def test_stats_and_the_gates_audit_read_a_temporal_backend(temporal_server: DevServer, tmp_path: Path) -> None:
    namespace = temporal_server.create_namespace(f"stats-{uuid.uuid4().hex[:8]}")  # its runs alone
    temporal_url = temporal_server.url(task_queue="stats", namespace=namespace)
    with hosted_worker(temporal_url):
        _stats_and_gates(temporal_url, tmp_path / "ledger")


def _stats_and_gates(temporal_url: str, ledger: Path) -> None:
    started = _json("run", "refunds", "--goal", "refund A-1", "--param", f"ledger={ledger}", "--db", temporal_url)
    _json("approve", started["run_id"], "approval_001", "--db", temporal_url, "--by", "alice")
    waiting = _json("run", "refunds", "--goal", "refund A-2", "--param", f"ledger={ledger}", "--db", temporal_url)

    def counted() -> dict[str, Any]:
        stats: dict[str, Any] = _json("stats", "--db", temporal_url)
        return stats

    wait_for(lambda: counted()["runs_scanned"] == 2, "visibility to list both runs")
    by_status = {status: n for status, n in counted()["runs_by_status"].items() if n}
    assert by_status == {"COMPLETED": 1, "WAITING_FOR_USER": 1}
    gates = cli("gates", "--db", temporal_url, "--json")
    assert gates.returncode == 0, gates.stdout + gates.stderr
    report = json.loads(gates.stdout)
    assert report["passed"] is True and report["breaches"] == []
    assert waiting["status"] == "WAITING_FOR_USER" and ledger.read_text().count("\n") == 1


def test_a_worker_of_several_processes_polls_from_each(
    runtime: TemporalRuntime, temporal_url: str, tmp_path: Path
) -> None:
    fleet = start_worker_process(temporal_url, tmp_path / "fleet.log", "--processes", "2", announced=2)
    try:
        ledger = tmp_path / "ledger"
        state = runtime.start(registry.create("refunds", {"ledger": str(ledger)}), "refund A-1")
        assert state.status is RunStatus.WAITING_FOR_USER and state.pending is not None
        done = runtime.approve(state.run_id, state.pending.request_id, by="alice")
        assert done.state.status is RunStatus.COMPLETED and ledger.read_text().count("\n") == 1
    finally:
        fleet.stop()
    assert fleet.proc.returncode == 0
    assert "processes=2 replaced=0 exit=0" in fleet.log.read_text()
