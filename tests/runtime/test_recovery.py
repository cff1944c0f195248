"""A worker survives anything a run does, and no run is stranded (real SQLite files, real workers)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from stateward import RunStatus, Runtime
from stateward.core.contract import DecisionContext, Proposal
from stateward.core.decision import ControlDecision, DecisionType, SignalSource
from stateward.core.events import EventType
from stateward.core.setback import SetbackKind
from stateward.core.state import AgentRef
from stateward.models.base import ModelReply, ModelRequest
from stateward.models.errors import RateLimitedError, ServiceUnavailableError
from stateward.models.retrying import RetryingModel
from stateward.models.scripted import ScriptedModel
from stateward.runtime.agent import Agent
from stateward.runtime.leases import LeasePolicy
from stateward.runtime.recovery import MAX_MESSAGE, RecoveryPolicy
from stateward.runtime.worker import Worker
from stateward.store.sqlite import SQLiteStore
from stateward.tools import ToolRegistry, tool
from stateward_demos import blog_fixtures as fx
from stateward_demos.blog import build_agent

FAST = RecoveryPolicy(
    step_crash_retries=2, agent_unavailable_retries=2, base_delay_s=0.05, outage_base_delay_s=60, max_delay_s=0.2
)
MISSING = AgentRef(name="stateward_no_such_agents:build")


class FakeClock:
    def __init__(self) -> None:
        self.now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


class Raising:
    """A controller whose decide raises a plain ValueError: a bug outside every named error."""

    mode = "react"

    def __init__(self, message: str = "cannot hash NaN"):
        self.message = message

    def decide(self, ctx: DecisionContext) -> Proposal:
        raise ValueError(self.message)


class CallsOddTool:
    """Proposes the one tool whose result no serializer can store (escapes the gateway's handling)."""

    mode = "react"

    def decide(self, ctx: DecisionContext) -> Proposal:
        return Proposal(
            signal=ControlDecision(type=DecisionType.EXECUTE_TOOL, action="odd", args={}),
            source=SignalSource.MODEL,
            visible_actions=frozenset({"odd"}),
        )


@tool(description="Returns something that is not JSON.")
def odd() -> Any:
    return object()


def crashing_agent() -> Agent:
    return dataclasses.replace(build_agent("react"), controller=Raising())


def odd_tool_agent() -> Agent:
    return dataclasses.replace(build_agent("react"), controller=CallsOddTool(), tools=ToolRegistry([odd]))


def events_of(runtime: Runtime, run_id: str, kind: EventType) -> list[dict[str, Any]]:
    return [e.payload for e in runtime.store.read_events(run_id) if e.type is kind]


# -- item 5: a step that raises ---------------------------------------------------------------------
def test_a_step_that_raises_is_recorded_held_back_and_its_lease_released(runtime: Runtime) -> None:
    state = runtime.start(crashing_agent(), fx.GOAL)
    assert state.status is RunStatus.RUNNING
    assert state.setback is not None and state.setback.kind is SetbackKind.STEP_CRASHED
    assert state.setback.retry_at is not None and state.setback.error == "ValueError"
    [crash] = events_of(runtime, state.run_id, EventType.STEP_CRASHED)
    assert (crash["error"], crash["message"], crash["count"], crash["retries"]) == (
        "ValueError",
        "cannot hash NaN",
        1,
        3,
    )
    assert runtime.store.lease_of(state.run_id) is None
    assert runtime.store.claim_next("w", ttl_s=5) is None  # backing off: not claimable before its time
    assert runtime.get(state.run_id) == state


def test_a_crash_message_is_one_bounded_redacted_line(runtime: Runtime) -> None:
    noisy = "password=hunter2 Authorization: Bearer abc.def " + "x" * 5000 + "\nTraceback (most recent call last):"
    state = runtime.start(dataclasses.replace(build_agent("react"), controller=Raising(noisy)), fx.GOAL)
    [crash] = events_of(runtime, state.run_id, EventType.STEP_CRASHED)
    assert len(crash["message"]) <= MAX_MESSAGE
    assert "hunter2" not in crash["message"] and "abc.def" not in crash["message"]
    assert "Traceback" not in crash["message"]


def test_a_worker_meeting_crashing_and_unbuildable_runs_keeps_driving_the_others(db_path: Path) -> None:
    runtime = Runtime(SQLiteStore(db_path), lease=LeasePolicy(ttl_s=3, heartbeat_s=1), recovery=FAST)
    good = [runtime.submit(build_agent(mode), fx.GOAL).run_id for mode in ("react", "workflow")]
    crashing = runtime.submit(crashing_agent(), fx.GOAL).run_id
    odd_tool = runtime.submit(odd_tool_agent(), fx.GOAL).run_id
    # Submitted by another process: this worker's process cannot build its agent.
    elsewhere = Runtime(SQLiteStore(db_path))
    unbuildable = elsewhere.submit(dataclasses.replace(build_agent("react"), ref=MISSING), fx.GOAL).run_id
    elsewhere.close()

    stats = Worker(runtime, concurrency=2, poll_s=0.02).run(idle_exit_s=1.0)

    assert {runtime.get(r).status for r in good} == {RunStatus.WAITING_FOR_USER}
    for run_id in (crashing, odd_tool):
        ended = runtime.get(run_id)
        assert (ended.status, ended.terminal_reason) == (RunStatus.FAILED, "step_crashed")
        crashes = events_of(runtime, run_id, EventType.STEP_CRASHED)
        assert [c["count"] for c in crashes] == [1, 2, 3]
        assert crashes[-1]["retry_at"] is None
    assert events_of(runtime, odd_tool, EventType.STEP_CRASHED)[0]["error"] == "PydanticSerializationError"
    parked = runtime.get(unbuildable)
    assert (parked.status, parked.terminal_reason) == (RunStatus.PAUSED, "agent_unavailable")
    unavailable = events_of(runtime, unbuildable, EventType.AGENT_UNAVAILABLE)
    assert [u["count"] for u in unavailable] == [1, 2, 3]
    assert {u["error"] for u in unavailable} == {"AGENT_NOT_REGISTERED"}
    retry_times = [datetime.fromisoformat(u["retry_at"]) for u in unavailable[:2]]
    assert retry_times[1] - retry_times[0] >= timedelta(seconds=0.1)  # the delay grows
    assert all(runtime.store.lease_of(r) is None for r in (crashing, odd_tool, unbuildable))
    assert (stats.crashed_steps, stats.agent_unavailable, stats.runs_failed, stats.runs_parked) == (6, 3, 2, 1)
    assert stats.loop_errors == 0 and stats.troubled
    runtime.close()


def test_a_worker_stops_once_max_crashes_steps_crashed(db_path: Path) -> None:
    runtime = Runtime(SQLiteStore(db_path), recovery=FAST)
    crashing = runtime.submit(crashing_agent(), fx.GOAL).run_id
    stats = Worker(runtime, poll_s=0.02, max_crashes=1).run(idle_exit_s=5.0)
    assert stats.stopped_on_crashes and stats.crashed_steps == 1
    assert runtime.get(crashing).status is RunStatus.RUNNING  # held back for the next worker, not lost
    runtime.close()


def test_a_broken_loop_is_logged_counted_and_survived(db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = Runtime(SQLiteStore(db_path))
    run_id = runtime.submit(build_agent("react"), fx.GOAL).run_id
    real_claim = runtime.store.claim_next
    calls = {"n": 0}

    def claim_once_broken(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise KeyError("a bug in the loop itself")
        return real_claim(*args, **kwargs)

    monkeypatch.setattr(runtime.store, "claim_next", claim_once_broken)
    stats = Worker(runtime, poll_s=0.02).run(idle_exit_s=0.3)
    assert stats.loop_errors == 1
    assert runtime.get(run_id).status is RunStatus.WAITING_FOR_USER
    runtime.close()


# -- item 9: answers a process cannot drive ---------------------------------------------------------
def test_an_answer_this_process_cannot_drive_leaves_the_run_resumable(db_path: Path) -> None:
    owner = Runtime(SQLiteStore(db_path))  # the process that has the agent
    state = owner.start(dataclasses.replace(build_agent("react"), ref=MISSING), fx.GOAL)
    assert state.status is RunStatus.WAITING_FOR_USER
    other = Runtime(SQLiteStore(db_path))  # a process that cannot build it

    recorded = other.approve(state.run_id, "approval_001", by="alice")
    assert recorded.not_driven is not None and recorded.not_driven.code == "AGENT_NOT_REGISTERED"
    assert recorded.state.status is RunStatus.RUNNING and not recorded.already_answered
    again = other.approve(state.run_id, "approval_001", by="alice")
    assert again.already_answered and again.not_driven is not None
    assert other.store.lease_of(state.run_id) is None  # claimable by a worker

    driven = owner.approve(state.run_id, "approval_001", by="alice")  # the same answer, where it can drive
    assert driven.already_answered and driven.not_driven is None
    assert driven.state.status is RunStatus.COMPLETED
    assert len(events_of(owner, state.run_id, EventType.REQUEST_ANSWERED)) == 1
    other.close()
    owner.close()


def test_resume_drives_a_running_run_left_by_an_answer(db_path: Path) -> None:
    owner = Runtime(SQLiteStore(db_path))
    state = owner.start(dataclasses.replace(build_agent("react"), ref=MISSING), fx.GOAL)
    other = Runtime(SQLiteStore(db_path))
    other.approve(state.run_id, "approval_001", by="alice")
    other.close()
    assert owner.resume(state.run_id, by="ops").status is RunStatus.COMPLETED
    owner.close()


# -- item 9: a model outage -------------------------------------------------------------------------
class Outage:
    """The scripted blog model behind a provider that is down for the first ``failures`` calls."""

    name = "outage"

    def __init__(self, failures: int, error: type[Exception] = ServiceUnavailableError):
        self.failures = failures
        self.error = error
        self.inner = ScriptedModel(fx.react_policy)

    def complete(self, request: ModelRequest) -> ModelReply:
        if self.failures > 0:
            self.failures -= 1
            raise self.error("upstream 503")
        return self.inner.complete(request)


def outage_runtime(db_path: Path, clock: FakeClock, retries: int = 2) -> Runtime:
    policy = RecoveryPolicy(model_outage_retries=retries, outage_base_delay_s=60, max_delay_s=3600)
    return Runtime(SQLiteStore(db_path), clock=clock, recovery=policy, lease=LeasePolicy(ttl_s=3, heartbeat_s=1))


def outage_agent(outage: Outage) -> Agent:
    return build_agent("react", model=RetryingModel(outage, max_attempts=2, sleep=lambda s: None))


def test_a_model_outage_pauses_with_a_retry_time_and_a_worker_resumes_it_then(db_path: Path) -> None:
    clock = FakeClock()
    runtime = outage_runtime(db_path, clock)
    outage = Outage(failures=4)  # two outages of two attempts each
    state = runtime.start(outage_agent(outage), fx.GOAL)
    assert (state.status, state.terminal_reason) == (RunStatus.PAUSED, "model_unavailable")
    assert state.setback is not None and state.setback.retry_at == clock.now + timedelta(seconds=60)
    assert runtime.resume_due() == []  # not yet

    clock.now += timedelta(seconds=61)
    Worker(runtime, poll_s=0.02, expire_every_s=0.05).run(idle_exit_s=0.3)
    second = runtime.get(state.run_id)
    assert (second.status, second.terminal_reason) == (RunStatus.PAUSED, "model_unavailable")
    assert second.setback is not None and second.setback.retry_at == clock.now + timedelta(seconds=120)  # grows
    assert second.usage.model_calls == 4  # every failed attempt counted; nothing reset

    clock.now += timedelta(seconds=121)
    Worker(runtime, poll_s=0.02, expire_every_s=0.05).run(idle_exit_s=0.3)
    done = runtime.get(state.run_id)
    assert done.status is RunStatus.WAITING_FOR_USER and done.setback is None
    assert done.usage.model_calls == 4 + 5
    resumes = events_of(runtime, state.run_id, EventType.RUN_RESUMED)
    assert [r["by"] for r in resumes] == ["stateward:retry", "stateward:retry"]
    transitions = events_of(runtime, state.run_id, EventType.STATE_TRANSITION)
    assert "FAILED" not in {t["state_after"] for t in transitions}
    runtime.close()


def test_repeated_outages_end_paused_for_an_operator_never_failed(db_path: Path) -> None:
    clock = FakeClock()
    runtime = outage_runtime(db_path, clock, retries=1)
    outage = Outage(failures=100, error=RateLimitedError)
    state = runtime.start(outage_agent(outage), fx.GOAL)
    clock.now += timedelta(hours=2)
    assert runtime.resume_due() == [state.run_id]
    parked = runtime.drive(state.run_id)
    assert (parked.status, parked.terminal_reason) == (RunStatus.PAUSED, "model_unavailable")
    assert parked.setback is not None and parked.setback.retry_at is None  # past its bound: an operator's
    assert [e["retry_at"] is None for e in events_of(runtime, state.run_id, EventType.MODEL_UNAVAILABLE)] == [
        False,
        True,
    ]
    clock.now += timedelta(days=7)
    assert runtime.resume_due() == []
    outage.failures = 0  # the provider is back
    assert runtime.resume(state.run_id, by="ops").status is RunStatus.WAITING_FOR_USER
    runtime.close()


def test_resume_takes_an_outage_paused_run_at_once(db_path: Path) -> None:
    clock = FakeClock()
    runtime = outage_runtime(db_path, clock)
    outage = Outage(failures=2)
    state = runtime.start(outage_agent(outage), fx.GOAL)
    assert state.status is RunStatus.PAUSED
    resumed = runtime.resume(state.run_id, by="ops")
    assert resumed.status is RunStatus.WAITING_FOR_USER
    clock.now += timedelta(hours=1)
    assert runtime.resume_due() == []  # the retry time was spent by the operator's resume
    runtime.close()


def test_crash_backoff_delays_grow_and_are_capped() -> None:
    policy = RecoveryPolicy(base_delay_s=5, max_delay_s=30)
    delays = [policy.delay(SetbackKind.STEP_CRASHED, n).total_seconds() for n in range(1, 6)]
    assert delays == [5, 10, 20, 30, 30]
    assert policy.delay(SetbackKind.MODEL_UNAVAILABLE, 1, at_least_s=7200).total_seconds() == 30
