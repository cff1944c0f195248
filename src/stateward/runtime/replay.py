"""Replay a recorded run against another model, offline: would it have decided the same?

The source run is only read. A copy of its goal is driven in a throw-away SQLite store by the agent given
(typically the same agent with a new model or prompt); every tool call is answered from the source's
record of that call (same tool, same canonical arguments, in order) and no handler is called. A call the
record does not hold is reported (UNRECORDED_CALL) and the replay stops there: it is never executed.
The answers people gave the source run are given again at the same waits (an answer is data in the log).
Then the two decision sequences are compared one by one and the first divergence is named with the
observations that led to it.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from collections import deque
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from stateward.core.budget import Usage
from stateward.core.errors import ErrorCode, RunError, UserError
from stateward.core.events import Event, EventType, NewEvent
from stateward.core.state import PendingRequest, RunState
from stateward.core.status import RunStatus
from stateward.observability.payloads import resolve
from stateward.runtime.agent import Agent
from stateward.runtime.agent_registry import AgentRegistry
from stateward.runtime.fork import state_at
from stateward.runtime.recorded_answers import Journal, answering_tools, args_digest, give_answer, roles_of
from stateward.runtime.runtime import Runtime, offline_runtime
from stateward.store.backends import open_store
from stateward.store.base import Store
from stateward.store.records import StepWrite

__all__ = ["Divergence", "DivergenceKind", "ReplayDecision", "ReplayReport", "replay_run"]

CONTEXT_OBSERVATIONS = 3  # observations shown before the first divergence: bounded context
DEFAULT_MAX_STEPS = 1000  # when neither the caller nor the run's budget bounds the replay
ANSWER_VERDICTS = ("approved", "rejected", "replied")
PAGE = 1000


class DivergenceKind(StrEnum):
    """How the replay first departed from the record."""

    DECISION = "DECISION"  # another decision (type, action or arguments) at the same point
    UNRECORDED_CALL = "UNRECORDED_CALL"  # a call the record does not hold: reported, never executed
    EXTRA_DECISION = "EXTRA_DECISION"  # the replay went on where the record had stopped
    MISSING_DECISION = "MISSING_DECISION"  # the replay stopped where the record went on
    UNMATCHED_ANSWER = "UNMATCHED_ANSWER"  # the replay waited where the record holds no answer for it


class ReplayDecision(BaseModel):
    """One decision as the comparison sees it: its kind, action and a digest of its arguments."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    seq: int  # the event (signal_received) that recorded it, in its own run's log
    step: int | None = None
    source: str | None = None  # rule, model, ...
    type: str | None = None
    action: str | None = None
    args_digest: str | None = None
    args: Any = None

    def key(self) -> tuple[str | None, str | None, str | None]:
        """What two decisions must share to match."""
        return (self.type, self.action, self.args_digest)


class Divergence(BaseModel):
    """The first point where the replay decided otherwise, with what it had seen just before."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: DivergenceKind
    index: int  # the decision's position in the run (0-based)
    seq: int | None  # the recorded decision's seq in the source run (None past the record's end)
    recorded: ReplayDecision | None
    replayed: ReplayDecision | None
    context: list[dict[str, Any]] = Field(default_factory=list)  # the last recorded observations before it
    detail: str = ""


class ReplayReport(BaseModel):
    """What a replay found: how many decisions matched, the first divergence and the replay's model usage."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str
    model: str | None
    from_seq: int | None
    started_at: int | None = None  # the step boundary the replay started from (at or before ``from_seq``)
    recorded_decisions: int
    replayed_decisions: int
    compared: int
    matched: int
    first_divergence: Divergence | None
    unrecorded_calls: list[dict[str, Any]]
    answers_applied: int
    observations_differing: int  # replayed tool observations unlike the recorded ones at the same place
    replay_status: RunStatus
    replay_steps: int
    max_steps: int
    model_calls: int
    input_tokens: int
    output_tokens: int

    @property
    def diverged(self) -> bool:
        """Whether the replay decided otherwise anywhere it was compared."""
        return self.first_divergence is not None


def _all_events(store: Store, run_id: str) -> list[Event]:
    """Every event of the run with offloaded payloads put back, page by page (a read: nothing is written)."""

    def fetch(name: str) -> str | None:
        found = store.get_artifact(run_id, name, 1)
        return None if found is None else found.content

    events: list[Event] = []
    while page := store.read_events(run_id, events[-1].seq if events else 0, PAGE):
        events += [e.model_copy(update={"payload": resolve(e.payload, fetch)}) for e in page]
    return events


