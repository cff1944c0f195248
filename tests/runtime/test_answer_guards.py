"""What an answer, a pause or a resume must refuse, and what each must never grant: the guards a
mutation review found untested (each test here failed against the mutant it names)."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from stateward import (
    Agent,
    FinishNode,
    RequestRefusedError,
    RunError,
    RunStatus,
    Runtime,
    ToolContext,
    ToolNode,
    ToolRegistry,
    WorkflowController,
    tool,
)
from stateward.controllers.workflow import TimerNode
from stateward.core.events import EventType, NewEvent
from stateward.core.journal import SideEffectRecord
from stateward.core.state import AgentRef, PendingRequest, RunState, WaitSnapshot
from stateward.runtime.continuation import Answerer, answer_request
from stateward.store.records import StepWrite
from stateward.store.sqlite import SQLiteStore
from stateward.tools.types import LookupStatus
from stateward_demos import blog_fixtures as fx
from stateward_demos.blog import build_agent

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def _waiting_blog_run(runtime: Runtime) -> RunState:
    state = runtime.start(build_agent("react"), fx.GOAL)
    assert state.status is RunStatus.WAITING_FOR_USER and state.pending is not None
    return state


def _waiting_on(runtime: Runtime, pending: PendingRequest) -> str:
    """A run waiting on ``pending``, written through the store as the Runtime would write it."""
    agent = build_agent("react")
    state = runtime.submit(agent, fx.GOAL)
    current, seq = runtime.store.load_run_at(state.run_id)
    waiting = current.model_copy(
        update={
            "status": RunStatus.WAITING_FOR_USER,
            "pending": pending,
            "wait": WaitSnapshot(step=0, model_calls=0, tool_attempts=0),
        }
    )
    event = NewEvent(type=EventType.PENDING_RECORDED, payload={"pending_request_id": pending.request_id})
    runtime.store.commit_step(state.run_id, seq, StepWrite(state=waiting, events=[event], open_request=pending))
    return state.run_id


# -- answers ----------------------------------------------------------------------------------------
def test_a_rejection_admits_nothing_and_an_approval_exactly_the_guarded_action(runtime: Runtime) -> None:
    rejected = _waiting_blog_run(runtime)
    result = runtime.reject(rejected.run_id, "approval_001", by="ann", comment="shorter", drive=False)
    assert result.state.approvals == ()
    assert runtime.get(rejected.run_id).approvals == ()

    approved = _waiting_blog_run(runtime)
    assert approved.pending is not None
    result = runtime.approve(approved.run_id, "approval_001", by="ann", drive=False)
    assert tuple(g.action for g in result.state.approvals) == (approved.pending.guarded_action,)


def test_the_same_verdict_with_another_comment_is_a_second_answer_and_refused(runtime: Runtime) -> None:
    state = _waiting_blog_run(runtime)
    runtime.reject(state.run_id, "approval_001", by="ann", comment="shorter intro", drive=False)
    with pytest.raises(RequestRefusedError) as err:
        runtime.reject(state.run_id, "approval_001", by="bob", comment="longer intro", drive=False)
    assert err.value.code == "REQUEST_ALREADY_ANSWERED"
    again = runtime.reject(state.run_id, "approval_001", by="ann", comment="shorter intro", drive=False)
    assert again.already_answered and again.answer.text == "shorter intro"


def test_a_digest_presented_for_a_request_that_guards_nothing_is_refused(runtime: Runtime) -> None:
    # The answerer believes they are approving a specific action; this request admits none.
    pending = PendingRequest(
        request_id="input_001", kind="input", question="Which tone?", state_before=RunStatus.RUNNING, created_at=NOW
    )
    run_id = _waiting_on(runtime, pending)
    before = runtime.store.load_run_at(run_id)
    with pytest.raises(RequestRefusedError) as err:
        runtime.approve(run_id, "input_001", by="ann", digest="ab" * 32)
    assert err.value.code == "ACTION_DIGEST_MISMATCH"
    assert runtime.store.load_run_at(run_id) == before


def test_a_request_expires_at_its_deadline_not_after_it(runtime: Runtime) -> None:
    deadline = NOW + timedelta(hours=1)
    pending = PendingRequest(
        request_id="input_001",
        kind="input",
        question="Which tone?",
        state_before=RunStatus.RUNNING,
        created_at=NOW,
        expires_at=deadline,
    )
    run_id = _waiting_on(runtime, pending)
    who = Answerer(by="ann")
    with pytest.raises(RequestRefusedError) as err:
        answer_request(runtime.store, run_id, "input_001", "replied", who, text="calm", now=deadline)
    assert err.value.code == "REQUEST_EXPIRED"
    just_in_time = deadline - timedelta(microseconds=1)
    result = answer_request(runtime.store, run_id, "input_001", "replied", who, text="calm", now=just_in_time)
    assert result.state.status is RunStatus.RUNNING


def test_an_open_request_the_run_is_not_waiting_on_is_stale(runtime: Runtime) -> None:
    current = PendingRequest(
        request_id="input_002", kind="input", question="Now?", state_before=RunStatus.RUNNING, created_at=NOW
    )
    run_id = _waiting_on(runtime, current)
    state, seq = runtime.store.load_run_at(run_id)
    older = current.model_copy(update={"request_id": "input_001", "question": "Earlier?"})
    runtime.store.commit_step(run_id, seq, StepWrite(state=state, events=[], open_request=older))
    with pytest.raises(RequestRefusedError) as err:
        runtime.approve(run_id, "input_001", by="ann")
    assert err.value.code == "STALE_REQUEST"
    assert runtime.get(run_id).pending == current


class _AnotherAnswerFirst:
    """A second answerer whose answer lands between this one's checks and its commit."""

    def __init__(self, store: Any, run_id: str):
        self.store, self.run_id, self.done = store, run_id, False

    def point(self, name: str) -> None:
        if name == "approval_before_commit" and not self.done:
            self.done = True
            answer_request(self.store, self.run_id, "approval_001", "approved", Answerer(by="bob"), text=None, now=NOW)


