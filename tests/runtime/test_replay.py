"""Replay against another model: a recorded run re-driven offline, every tool answered from its record.

The payment and blog runs replay with their own scripted models without a divergence; a changed worker or
model is named at the first decision it changes; a call the record does not hold is reported and no
handler runs; the source run's rows are byte-for-byte what they were.
"""

from __future__ import annotations

import dataclasses
import hashlib
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from stateward import RequestKind, RunStatus, Runtime
from stateward.controllers.plan_run.controller import PlanRunController
from stateward.core.errors import ErrorCode, RunError, RunNotFoundError, UserError
from stateward.core.events import Event, EventType
from stateward.models.base import ModelRequest
from stateward.models.scripted import ScriptedModel
from stateward.runtime.agent import Agent
from stateward.runtime.replay import DivergenceKind, replay_run
from stateward.tools.registry import ToolRegistry
from stateward_demos import blog_fixtures as fx
from stateward_demos.blog import MODES, scripted_models
from stateward_demos.blog import build_agent as blog_agent
from stateward_demos.payment.agent import build_agent as payment_agent
from stateward_demos.payment.agent import goal as payment_goal
from stateward_demos.payment.scripts import worker_policy
from stateward_demos.registry import AGENTS

CHANGED_QUERY = "breaking changes v2"


def _events(runtime: Runtime, run_id: str) -> list[Event]:
    events: list[Event] = []
    while page := runtime.events(run_id, after=events[-1].seq if events else 0, content=True):
        events += page
    return events


def _rows_digest(db: Path) -> str:
    """Every row of every table of the store file, hashed: what "unchanged" means here."""
    con = sqlite3.connect(db)
    try:
        digest = hashlib.sha256()
        tables = [r[0] for r in con.execute("select name from sqlite_master where type='table' order by name")]
        for table in tables:
            for row in con.execute(f"select * from {table} order by 1"):  # table names from sqlite_master
                digest.update(repr((table, row)).encode())
        return digest.hexdigest()
    finally:
        con.close()


def _payment_run(runtime: Runtime) -> str:
    state = runtime.start(payment_agent(), payment_goal().objective)
    assert state.pending is not None
    state = runtime.approve(state.run_id, state.pending.request_id, by="reviewer").state
    assert state.status is RunStatus.COMPLETED
    return state.run_id


def _changed_worker(request: ModelRequest) -> Any:
    """The payment worker with one changed decision: its first documentation search asks another query."""
    out = worker_policy(request)
    if isinstance(out, dict) and out.get("action") == "search_docs" and not request.observations:
        return {**out, "args": {**out["args"], "query": CHANGED_QUERY}}
    return out


def _with_worker(agent: Agent, policy: Callable[[ModelRequest], Any]) -> Agent:
    ctrl = agent.controller
    assert isinstance(ctrl, PlanRunController)
    worker = ScriptedModel(policy, name="changed-worker")
    return dataclasses.replace(agent, controller=PlanRunController(ctrl.planner, worker, ctrl.config))


def _counting(agent: Agent, calls: list[str]) -> Agent:
    """The agent with every handler counting its invocations (a replay must call none of them)."""

    def wrap(name: str, handler: Callable[..., Any]) -> Callable[..., Any]:
        def counted(**kwargs: Any) -> Any:
            calls.append(name)
            return handler(**kwargs)

        return counted

    specs = [s.model_copy(update={"handler": wrap(s.name, s.handler)}) for s in agent.tools]
    return dataclasses.replace(agent, tools=ToolRegistry(specs))


def test_payment_run_replays_with_its_own_models_without_divergence(runtime: Runtime, db_path: Path) -> None:
    run_id = _payment_run(runtime)
    calls: list[str] = []
    before = _rows_digest(db_path)

    report = replay_run(runtime.store, run_id, _counting(payment_agent(), calls), model="scripted")

    recorded = [e for e in _events(runtime, run_id) if e.type is EventType.SIGNAL_RECEIVED]
    assert report.first_divergence is None
    assert report.compared == report.matched == report.recorded_decisions == len(recorded)
    assert report.replayed_decisions == len(recorded)
    assert report.unrecorded_calls == []
    assert report.answers_applied == 1  # the reviewer's approval, given again at the same wait
    assert report.observations_differing == 0
    assert report.replay_status is RunStatus.COMPLETED
    assert report.model_calls == runtime.get(run_id).usage.model_calls
    assert calls == []  # every answer came from the record
    assert _rows_digest(db_path) == before


