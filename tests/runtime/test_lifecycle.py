"""Leases, pause / resume / cancel, the approval protocol, expiry and workers on a real SQLite file."""

from __future__ import annotations

import dataclasses
import math
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from stateward import RequestRefusedError, RunError, RunStatus, Runtime, StaleLeaseError, UserError
from stateward.core.events import EventType, NewEvent
from stateward.models.base import ModelRequest
from stateward.models.scripted import ScriptedModel
from stateward.runtime.leases import LeasePolicy
from stateward.runtime.worker import Worker
from stateward.store.records import StepWrite
from stateward.store.sqlite import SQLiteStore
from stateward_demos import blog_fixtures as fx
from stateward_demos.blog import build_agent


class FakeClock:
    def __init__(self) -> None:
        self.now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.mark.parametrize(
    ("ttl_s", "heartbeat_s"), [(20, 10), (math.nan, 1), (30, math.nan), (math.inf, 1), (30, 0), (30, -1)]
)
def test_a_lease_policy_needs_finite_positive_seconds_and_a_ttl_of_three_heartbeats(
    ttl_s: float, heartbeat_s: float
) -> None:
    # A NaN TTL would be stored as no expiry: a lease that no worker could ever take over.
    with pytest.raises(UserError) as err:
        LeasePolicy(ttl_s=ttl_s, heartbeat_s=heartbeat_s)
    assert err.value.code == "INVALID_LEASE_POLICY"


@pytest.mark.parametrize(
    "config",
    [{"concurrency": 0}, {"poll_s": 0}, {"expire_every_s": -1}, {"poll_s": math.nan}, {"expire_every_s": math.inf}],
)
def test_a_worker_refuses_a_configuration_it_cannot_run(runtime: Runtime, config: dict[str, Any]) -> None:
    with pytest.raises(UserError) as err:
        Worker(runtime, **config)
    assert err.value.code == "INVALID_WORKER_CONFIG"


def test_worker_concurrency_is_bounded_by_what_each_kind_can_run(runtime: Runtime) -> None:
    # A thread per slot: 100,000 slots would start 100,000 polling threads. Tasks are cheaper, not free.
    from stateward.runtime.async_worker import AsyncWorker

    assert Worker(runtime, concurrency=256).concurrency == 256
    assert AsyncWorker(runtime, concurrency=10_000).concurrency == 10_000
    for kind, too_many in ((Worker, 257), (AsyncWorker, 10_001)):
        with pytest.raises(UserError) as err:
            kind(runtime, concurrency=too_many)
        assert err.value.code == "INVALID_WORKER_CONFIG"


@pytest.mark.parametrize("idle_exit_s", [math.nan, -1.0, 0.0])
def test_a_worker_refuses_an_idle_exit_it_could_never_reach(runtime: Runtime, idle_exit_s: float) -> None:
    with pytest.raises(UserError) as err:
        Worker(runtime).run(idle_exit_s=idle_exit_s)
    assert err.value.code == "INVALID_WORKER_CONFIG"


def test_superseded_lease_holder_is_fenced(runtime: Runtime) -> None:
    state = runtime.submit(build_agent("react"), fx.GOAL)
    store = runtime.store
    old = store.acquire_lease(state.run_id, "worker-a", ttl_s=0.05)
    with pytest.raises(RunError) as held:
        store.acquire_lease(state.run_id, "worker-b", ttl_s=5)
    assert held.value.code == "LEASE_HELD"
    time.sleep(0.1)
    new = store.acquire_lease(state.run_id, "worker-b", ttl_s=5)
    assert new.version == old.version + 1

    before = store.read_events(state.run_id)
    write = StepWrite(state=state, events=[NewEvent(type=EventType.RUN_EXITED, payload={"zombie": True})])
    with pytest.raises(StaleLeaseError):
        store.commit_step(state.run_id, len(before), write, old)
    with pytest.raises(StaleLeaseError):
        store.renew_lease(old, 5)
    assert store.read_events(state.run_id) == before
    # Without a lease, nobody may write while a live lease is held.
    with pytest.raises(RunError) as unleased:
        store.commit_step(state.run_id, len(before), write)
    assert unleased.value.code == "LEASE_HELD"
    store.commit_step(state.run_id, len(before), write, new)
    assert store.read_events(state.run_id)[-1].lease_version == new.version


def _pausing_policy(runtime: Runtime, at_call: int) -> ScriptedModel:
    """The blog script, with an operator asking for a pause while the model is deciding call N."""
    calls = {"n": 0}

    def policy(req: ModelRequest) -> dict[str, Any]:
        calls["n"] += 1
        if calls["n"] == at_call:
            for row in runtime.store.list_runs():
                runtime.store.set_control(row.run_id, "pause")
        return fx.react_policy(req)

    return ScriptedModel(policy)


