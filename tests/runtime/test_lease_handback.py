"""A drive's last commit gives the lease back in the same transaction (``StepWrite.release_lease``):
no separate release, the run claimable as soon as that commit lands; a drive that stops while the
run is still runnable releases as before."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stateward import Agent, AgentRegistry, ReActController, RunStatus, Runtime, ToolRegistry, tool
from stateward.models.base import ModelRequest
from stateward.runtime.async_worker import AsyncWorker
from stateward.runtime.worker import Worker
from stateward.store.base import Store
from stateward.store.records import Lease, StepWrite
from stateward.store.sqlite import SQLiteStore
from stateward.testing import ScriptedModel


@tool
def ping(n: int) -> int:
    """A no-op tool."""
    return n


@tool(requires_approval=True)
def launch(n: int) -> int:
    """A guarded tool: the run waits for a person before it."""
    return n


def build(action: str = "ping") -> Agent:
    def policy(request: ModelRequest) -> dict[str, Any]:
        if request.observations:
            return {"type": "FINISH", "reason": "done"}
        return {"type": "EXECUTE_TOOL", "action": action, "args": {"n": 1}}

    return Agent(name="handback", controller=ReActController(ScriptedModel(policy)), tools=ToolRegistry([ping, launch]))


AGENTS = AgentRegistry()
AGENTS.agent("handback")(build)


class Recording:
    """The store, with every call counted and every leased commit's ``release_lease`` flag kept."""

    def __init__(self, inner: Store):
        self.inner = inner
        self.calls: Counter[str] = Counter()
        self.commits: list[tuple[str, bool, bool]] = []  # (status written, leased, release_lease)

    def commit_step(self, run_id: str, expected_seq: int, write: StepWrite, lease: Lease | None = None) -> int:
        self.commits.append((write.state.status.value, lease is not None, write.release_lease))
        return self.inner.commit_step(run_id, expected_seq, write, lease)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return attr(*args, **kwargs)

        return call


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Recording]:
    recording = Recording(SQLiteStore(tmp_path / "runs.db"))
    yield recording
    recording.inner.close()


def test_the_final_commit_releases_the_lease_without_a_release_call(store: Recording) -> None:
    runtime = Runtime(store)  # type: ignore[arg-type]
    state = runtime.start(build(), "ping once")
    assert state.status is RunStatus.COMPLETED
    assert store.calls["release_lease"] == 0
    assert store.lease_of(state.run_id) is None
    assert store.commits[-1] == ("COMPLETED", True, True)
    assert all(not released for _, _, released in store.commits[:-1])  # only the last write hands it back


def test_a_run_that_waits_is_claimable_by_another_process_at_once(store: Recording) -> None:
    runtime = Runtime(store)  # type: ignore[arg-type]
    state = runtime.start(build("launch"), "launch")
    assert state.status is RunStatus.WAITING_FOR_USER
    assert store.calls["release_lease"] == 0 and store.lease_of(state.run_id) is None
    other = Runtime(store.inner, owner="other", agents=AGENTS)
    other.approve(state.run_id, "approval_001", by="alice", drive=False)
    lease = other.store.claim_next("other", ttl_s=30)  # nobody's lease to wait out
    assert lease is not None and lease.run_id == state.run_id
    assert other.drive_leased(lease).status is RunStatus.COMPLETED
    assert other.store.lease_of(state.run_id) is None


def test_a_drive_that_stops_while_runnable_still_releases(store: Recording) -> None:
    runtime = Runtime(store)  # type: ignore[arg-type]
    submitted = runtime.submit(build(), "ping once")
    state = runtime.step(submitted.run_id)  # one step: the run stays RUNNING
    assert state.status is RunStatus.RUNNING
    assert store.calls["release_lease"] == 1 and store.lease_of(state.run_id) is None
    assert not any(released for _, _, released in store.commits)


@pytest.mark.parametrize("kind", ["threads", "async"])
def test_workers_hand_the_lease_back_with_each_runs_last_commit(store: Recording, kind: str) -> None:
    runtime = Runtime(store, agents=AGENTS)  # type: ignore[arg-type]
    ids = [runtime.submit(build(), f"ping {i}").run_id for i in range(4)]
    worker = Worker(runtime, concurrency=2, poll_s=0.02) if kind == "threads" else AsyncWorker(runtime, poll_s=0.02)
    worker.run(idle_exit_s=0.2)
    assert [runtime.get(run_id).status for run_id in ids] == [RunStatus.COMPLETED] * 4
    assert store.calls["release_lease"] == 0
    assert all(store.lease_of(run_id) is None for run_id in ids)


class FailAfterCommit:
    """A failure right after a commit (as the fault-injection campaign makes one), the first time only."""

    def __init__(self) -> None:
        self.failed = False

    def point(self, name: str) -> None:
        if name == "after_commit" and not self.failed:
            self.failed = True
            raise RuntimeError("failed after the commit")


def test_a_failure_after_the_final_commit_records_nothing_on_the_handed_back_run(store: Recording) -> None:
    runtime = Runtime(store, faults=FailAfterCommit())  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="after the commit"):
        runtime.start(build("launch"), "launch")  # its first commit is its last: it waits for a person
    (row,) = store.list_runs()
    state = store.load_run(row.run_id)
    assert state.status is RunStatus.WAITING_FOR_USER and state.setback is None  # as committed, no crash record
    assert store.lease_of(row.run_id) is None
    approved = Runtime(store.inner, agents=AGENTS).approve(row.run_id, "approval_001", by="ann")
    assert approved.state.status is RunStatus.COMPLETED
