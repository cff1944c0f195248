"""A forked child that hangs is killed at its deadline and reported as a liveness failure, never waited for.

The hang is the one a fresh-clone CI run met: a child inherits an object whose lock a long-lived thread
of the parent holds; the child has no such thread, so nothing ever releases it. Each test makes that
hang for real (a parent thread holds a lock the child's code then takes) and shows the campaign, the
storm and ``stateward gates`` report it and end instead of hanging.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stateward.chaos.forked import ChildWatch, kill_child
from stateward.chaos.harness import ChaosConfig, Harness
from stateward.chaos.verify import broken
from stateward.cli.app import app
from stateward.runtime.agent_registry import AgentRegistry
from stateward.runtime.leases import LeasePolicy
from stateward.runtime.runtime import Runtime


@pytest.fixture
def held_lock() -> Iterator[threading.Lock]:
    """A lock a long-lived thread of this process holds until the test ends (a forked child inherits it held)."""
    lock = threading.Lock()
    taken, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            taken.set()
            release.wait()

    holder = threading.Thread(target=hold, name="long-lived-parent-thread", daemon=True)
    holder.start()
    taken.wait()
    yield lock
    release.set()
    holder.join()


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_forked_driver_that_hangs_is_killed_at_its_deadline_and_reported(
    tmp_path: Path, held_lock: threading.Lock
) -> None:
    def finish(runtime: Runtime, run_id: str, deadline: float) -> object:
        with held_lock:  # in the child, the thread holding it does not exist: this never returns
            return None

    watch = ChildWatch(timeout_s=1.0)
    killed = kill_child(
        str(tmp_path / "c.db"), AgentRegistry(), "run_x", "before_commit", 1, LeasePolicy(), finish, watch
    )
    assert killed is False  # a hung child is never counted as a kill at the boundary
    assert [h.role for h in watch.hung] == ["driver"]
    assert watch.hung[0].waited_s >= 1.0 and gone(watch.hung[0].pid)


def test_a_driver_that_ends_in_time_is_not_reported(tmp_path: Path) -> None:
    watch = ChildWatch(timeout_s=20.0)
    kill_child(
        str(tmp_path / "c.db"), AgentRegistry(), "run_x", "before_commit", 1, LeasePolicy(), lambda *a: None, watch
    )
    assert watch.hung == []


def _hanging_worker(monkeypatch: pytest.MonkeyPatch, lock: threading.Lock) -> None:
    """Storm workers (forked after this patch) take the held lock before claiming a run."""
    from stateward.runtime.worker import Worker

    original = Worker._once

    def once(self: Worker, owner: str) -> bool:
        with lock:
            return original(self, owner)

    monkeypatch.setattr(Worker, "_once", once)


@pytest.mark.slow
def test_a_storm_worker_that_hangs_is_killed_reported_and_breaks_the_storm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, held_lock: threading.Lock
) -> None:
    _hanging_worker(monkeypatch, held_lock)
    cfg = ChaosConfig(
        db=str(tmp_path / "storm.db"), runs=2, kills=0, workers=1, child_deadline_s=2.0, worker_lifetime_s=1.0
    )
    report = Harness(cfg).run()
    assert [h["role"] for h in report["hung_children"]] == ["worker"]
    assert report["kills"] == 0  # killed for hanging, not a storm kill
    assert "hung_children" in broken(report)


@pytest.mark.slow
def test_gates_names_the_cell_of_a_hung_child_and_exits_non_zero(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, held_lock: threading.Lock
) -> None:
    _hanging_worker(monkeypatch, held_lock)
    args = ["gates", "--store", str(tmp_path / "g.db"), "--json", "--child-timeout", "2"]
    args += ["--only", "sigkill-at-persistence-boundary", "--agent", "chaos-ledger"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1, result.output
    data = json.loads(result.stdout)
    assert "hung_children" in data["breaches"] and data["passed"] is False
    failures = data["campaign"]["liveness_failures"]
    assert failures and {(f["agent"], f["fault"], f["role"]) for f in failures} == {
        ("chaos-ledger", "sigkill-at-persistence-boundary", "worker")
    }
    cells = {(c["agent"], c["fault"]): c for c in data["campaign"]["cells"]}
    assert cells[("chaos-ledger", "sigkill-at-persistence-boundary")]["hung"] == len(failures)


def test_a_hung_driver_is_a_liveness_failure_of_its_cell_and_the_campaign_stops_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, held_lock: threading.Lock
) -> None:
    from stateward.chaos import campaign
    from stateward.chaos.campaign import Campaign, Coverage, SourceFault
    from stateward.runtime.agent_registry import process_agents

    agents = process_agents(with_test_agents=True)
    assert "refund" in agents, "the demos' agents are not registered: ./scripts/dev setup installs demos/"
    parent, original = os.getpid(), campaign._finish

    def finish(runtime: Runtime, run_id: str, deadline: float, *args: object, **kwargs: object) -> object:
        if os.getpid() != parent:  # only the forked drivers hang; this process finishes the run
            with held_lock:
                pass
        return original(runtime, run_id, deadline, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(campaign, "_finish", finish)
    faults = (SourceFault.SIGKILL_AT_BOUNDARY, SourceFault.TIMEOUT_ONCE)
    ran = Campaign(
        str(tmp_path / "c.db"), agents, only=faults, agents_only=("refund",), child_timeout_s=1.0, workdir=str(tmp_path)
    ).run()
    assert [(f.agent, f.fault, f.role) for f in ran.liveness_failures] == [
        ("refund", SourceFault.SIGKILL_AT_BOUNDARY, "driver")
    ]
    cells = {c.fault: c for c in ran.cells if c.agent == "refund"}
    assert cells[SourceFault.SIGKILL_AT_BOUNDARY].hung == 1 and cells[SourceFault.SIGKILL_AT_BOUNDARY].kills == 0
    stopped = cells[SourceFault.TIMEOUT_ONCE]
    assert stopped.coverage is Coverage.NOT_COVERED and "liveness failure" in stopped.reason