def test_pause_and_resume_mid_run_continue_exactly(runtime: Runtime) -> None:
    state = runtime.start(build_agent("react", max_steps=12, model=_pausing_policy(runtime, 3)), fx.GOAL)
    assert state.status is RunStatus.PAUSED
    paused_usage = state.usage
    assert paused_usage.tool_attempts == 3
    checkpoint = runtime.store.latest_checkpoint(state.run_id)
    assert checkpoint is not None and checkpoint.reason == "pause" and checkpoint.state == state
    transitions = [
        (e.payload["state_before"], e.payload["state_after"])
        for e in runtime.store.read_events(state.run_id)
        if e.type is EventType.STATE_TRANSITION
    ]
    assert transitions[-2:] == [("RUNNING", "PAUSING"), ("PAUSING", "PAUSED")]
    assert runtime.store.lease_of(state.run_id) is None  # released

    resumed = runtime.resume(state.run_id, by="ops")
    assert resumed.status is RunStatus.WAITING_FOR_USER
    events = runtime.store.read_events(state.run_id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    resumed_event = next(e for e in events if e.type is EventType.RUN_RESUMED)
    assert resumed_event.payload["usage"] == paused_usage.model_dump()
    calls = Counter(
        (e.payload["observation"]["action"], str(e.payload["observation"]["args"]))
        for e in events
        if e.type is EventType.TOOL_ATTEMPTED
    )
    assert max(calls.values()) == 1  # no successful tool call was repeated
    assert resumed.usage.tool_attempts == 4 and resumed.usage.steps == 5  # the budget went on, never reset


def test_cancel_closes_requests_and_later_answers_are_refused(runtime: Runtime) -> None:
    state = runtime.start(build_agent("workflow"), fx.GOAL)
    cancelled = runtime.cancel(state.run_id, by="ops")
    assert cancelled.status is RunStatus.CANCELLED and cancelled.pending is None
    with pytest.raises(RequestRefusedError) as err:
        runtime.approve(state.run_id, "approval_001", by="alice")
    assert err.value.code == "REQUEST_CLOSED"
    with pytest.raises(RunError) as again:
        runtime.cancel(state.run_id)
    assert again.value.code == "RUN_ENDED"


def _protocol_agent(**changes: Any) -> Any:
    return dataclasses.replace(build_agent("react", max_steps=12), **changes)


def test_approval_protocol_checks_role_digest_and_tenant(db_path: Path) -> None:
    runtime = Runtime(SQLiteStore(db_path))
    state = runtime.start(_protocol_agent(approver_role="editor"), fx.GOAL, tenant="acme")
    assert state.pending is not None and state.pending.guarded_action is not None
    digest = state.pending.guarded_action.digest
    snapshot = runtime.store.load_run_at(state.run_id)
    refusals = [
        ({"roles": frozenset({"viewer"})}, "ROLE_NOT_ALLOWED"),
        ({"roles": frozenset({"editor"}), "digest": "0" * 64}, "ACTION_DIGEST_MISMATCH"),
        ({"roles": frozenset({"editor"}), "tenant": "globex"}, "UNKNOWN_REQUEST"),
    ]
    for kwargs, code in refusals:
        with pytest.raises(RequestRefusedError) as err:
            runtime.approve(state.run_id, "approval_001", by="eve", **kwargs)
        assert err.value.code == code
        assert runtime.store.load_run_at(state.run_id) == snapshot
    ok = runtime.approve(
        state.run_id, "approval_001", by="ed", roles=frozenset({"editor"}), digest=digest, tenant="acme"
    )
    assert ok.state.status is RunStatus.COMPLETED
    runtime.close()


@pytest.mark.parametrize(("policy", "status"), [("fail", RunStatus.FAILED), ("cancel", RunStatus.CANCELLED)])
def test_expired_request_follows_the_agents_policy(db_path: Path, policy: str, status: RunStatus) -> None:
    clock = FakeClock()
    runtime = Runtime(SQLiteStore(db_path), clock=clock)
    state = runtime.start(_protocol_agent(request_ttl=timedelta(hours=1), on_request_expiry=policy), fx.GOAL)
    clock.now += timedelta(hours=2)
    with pytest.raises(RequestRefusedError) as err:
        runtime.approve(state.run_id, "approval_001", by="late")
    assert err.value.code == "REQUEST_EXPIRED"
    assert runtime.expire_requests() == ["approval_001"]
    assert runtime.get(state.run_id).status is status
    with pytest.raises(RequestRefusedError) as closed:
        runtime.approve(state.run_id, "approval_001", by="late")
    assert closed.value.code == "REQUEST_CLOSED"
    runtime.close()


def test_expired_request_escalates_to_another_role(db_path: Path) -> None:
    clock = FakeClock()
    runtime = Runtime(SQLiteStore(db_path), clock=clock)
    agent = _protocol_agent(
        request_ttl=timedelta(hours=1), approver_role="editor", on_request_expiry="escalate", escalation_role="chief"
    )
    state = runtime.start(agent, fx.GOAL)
    clock.now += timedelta(hours=2)
    runtime.expire_requests()
    waiting = runtime.get(state.run_id)
    assert waiting.status is RunStatus.WAITING_FOR_USER
    assert waiting.pending is not None
    assert (waiting.pending.request_id, waiting.pending.approver_role) == ("approval_002", "chief")
    with pytest.raises(RequestRefusedError):
        runtime.approve(state.run_id, "approval_002", by="ed", roles=frozenset({"editor"}))
    done = runtime.approve(state.run_id, "approval_002", by="cj", roles=frozenset({"chief"}))
    assert done.state.status is RunStatus.COMPLETED
    runtime.close()


def test_workers_pick_up_submitted_and_approved_runs(db_path: Path) -> None:
    runtime = Runtime(SQLiteStore(db_path), lease=LeasePolicy(ttl_s=3, heartbeat_s=1))
    runs = [
        runtime.submit(build_agent(mode, max_steps=12), fx.GOAL).run_id
        for mode in ("react", "plan_and_execute", "workflow")
    ]
    Worker(runtime, concurrency=2, poll_s=0.02).run(idle_exit_s=0.3)
    assert {runtime.get(r).status for r in runs} == {RunStatus.WAITING_FOR_USER}
    for r in runs:
        recorded = runtime.approve(r, "approval_001", by="alice", drive=False)
        assert recorded.state.status is RunStatus.RUNNING
    stats = Worker(runtime, concurrency=2, poll_s=0.02).run(idle_exit_s=0.3)
    assert {runtime.get(r).status for r in runs} == {RunStatus.COMPLETED}
    assert stats.claimed == 3 and stats.stale_leases == 0
    runtime.close()