def test_an_answer_that_loses_a_race_returns_the_winners_outcome(runtime: Runtime) -> None:
    state = _waiting_blog_run(runtime)
    race = _AnotherAnswerFirst(runtime.store, state.run_id)
    result = answer_request(
        runtime.store, state.run_id, "approval_001", "approved", Answerer(by="ann"), text=None, now=NOW, faults=race
    )
    assert result.already_answered and result.answer.by == "bob"
    answered = [e for e in runtime.store.read_events(state.run_id) if e.type is EventType.REQUEST_ANSWERED]
    assert [e.payload["by"] for e in answered] == ["bob"]  # one answer recorded, not two


# -- pause and resume -------------------------------------------------------------------------------
def test_a_waiting_run_can_be_neither_paused_nor_resumed_past_its_request(runtime: Runtime) -> None:
    state = _waiting_blog_run(runtime)
    before = runtime.store.load_run_at(state.run_id)
    with pytest.raises(RunError) as paused:
        runtime.pause(state.run_id)
    assert paused.value.code == "NOT_PAUSABLE"
    with pytest.raises(RunError) as resumed:
        runtime.resume(state.run_id)
    assert resumed.value.code == "NOT_RESUMABLE"  # only an answer moves a waiting run
    assert runtime.store.load_run_at(state.run_id) == before


@pytest.mark.parametrize("flag_left", [True, False])
def test_a_run_left_pausing_by_a_dead_holder_is_driven_to_paused(runtime: Runtime, flag_left: bool) -> None:
    # The status alone says a pause was under way, whether or not the control flag survived.
    state = runtime.submit(build_agent("react"), fx.GOAL)
    current, seq = runtime.store.load_run_at(state.run_id)
    pausing = current.model_copy(update={"status": RunStatus.PAUSING})
    event = NewEvent(type=EventType.STATE_TRANSITION, payload={"state_before": "RUNNING", "state_after": "PAUSING"})
    runtime.store.commit_step(state.run_id, seq, StepWrite(state=pausing, events=[event]))
    if flag_left:
        runtime.store.set_control(state.run_id, "pause")
    assert runtime.drive(state.run_id).status is RunStatus.PAUSED