def test_a_changed_worker_is_named_at_its_first_divergence(runtime: Runtime, db_path: Path) -> None:
    run_id = _payment_run(runtime)
    events = _events(runtime, run_id)
    signals = [e for e in events if e.type is EventType.SIGNAL_RECEIVED]
    first_search = next(e for e in signals if '"search_docs"' in str(e.payload["signal"]))
    calls: list[str] = []
    before = _rows_digest(db_path)

    agent = _counting(_with_worker(payment_agent(), _changed_worker), calls)
    report = replay_run(runtime.store, run_id, agent, model="changed-worker")

    first = report.first_divergence
    assert first is not None
    assert first.seq == first_search.seq
    assert first.index == signals.index(first_search)
    assert report.matched == report.compared - 1 == first.index
    assert first.recorded is not None and first.replayed is not None
    assert first.recorded.args == {"query": "migration guide", "space": "payment-platform"}
    assert first.replayed.args["query"] == CHANGED_QUERY
    # The record never searched for that: the call is reported, not executed, and the replay stops there.
    assert first.kind is DivergenceKind.UNRECORDED_CALL
    assert [c["tool"] for c in report.unrecorded_calls] == ["search_docs"]
    assert report.replayed_decisions == first.index + 1
    assert calls == []
    # The context is what the worker had seen just before: the last recorded observations.
    assert first.context and all(o["step"] < first.recorded.step for o in first.context)
    assert _rows_digest(db_path) == before


@pytest.mark.parametrize("mode", MODES)
def test_blog_runs_replay_with_their_own_models_without_divergence(runtime: Runtime, mode: str) -> None:
    state = runtime.start(blog_agent(mode, model=scripted_models()[mode]), fx.GOAL)
    assert state.pending is not None
    state = runtime.approve(state.run_id, state.pending.request_id, by="editor").state
    assert state.status is RunStatus.COMPLETED

    report = replay_run(runtime.store, state.run_id, blog_agent(mode, model=scripted_models()[mode]))

    assert report.first_divergence is None
    assert report.matched == report.recorded_decisions > 0
    assert report.replay_status is RunStatus.COMPLETED


def test_a_changed_blog_model_diverges_at_its_second_decision(runtime: Runtime) -> None:
    state = runtime.start(blog_agent("react", model=scripted_models()["react"]), fx.GOAL)
    signals = [e for e in _events(runtime, state.run_id) if e.type is EventType.SIGNAL_RECEIVED]

    def skips_reading(request: ModelRequest) -> Any:
        if request.observations:
            return {"type": "FINISH", "reason": "nothing to read"}
        return fx.react_policy(request)

    report = replay_run(runtime.store, state.run_id, blog_agent("react", model=ScriptedModel(skips_reading)))

    first = report.first_divergence
    assert first is not None
    assert (first.kind, first.index, first.seq) == (DivergenceKind.DECISION, 1, signals[1].seq)
    assert first.replayed is not None and first.replayed.type == "FINISH"
    assert report.matched == 1


def _mid_decision(runtime: Runtime, run_id: str) -> tuple[int, list[Event]]:
    """The seq of the run's first documentation search (inside its plan run), and the run's decisions."""
    signals = [e for e in _events(runtime, run_id) if e.type is EventType.SIGNAL_RECEIVED]
    first_search = next(e for e in signals if '"search_docs"' in str(e.payload["signal"]))
    return first_search.seq, signals


def _refusing_before(agent: Agent, calls: list[int]) -> Agent:
    """The agent whose worker counts its calls and never makes the run's first search: a replay that drove
    the run from its start with this worker would diverge at that search."""

    def policy(request: ModelRequest) -> Any:
        calls.append(len(request.observations))
        return _changed_worker(request)

    return _with_worker(agent, policy)


def test_from_seq_starts_from_the_recorded_state_there(runtime: Runtime) -> None:
    run_id = _payment_run(runtime)
    seq, signals = _mid_decision(runtime, run_id)
    whole = replay_run(runtime.store, run_id, payment_agent())

    report = replay_run(runtime.store, run_id, payment_agent(), from_seq=seq, agents=AGENTS)

    assert report.first_divergence is None
    assert report.compared == len([e for e in signals if e.seq >= seq])
    assert 0 < report.model_calls < whole.model_calls  # the decisions before the seq are the record's