def _decision(event: Event) -> ReplayDecision:
    signal = event.payload.get("signal")
    if isinstance(signal, str):
        try:
            signal = json.loads(signal)
        except ValueError:
            signal = {"type": None, "action": None, "args": signal}
    if not isinstance(signal, dict):
        signal = {"args": signal}
    args = signal.get("args")
    return ReplayDecision(
        seq=event.seq,
        step=event.payload.get("step"),
        source=event.payload.get("signal_source"),
        type=signal.get("type"),
        action=signal.get("action"),
        args_digest=args_digest(args),
        args=args,
    )


def decisions(events: list[Event]) -> list[ReplayDecision]:
    """The run's decisions in order, as its signal_received events recorded them."""
    return [_decision(e) for e in events if e.type is EventType.SIGNAL_RECEIVED]


def _answers(events: list[Event]) -> deque[dict[str, Any]]:
    return deque(e.payload for e in events if e.type is EventType.REQUEST_ANSWERED)


def _observations(events: list[Event]) -> list[tuple[Any, ...]]:
    out = []
    for e in events:
        if e.type is EventType.TOOL_ATTEMPTED:
            o = e.payload.get("observation") or {}
            out.append((o.get("action"), o.get("status"), o.get("error_code"), args_digest(o.get("result"))))
    return out


def _differing(source: list[Event], replay: list[Event]) -> int:
    """Replayed observations that are not what the record holds at the same place (0 for a faithful replay)."""
    old, new = _observations(source), _observations(replay)
    return sum(a != b for a, b in zip(old, new, strict=False))


def _context(events: list[Event], before_seq: int | None) -> list[dict[str, Any]]:
    seen = [
        e.payload.get("observation") or {}
        for e in events
        if e.type is EventType.TOOL_ATTEMPTED and (before_seq is None or e.seq < before_seq)
    ]
    return [
        {k: obs.get(k) for k in ("step", "action", "args", "status", "result", "error_code")}
        for obs in seen[-CONTEXT_OBSERVATIONS:]
    ]


def _compare(
    recorded: list[ReplayDecision],
    replayed: list[ReplayDecision],
    source_events: list[Event],
    from_seq: int | None,
    journal: Journal,
    stopped_unmatched: bool,
) -> tuple[int, int, Divergence | None]:
    compared = matched = 0
    unrecorded = {(c["tool"], c["digest"]) for c in journal.unrecorded}
    for index in range(max(len(recorded), len(replayed))):
        old = recorded[index] if index < len(recorded) else None
        new = replayed[index] if index < len(replayed) else None
        if old is not None and from_seq is not None and old.seq < from_seq:
            continue
        if old is not None and new is not None:
            compared += 1
            if old.key() == new.key():
                matched += 1
                continue
            call = (new.action, journal.digest(str(new.action), new.args))
            kind = DivergenceKind.UNRECORDED_CALL if call in unrecorded else DivergenceKind.DECISION
        elif new is not None:
            kind = DivergenceKind.EXTRA_DECISION
        else:
            kind = DivergenceKind.UNMATCHED_ANSWER if stopped_unmatched else DivergenceKind.MISSING_DECISION
        seq = None if old is None else old.seq
        return (
            compared,
            matched,
            Divergence(
                kind=kind,
                index=index,
                seq=seq,
                recorded=old,
                replayed=new,
                context=_context(source_events, seq),
            ),
        )
    return compared, matched, None