def _timer_run(runtime: Runtime) -> RunState:
    agent = Agent(
        name="waits",
        controller=WorkflowController([TimerNode("t", 60, next="done"), FinishNode("done")]),
        tools=ToolRegistry([]),
        ref=AgentRef(name="tests:none"),
    )
    return runtime.start(agent, "wait a minute")


class _Later:
    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now


def test_a_timer_whose_firing_loses_a_race_is_not_reported_fired(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = _Later()
    store = SQLiteStore(db_path)
    runtime = Runtime(store, clock=clock)
    state = _timer_run(runtime)
    assert state.pending is not None and state.pending.kind == "timer"
    clock.now += timedelta(hours=1)

    def someone_else_moved_it(*args: Any, **kwargs: Any) -> int:
        raise RunError("moved on", code="CONCURRENT_UPDATE")

    with monkeypatch.context() as patched:
        patched.setattr(store, "commit_step", someone_else_moved_it)
        assert runtime.expire_requests(drive=False) == []
    assert runtime.get(state.run_id).status is RunStatus.WAITING_FOR_USER
    assert runtime.expire_requests(drive=False) == [state.pending.request_id]  # the next sweep fires it
    runtime.close()


def test_an_expired_request_the_run_is_not_waiting_on_changes_nothing(db_path: Path) -> None:
    clock = _Later()
    runtime = Runtime(SQLiteStore(db_path), clock=clock)
    state = _waiting_blog_run(runtime)
    current, seq = runtime.store.load_run_at(state.run_id)
    orphan = PendingRequest(
        request_id="approval_900",
        question="an old question",
        state_before=RunStatus.RUNNING,
        created_at=clock.now,
        expires_at=clock.now + timedelta(minutes=1),
    )
    runtime.store.commit_step(state.run_id, seq, StepWrite(state=current, events=[], open_request=orphan))
    clock.now += timedelta(hours=1)
    assert runtime.expire_requests() == []
    after = runtime.get(state.run_id)
    assert after.status is RunStatus.WAITING_FOR_USER and after.pending == state.pending
    runtime.close()


def _tamper(db_path: Path, sql: str) -> None:
    db = sqlite3.connect(db_path)
    db.execute(sql)
    db.commit()
    db.close()


def test_resume_refuses_a_snapshot_that_disagrees_with_its_checkpoint(runtime: Runtime, db_path: Path) -> None:
    state = runtime.submit(build_agent("react"), fx.GOAL)
    paused = runtime.pause(state.run_id)
    assert paused.status is RunStatus.PAUSED
    _tamper(db_path, "UPDATE runs SET snapshot = json_set(snapshot, '$.usage.model_calls', 99)")
    with pytest.raises(RunError) as err:
        runtime.resume(state.run_id)
    assert err.value.code == "CHECKPOINT_INVALID"
    assert runtime.get(state.run_id).status is RunStatus.PAUSED
    assert runtime.store.lease_of(state.run_id) is None


def test_resume_refuses_an_artifact_that_no_longer_matches_its_hash(runtime: Runtime, db_path: Path) -> None:
    state = _waiting_blog_run(runtime)
    runtime.approve(state.run_id, "approval_001", by="ann", drive=False)  # RUNNING, nobody driving it
    _tamper(db_path, "UPDATE artifacts SET content = content || ' (edited by hand)'")
    with pytest.raises(RunError) as err:
        runtime.resume(state.run_id)
    assert err.value.code == "ARTIFACT_CORRUPTED"
    assert [a.name for a in runtime.artifacts(state.run_id)] == ["brief"]  # no draft written


class _Crash(BaseException):
    """The process dying: nothing after it runs (not even an ``except Exception``)."""


class _DiesBeforeRecordingSuccess(SQLiteStore):
    """The store, except that the process dies the moment a side effect's success is to be journalled:
    the payment went through, the journal still says STARTED."""

    def put_side_effect(self, record: SideEffectRecord) -> None:
        if record.status == "SUCCEEDED":
            raise _Crash
        super().put_side_effect(record)


def test_resume_reconciles_a_side_effect_left_in_flight_instead_of_repeating_it(db_path: Path) -> None:
    calls: list[str] = []
    ledger: dict[str, Any] = {}

    def lookup(key: str) -> tuple[LookupStatus, Any]:
        return (LookupStatus.SUCCEEDED, ledger[key]) if key in ledger else (LookupStatus.NOT_EXECUTED, None)

    @tool(description="Pay out.", side_effect=True, lookup=lookup, timeout_s=5)
    def pay(amount: int, ctx: ToolContext) -> dict[str, int]:
        calls.append(ctx.idempotency_key)
        ledger[ctx.idempotency_key] = {"paid": amount}
        return {"paid": amount}

    agent = Agent(
        name="payer",
        controller=WorkflowController([ToolNode("pay", "pay", {"amount": 5}, next="done"), FinishNode("done")]),
        tools=ToolRegistry([pay]),
        ref=AgentRef(name="tests:none"),
    )
    store = _DiesBeforeRecordingSuccess(db_path)
    first = Runtime(store)
    with pytest.raises(_Crash):
        first.start(agent, "pay once", run_id="run_pay")
    journal = store.get_side_effect(calls[0])
    assert journal is not None and journal.status == "STARTED"
    store.close()  # a real death would leave the lease to expire; this one unwound and released it

    second = Runtime(SQLiteStore(db_path))
    second._agents["run_pay"] = agent  # an agent that lives only in this test
    done = second.resume("run_pay", by="ops")
    assert done.status is RunStatus.COMPLETED
    assert len(calls) == 1  # reconciled through the lookup, never paid twice
    resumed = [e for e in second.store.read_events("run_pay") if e.type is EventType.RUN_RESUMED]
    assert resumed[-1].payload["reconciled"] == [
        {"idempotency_key": calls[0], "tool": "pay", "was": "STARTED", "lookup": "SUCCEEDED"}
    ]
    settled = second.store.get_side_effect(calls[0])
    assert settled is not None and settled.status == "SUCCEEDED"
    second.close()


# -- an answer is bounded before anything is stored -------------------------------------------------------
@pytest.mark.parametrize("verdict", ["approve", "reject"])
def test_a_ten_megabyte_comment_is_refused_and_nothing_is_stored(runtime: Runtime, db_path: Path, verdict: str) -> None:
    state = _waiting_blog_run(runtime)
    events_before = len(runtime.store.read_events(state.run_id))
    size_before = db_path.stat().st_size
    respond = runtime.approve if verdict == "approve" else runtime.reject
    with pytest.raises(RequestRefusedError) as err:
        respond(state.run_id, "approval_001", by="alice", comment="x" * 10_000_000)
    assert err.value.code == "ANSWER_TOO_LARGE"
    assert len(runtime.store.read_events(state.run_id)) == events_before
    record = runtime.store.get_request(state.run_id, "approval_001")
    assert record is not None and record.answer is None
    assert runtime.get(state.run_id).status is RunStatus.WAITING_FOR_USER
    wal = db_path.with_name(db_path.name + "-wal")
    assert db_path.stat().st_size + (wal.stat().st_size if wal.exists() else 0) < size_before + 1_000_000


def test_the_answer_limit_is_8_kib_by_default_and_configurable(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = _waiting_blog_run(runtime)
    who = Answerer(by="alice", drive=False)
    with pytest.raises(RequestRefusedError) as err:
        answer_request(runtime.store, state.run_id, "approval_001", "approved", who, text="é" * 4097, now=NOW)
    assert err.value.code == "ANSWER_TOO_LARGE"  # 8,194 bytes of UTF-8
    with pytest.raises(RequestRefusedError) as err:
        answer_request(
            runtime.store, state.run_id, "approval_001", "approved", Answerer(by="a" * 300), text="ok", now=NOW
        )
    assert err.value.code == "ANSWER_TOO_LARGE"
    monkeypatch.setenv("STATEWARD_MAX_ANSWER_BYTES", "16")
    with pytest.raises(RequestRefusedError):
        answer_request(runtime.store, state.run_id, "approval_001", "approved", who, text="x" * 17, now=NOW)
    result = answer_request(runtime.store, state.run_id, "approval_001", "approved", who, text="x" * 16, now=NOW)
    assert result.answer.text == "x" * 16
