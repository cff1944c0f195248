"""One conformance suite at the Runtime level, run against every backend: SQLite, PostgreSQL and Temporal.

Each case drives the same agent (tests/temporal/temporal_agents.py: a search, a guarded refund a person
approves, a finish; every refund a line in a ledger file) through the same calls: the library's ``start``,
``approve``, ``reject``, ``cancel``, ``reconcile`` and reads on the backend's runtime, and answers from another
process (``stateward approve --db URL``). On a store the runtime drives the run in the calling process; on
Temporal a worker does. The outcomes, the codes of refusals and the side-effect counts are the same on all three.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.controllers import batch_agents
from tests.temporal.conftest import cli
from tests.temporal.temporal_agents import registry as refund_agents

from stateward import AgentRegistry, Runtime
from stateward.core.errors import ErrorCode, RequestRefusedError, RunError, RunNotFoundError
from stateward.core.state import RequestKind, RunState
from stateward.core.status import RunStatus
from stateward.temporal.client import TemporalRuntime
from stateward.temporal.dev_server import DevServer
from stateward.temporal.worker import run_worker

pytestmark = pytest.mark.slow

registry = AgentRegistry()  # every agent of the suite, hosted by each backend alike
registry.merge(refund_agents)
registry.merge(batch_agents.AGENTS)


@dataclass
class Backend:
    """A runtime over one backend, and the ``--db`` URL another process reaches it by."""

    name: str
    runtime: Any  # Runtime | TemporalRuntime: the same calls on either
    url: str

    def settled(self, run_id: str) -> RunState:
        """The run once it stopped: a store's runtime drives it here, Temporal's worker drives it meanwhile."""
        if self.name == "temporal":
            return self.runtime.settled(run_id)  # type: ignore[no-any-return]
        return self.runtime.drive(run_id)  # type: ignore[no-any-return]

    def start(self, ledger: Path, tenant: str = "default", **params: Any) -> RunState:
        agent = registry.create("refunds", {"ledger": str(ledger), **params})
        return self.runtime.start(agent, "refund order A-1", tenant=tenant)  # type: ignore[no-any-return]


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("temporal", marks=pytest.mark.temporal),
    ]
)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "sqlite":
        url = str(tmp_path / "stateward.db")
        runtime = Runtime.open(url, agents=registry)
        yield Backend("sqlite", runtime, url)
        runtime.close()
    elif request.param == "postgres":
        url = request.getfixturevalue("pg_url")
        runtime = Runtime.open(url, agents=registry)
        yield Backend("postgres", runtime, url)
        runtime.close()
    else:
        server: DevServer = request.getfixturevalue("temporal_server")
        url = server.url(task_queue=f"conf-{uuid.uuid4().hex[:10]}")
        stop, ready = threading.Event(), threading.Event()
        thread = threading.Thread(
            target=run_worker, args=(url, registry), kwargs={"stop": stop, "ready": ready.set}, daemon=True
        )
        thread.start()
        assert ready.wait(60)
        runtime = TemporalRuntime.open(url, agents=registry)
        yield Backend("temporal", runtime, url)
        runtime.close()
        stop.set()
        thread.join(60)


def _refunds(ledger: Path) -> int:
    return len(ledger.read_text().split()) if ledger.exists() else 0


def _cli_json(*args: str) -> tuple[int, Any]:
    done = cli(*args, "--json")
    return done.returncode, json.loads(done.stdout)


def test_a_run_suspended_in_one_process_is_resumed_by_an_answer_from_another(backend: Backend, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    state = backend.start(ledger)
    assert state.status is RunStatus.WAITING_FOR_USER and state.pending is not None
    assert _refunds(ledger) == 0
    code, out = _cli_json("approve", state.run_id, state.pending.request_id, "--db", backend.url, "--by", "alice")
    assert code == 0, out
    assert (out["status"], out["terminal_reason"]) == ("COMPLETED", "completed")
    assert _refunds(ledger) == 1
    assert backend.runtime.get(state.run_id).status is RunStatus.COMPLETED


def test_an_approval_is_bound_to_its_action_and_admits_it_once(backend: Backend, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    state = backend.start(ledger)
    pending = state.pending
    assert pending is not None and pending.guarded_action is not None
    rt = backend.runtime
    with pytest.raises(RequestRefusedError) as wrong:
        rt.approve(state.run_id, pending.request_id, by="alice", digest="f" * 64)
    assert wrong.value.code is ErrorCode.ACTION_DIGEST_MISMATCH
    assert rt.get(state.run_id).status is RunStatus.WAITING_FOR_USER
    first = rt.approve(state.run_id, pending.request_id, by="alice", digest=pending.guarded_action.digest)
    assert (first.state.status, first.already_answered) == (RunStatus.COMPLETED, False)
    repeat = rt.approve(state.run_id, pending.request_id, by="alice", digest=pending.guarded_action.digest)
    assert repeat.already_answered is True and repeat.answer == first.answer
    with pytest.raises(RequestRefusedError) as other:
        rt.reject(state.run_id, pending.request_id, by="bob")
    assert other.value.code is ErrorCode.REQUEST_ALREADY_ANSWERED
    assert _refunds(ledger) == 1


def test_a_rejected_refund_never_runs_and_the_model_sees_the_refusal(backend: Backend, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    state = backend.start(ledger)
    assert state.pending is not None
    done = backend.runtime.reject(state.run_id, state.pending.request_id, by="alice", comment="not this one")
    assert done.state.status is RunStatus.WAITING_FOR_USER  # the policy asks what now: a question, not a retry
    assert done.state.pending is not None and done.state.pending.kind is RequestKind.INPUT
    assert _refunds(ledger) == 0


def test_answers_after_cancel_or_expiry_are_refused_and_change_nothing(backend: Backend, tmp_path: Path) -> None:
    rt = backend.runtime
    cancelled = backend.start(tmp_path / "a")
    assert cancelled.pending is not None
    assert rt.cancel(cancelled.run_id, by="ops").status is RunStatus.CANCELLED
    with pytest.raises(RequestRefusedError) as late:
        rt.approve(cancelled.run_id, cancelled.pending.request_id, by="alice")
    assert late.value.code is ErrorCode.REQUEST_CLOSED
    with pytest.raises(RunError) as again:
        rt.cancel(cancelled.run_id, by="ops")
    assert again.value.code is ErrorCode.RUN_ENDED

    expiring = backend.start(tmp_path / "b", request_ttl_s=0.5)
    assert expiring.pending is not None and expiring.pending.expires_at is not None
    time.sleep(0.8)
    if backend.name != "temporal":
        with pytest.raises(RequestRefusedError) as expired:  # past its time, before any sweep
            rt.approve(expiring.run_id, expiring.pending.request_id, by="alice")
        assert expired.value.code is ErrorCode.REQUEST_EXPIRED
        assert rt.expire_requests(drive=False) == [expiring.pending.request_id]  # the sweep a worker runs
    ended = _ended(rt, expiring.run_id)  # on Temporal the workflow's own timer expired it
    assert (ended.status, ended.terminal_reason) == (RunStatus.FAILED, "request_expired")
    with pytest.raises(RequestRefusedError) as closed:
        rt.approve(expiring.run_id, expiring.pending.request_id, by="alice")
    assert closed.value.code is ErrorCode.REQUEST_CLOSED
    assert _refunds(tmp_path / "a") == _refunds(tmp_path / "b") == 0


def _ended(rt: Any, run_id: str) -> RunState:
    deadline = time.monotonic() + 30
    while not (state := rt.get(run_id)).status.is_terminal and time.monotonic() < deadline:
        time.sleep(0.05)
    return state  # type: ignore[no-any-return]


def test_another_tenants_run_and_request_look_like_none(backend: Backend, tmp_path: Path) -> None:
    rt = backend.runtime
    state = backend.start(tmp_path / "ledger", tenant="acme")
    assert state.pending is not None
    with pytest.raises(RequestRefusedError) as foreign:
        rt.approve(state.run_id, state.pending.request_id, by="mallory", tenant="globex")
    assert foreign.value.code is ErrorCode.UNKNOWN_REQUEST
    with pytest.raises(RunNotFoundError):
        rt.events(state.run_id, tenant="globex")
    with pytest.raises(RunNotFoundError):
        rt.get("run_0000000000000000")
    assert rt.get(state.run_id).status is RunStatus.WAITING_FOR_USER


def test_a_budget_spent_before_a_wait_is_never_reset(backend: Backend, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    state = backend.start(ledger, max_steps=2)
    assert state.pending is not None and state.usage.steps == 2
    done = backend.runtime.approve(state.run_id, state.pending.request_id, by="alice").state
    assert (done.status, done.terminal_reason, done.usage.steps) == (RunStatus.FAILED, "budget_exhausted", 2)
    assert _refunds(ledger) == 0


def test_a_lost_outcome_waits_for_a_person_and_their_answer_is_recorded_not_retried(
    backend: Backend, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    state = backend.start(ledger, lookup=False, timeout_s=0.3, hold_s=1.0)
    assert state.pending is not None
    rt = backend.runtime
    asked = rt.approve(state.run_id, state.pending.request_id, by="alice").state
    # The refund ran but its answer came too late, and no lookup can tell: a person is asked, nothing retried.
    assert asked.status is RunStatus.WAITING_FOR_USER and asked.pending is not None
    assert asked.pending.kind is RequestKind.RECONCILIATION
    assert _refunds(ledger) == 1
    with pytest.raises(RequestRefusedError) as wrong_kind:
        rt.reply(state.run_id, asked.pending.request_id, by="alice", text="it happened")
    assert wrong_kind.value.code is ErrorCode.WRONG_ANSWER_KIND
    done = rt.reconcile(state.run_id, asked.pending.request_id, happened=True, by="ops").state
    assert (done.status, done.terminal_reason) == (RunStatus.COMPLETED, "completed")
    assert _refunds(ledger) == 1


def test_a_plan_run_goes_through_its_items_each_side_effect_once(
    backend: Backend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "stamps"
    monkeypatch.setenv("BATCH_LOG", str(log))
    state = backend.runtime.start(batch_agents.build(side_effect=True), "stamp four ledgers, then sum them")
    assert (state.status, state.terminal_reason) == (RunStatus.COMPLETED, "completed")
    stamps = log.read_text().split()
    assert sorted(stamps) == sorted(f"W{i}#{n}" for i in range(1, 6) for n in (1, 2))  # each once
    assert stamps.index("W5#1") > max(stamps.index("W1#2"), stamps.index("W2#2"))  # after what it depends on


def test_a_pause_is_honoured_at_a_step_boundary_and_a_resume_carries_on(backend: Backend, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    rt = backend.runtime
    state = rt.submit(registry.create("refunds", {"ledger": str(ledger), "think_s": 1.0}), "refund order A-1")
    rt.pause(state.run_id, by="ops")
    paused = backend.settled(state.run_id)
    assert paused.status is RunStatus.PAUSED
    resumed = rt.resume(state.run_id, by="ops")
    assert resumed.status is RunStatus.WAITING_FOR_USER and resumed.usage.steps > paused.usage.steps
    moves = [
        (e.payload["state_after"], e.payload.get("by"))
        for e in rt.events(state.run_id)
        if e.type.value == "state_transition"
    ]
    assert ("PAUSED", "ops") in moves and ("RUNNING", "ops") in moves
    assert _refunds(ledger) == 0
