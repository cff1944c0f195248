"""The runtime on PostgreSQL: the same blog agent, unchanged, stops and completes on either store,
and two workers (two pools, as on two machines) share the runs without a stale write."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from typing import TYPE_CHECKING, Any

import pytest

from stateward import RunStatus, Runtime, is_run_suspended
from stateward.runtime.leases import LeasePolicy
from stateward.runtime.worker import Worker, WorkerStats
from stateward.store.postgres import PostgresStore
from stateward_demos import blog_fixtures as fx
from stateward_demos.blog import MODES, build_agent

if TYPE_CHECKING:
    from tests.store.conftest import Backend

FAST_LEASES = LeasePolicy(ttl_s=3, heartbeat_s=1)


@pytest.mark.parametrize("mode", MODES)
def test_the_blog_agent_stops_for_approval_and_completes(backend: Backend, mode: str) -> None:
    starter = Runtime(backend.open())
    state = starter.start(build_agent(mode, max_steps=12), fx.GOAL)
    assert state.status is RunStatus.WAITING_FOR_USER and is_run_suspended(state)
    assert state.pending is not None and state.pending.request_id == "approval_001"
    assert starter.store.get_artifact(state.run_id, "draft") is None

    # Another process answers: it rebuilds the agent from the stored reference.
    answerer = Runtime(backend.open())
    result = answerer.approve(state.run_id, "approval_001", by="alice")
    assert result.state.status is RunStatus.COMPLETED
    assert result.state.artifacts == {"brief": 1, "draft": 1}
    events = answerer.store.read_events(state.run_id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    checkpoint = answerer.store.latest_checkpoint(state.run_id)
    assert checkpoint is not None and checkpoint.reason == "terminal" and checkpoint.state == result.state


def _work(runtimes: list[Runtime]) -> list[WorkerStats]:
    """Run one worker per runtime at once until all are idle."""
    stats: list[WorkerStats] = [WorkerStats() for _ in runtimes]

    def run(i: int) -> None:
        stats[i] = Worker(runtimes[i], concurrency=2, poll_s=0.02, expire_every_s=60).run(idle_exit_s=0.4)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(runtimes))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return stats


@pytest.mark.postgres
def test_two_workers_share_the_runs(pg_url: str) -> None:
    runtimes = [Runtime(PostgresStore(pg_url), lease=FAST_LEASES, owner=f"machine-{i}") for i in range(2)]
    try:
        runs = [runtimes[0].submit(build_agent(mode, max_steps=12), fx.GOAL).run_id for mode in MODES * 2]
        first = _work(runtimes)
        assert {runtimes[1].get(r).status for r in runs} == {RunStatus.WAITING_FOR_USER}
        for r in runs:
            runtimes[1].approve(r, "approval_001", by="alice", drive=False)
        second = _work(runtimes)
        assert {runtimes[0].get(r).status for r in runs} == {RunStatus.COMPLETED}

        stats = first + second
        assert sum(s.claimed for s in stats) == 2 * len(runs)
        assert sum(s.stale_leases + s.errors for s in stats) == 0
        store = runtimes[0].store
        for r in runs:
            events = store.read_events(r)
            assert [e.seq for e in events] == list(range(1, len(events) + 1))
            fenced = [e.lease_version for e in events if e.lease_version]
            assert fenced == sorted(fenced) and len(set(fenced)) == 2  # one lease per drive
            assert store.lease_of(r) is None
    finally:
        for rt in runtimes:
            rt.close()


@pytest.mark.postgres
@pytest.mark.slow
def test_the_cli_stops_and_approves_across_processes_on_postgres(pg_url: str) -> None:
    def sw(*args: str) -> dict[str, Any]:
        proc = subprocess.run(
            [sys.executable, "-m", "stateward.cli.main", *args, "--json"],
            capture_output=True,
            text=True,
            env={**os.environ, "STATEWARD_DB": pg_url},
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr + proc.stdout
        assert "Traceback" not in proc.stderr and "Warning" not in proc.stderr
        out: dict[str, Any] = json.loads(proc.stdout)
        return out

    started = sw("demo", "blog", "--controller", "react")
    assert started["status"] == "WAITING_FOR_USER"
    approved = sw("approve", started["run_id"], "approval_001", "--by", "alice")
    assert approved["status"] == "COMPLETED" and approved["already_answered"] is False