def test_from_seq_asks_the_new_model_nothing_before_the_seq_and_calls_no_handler(runtime: Runtime) -> None:
    run_id = _payment_run(runtime)
    seq, signals = _mid_decision(runtime, run_id)
    after_search = next(e.seq for e in signals if e.seq > seq)
    handlers: list[str] = []
    worker_calls: list[int] = []
    agent = _counting(_refusing_before(payment_agent(), worker_calls), handlers)

    from_start = replay_run(runtime.store, run_id, agent)
    assert from_start.first_divergence is not None  # the changed first search, when the worker makes it
    worker_calls.clear()

    report = replay_run(runtime.store, run_id, agent, from_seq=after_search, agents=AGENTS)

    assert report.first_divergence is None  # that search was made before the start: the record's, not the worker's
    assert worker_calls[0] > 0  # the worker was first asked with the record's search already observed
    assert handlers == []


def test_from_an_event_inside_a_step_starts_before_that_step(runtime: Runtime) -> None:
    run_id = _payment_run(runtime)
    inside, signals = _mid_decision(runtime, run_id)  # a decision is recorded inside its step

    report = replay_run(runtime.store, run_id, payment_agent(), from_seq=inside, agents=AGENTS)

    assert report.started_at is not None and report.started_at < inside
    assert report.compared == len([e for e in signals if e.seq > report.started_at])  # the one at SEQ is judged
    assert report.first_divergence is None


def test_from_past_the_runs_end_is_refused_by_name(runtime: Runtime) -> None:
    run_id = _payment_run(runtime)
    last = _events(runtime, run_id)[-1].seq

    with pytest.raises(RunError) as caught:
        replay_run(runtime.store, run_id, payment_agent(), from_seq=last + 1, agents=AGENTS)

    assert caught.value.code is ErrorCode.FORK_POINT_UNAVAILABLE


@pytest.mark.parametrize("bad", [0, -3, True, "5"])
def test_a_start_that_is_no_event_number_is_refused_by_name(runtime: Runtime, bad: Any) -> None:
    run_id = _payment_run(runtime)

    with pytest.raises(UserError) as caught:
        replay_run(runtime.store, run_id, payment_agent(), from_seq=bad, agents=AGENTS)

    assert caught.value.code is ErrorCode.INVALID_ARGUMENT


def test_replay_is_bounded_by_max_steps(runtime: Runtime) -> None:
    run_id = _payment_run(runtime)

    report = replay_run(runtime.store, run_id, payment_agent(), max_steps=5)

    assert report.replay_steps == 5
    assert report.first_divergence is not None
    assert (report.first_divergence.kind, report.first_divergence.index) == (DivergenceKind.MISSING_DECISION, 5)


def test_an_unknown_run_is_run_not_found(runtime: Runtime) -> None:
    with pytest.raises(RunNotFoundError) as caught:
        replay_run(runtime.store, "run_missing", payment_agent())
    assert caught.value.code is ErrorCode.RUN_NOT_FOUND


def test_an_approval_of_another_action_is_not_given_again(runtime: Runtime, db_path: Path) -> None:
    run_id = _payment_run(runtime)
    answered = next(e for e in _events(runtime, run_id) if e.type is EventType.REQUEST_ANSWERED)
    digest = answered.payload["guarded_digest"]
    runtime.close()
    con = sqlite3.connect(db_path)  # the record says the reviewer approved some other action
    with con:
        con.execute("update event_batches set events = replace(events, ?, ?)", (digest, "f" * 64))
    con.close()
    reopened = Runtime.open(str(db_path))
    try:
        report = replay_run(reopened.store, run_id, payment_agent())
    finally:
        reopened.close()

    assert report.answers_applied == 0
    assert report.replay_status is RunStatus.WAITING_FOR_USER
    first = report.first_divergence
    assert first is not None and first.kind is DivergenceKind.UNMATCHED_ANSWER
    assert first.index == report.compared == report.matched


@pytest.mark.parametrize("fault", ["doc-search-timeout", "doc-search-timeout-once", "pause-resume", "injection"])
def test_payment_fault_runs_replay_without_divergence(runtime: Runtime, fault: str) -> None:
    """Timeouts, retries, a pause and a refused injected call: each answered from the record as it happened."""
    state = runtime.start(payment_agent(fault=fault), payment_goal().objective)
    while state.pending is not None and state.pending.kind is RequestKind.APPROVAL:
        state = runtime.approve(state.run_id, state.pending.request_id, by="reviewer").state
    if state.status is RunStatus.PAUSED:
        state = runtime.resume(state.run_id)
    calls: list[str] = []

    report = replay_run(runtime.store, state.run_id, _counting(payment_agent(fault=fault), calls))

    assert report.first_divergence is None, report.first_divergence
    assert report.unrecorded_calls == [] and calls == []
    assert report.matched == report.recorded_decisions
    assert report.observations_differing == 0  # every observation is the recorded one, failures included