def replay_run(
    store: Store,
    run_id: str,
    agent: Agent,
    *,
    model: str | None = None,
    from_seq: int | None = None,
    max_steps: int | None = None,
    agents: AgentRegistry | None = None,
) -> ReplayReport:
    """Re-drive ``run_id`` of ``store`` with ``agent`` offline and compare its decisions with the record.

    ``store`` is only read (RUN_NOT_FOUND for an unknown run). ``model`` names the model under test in the
    report. ``from_seq``: the replay starts from the run's state at that event (rebuilt as a fork's is, see
    runtime/fork.py; ``agents`` builds the recorded agent where a re-drive is needed), so only the decisions
    after it are the new model's; FORK_POINT_UNAVAILABLE where no state can be had there. ``max_steps`` bounds
    the replay (default: the run's step budget, else 1000); the counts reported are the replay's own.
    """
    source, last = store.load_run_at(run_id)
    source_events = _all_events(store, run_id)
    start, after = _state_from(store, agents or AgentRegistry(), source, last, from_seq)
    journal = Journal(source_events[after:], store, run_id, agent.tools)
    replay_agent = dataclasses.replace(agent, tools=answering_tools(agent.tools, journal))
    limit = max_steps or source.budget.max_steps or agent.budget.max_steps or DEFAULT_MAX_STEPS
    with tempfile.TemporaryDirectory(prefix="stateward-replay-") as tmp:
        # No telemetry: a replay is not a run of the operator's, so it adds to no span, metric or gauge of theirs.
        runtime = offline_runtime(open_store(str(Path(tmp) / "replay.db")), run_id, replay_agent)
        try:
            state = _begin(runtime, replay_agent, source, start, source_events[:after])
            answers = _answers(source_events[after:])
            applied, stopped_unmatched = _drive(runtime, state, limit, journal, answers, roles_of(agent))
            replay_events = _all_events(runtime.store, run_id)
            state = runtime.get(run_id)
        finally:
            runtime.close()
    used, before = state.usage, Usage() if start is None else start.usage
    recorded, replayed = decisions(source_events), decisions(replay_events)
    judged_from = None if from_seq is None else after + 1
    compared, matched, first = _compare(recorded, replayed, source_events, judged_from, journal, stopped_unmatched)
    return ReplayReport(
        run_id=run_id,
        model=model,
        from_seq=from_seq,
        started_at=None if from_seq is None else after,
        recorded_decisions=len(recorded),
        replayed_decisions=len(replayed),
        compared=compared,
        matched=matched,
        first_divergence=first,
        unrecorded_calls=journal.unrecorded,
        answers_applied=applied,
        observations_differing=_differing(source_events, replay_events),
        replay_status=state.status,
        replay_steps=used.steps - before.steps,
        max_steps=limit,
        model_calls=used.model_calls - before.model_calls,
        input_tokens=used.input_tokens - before.input_tokens,
        output_tokens=used.output_tokens - before.output_tokens,
    )


def _state_from(
    store: Store, agents: AgentRegistry, source: RunState, last: int, at: int | None
) -> tuple[RunState | None, int]:
    """The run's state at the step boundary at or before event ``at`` (as a fork there would have it) and
    that boundary's seq: asked for an event inside a step, the replay starts before the step, so the decision
    at ``at`` is the new model's. FORK_POINT_UNAVAILABLE where no state can be had; no ``at``: from the start."""
    if at is None:
        return None, 0
    if isinstance(at, bool) or not isinstance(at, int) or at < 1:
        raise UserError(f"a replay starts at an event number >= 1, not {at!r}"[:200], code=ErrorCode.INVALID_ARGUMENT)
    try:
        return state_at(store, agents, source, last, at, offline_runtime), at
    except RunError as refused:
        instead = refused.details.get("instead")
        if refused.code != ErrorCode.FORK_POINT_UNAVAILABLE or not isinstance(instead, int) or instead >= at:
            raise
    return state_at(store, agents, source, last, instead, offline_runtime), instead


def _begin(runtime: Runtime, agent: Agent, source: RunState, start: RunState | None, prefix: list[Event]) -> RunState:
    """The replay's run in the scratch store: a new run of ``agent`` on the source's goal, budget and tenant,
    or (``--from``) the source's history up to the start and its state there, its open request open again."""
    if start is None:
        return runtime.submit(agent, source.goal, run_id=source.run_id, budget=source.budget, tenant=source.tenant)
    runtime.store.create_run(start, [NewEvent(type=e.type, payload=e.payload) for e in prefix])
    if start.pending is not None:
        runtime.store.commit_step(start.run_id, len(prefix), StepWrite(state=start, open_request=start.pending))
    return start


def _drive(
    runtime: Runtime,
    state: RunState,
    limit: int,
    journal: Journal,
    answers: deque[dict[str, Any]],
    roles: frozenset[str],
) -> tuple[int, bool]:
    """Step the replay until it ends, stops, calls what the record does not hold or reaches ``limit`` steps,
    giving each wait the recorded answer (only to the same action); the answers given, and whether a wait had
    none that matched."""
    applied = steps = 0
    while steps < limit and not journal.unrecorded:
        if state.status is RunStatus.WAITING_FOR_USER and state.pending is not None:
            if not answers or not _answers_this(answers[0], state.pending):
                return applied, True
            state = give_answer(runtime, state.run_id, state.pending.request_id, answers.popleft(), roles)
            applied += 1
            continue
        if state.status not in (RunStatus.RUNNING, RunStatus.PAUSING):
            break
        state = runtime.step(state.run_id)
        steps += 1
    return applied, False


def _answers_this(given: dict[str, Any], pending: PendingRequest) -> bool:
    """Whether a recorded answer may be given to the replay's request: a person's approval of one action is
    never given to another (the digest of the action it guarded must be the same)."""
    if given.get("verdict") not in ANSWER_VERDICTS:
        return False
    recorded = given.get("guarded_digest")
    current = None if pending.guarded_action is None else pending.guarded_action.digest
    return recorded == current
