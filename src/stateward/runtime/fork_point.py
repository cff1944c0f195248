"""The state of a run at any event: the nearest checkpoint before it, re-driven offline up to it, checked.

A run's snapshot is stored only at checkpoints (before waits, pauses and ends, at plan changes, item
boundaries and artifact writes), not after every step. The state at another event ``SEQ`` is rebuilt the
honest way, by doing again what the run did: the checkpoint at or before ``SEQ`` (or the run's start) is
copied into a throw-away SQLite store and driven there, one step at a time, by the agent the run ran under,
with every tool answered from the run's journal (runtime/replay.py: no handler is called) and the answers
people gave re-given at the same waits, until the copy's log reaches ``SEQ``. The copy's events must be the
record's, event for event (timestamps aside): a model that decides otherwise this time, a pause, a child
run or anything else not reproduced is refused (FORK_POINT_UNAVAILABLE), never guessed.

Some events have no state: a step (and an answer) is written in one transaction, so an event inside one,
e.g. between a tool's call and its outcome, names no moment the run was ever in; nor does one at which an
approved call had not run yet (a grant is single-use and never carried into a fork). Those are refused by
name with the seq to fork at instead (``details["instead"]``: the last event before it that can be forked).
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from stateward.core.errors import RunError
from stateward.core.events import Event, EventType, NewEvent
from stateward.core.state import RunState
from stateward.core.status import RunStatus
from stateward.observability.payloads import resolve
from stateward.runtime.agent import Agent
from stateward.runtime.recorded_answers import Journal, answering_tools, give_answer, roles_of
from stateward.store.backends import open_store
from stateward.store.base import Store
from stateward.store.records import StepWrite

PAGE = 1000
STEP_EVENTS = 200  # events read past the fork point: the rest of its step (a call's outcome, for the journal)
VOLATILE = frozenset({"at", "created_at", "expires_at", "deadline", "elapsed_s", "duration_ms", "trace_id", "span_id"})
"""Payload keys that name a moment or a span, not what happened: left out when the copy is checked."""

Unavailable = Callable[..., RunError]  # (run_id, at, why, points=None, *, instead=None) -> the refusal


class OfflineDriver(Protocol):
    """What the re-drive needs of a Runtime: the scratch store, a step, answers (given through
    ``give_answer``) and a close. The caller builds it, so this module never imports the Runtime."""

    store: Store

    def step(self, run_id: str) -> RunState:
        """Run one step of the run."""
        ...

    def close(self) -> None:
        """Release what the driver holds."""
        ...


OfflineDrivers = Callable[[Store, str, Agent], OfflineDriver]
"""(scratch store, run id, the agent that run is driven by) -> a driver over that store."""


def redrive_to(
    store: Store,
    agent: Agent,
    source: RunState,
    base: RunState,
    base_seq: int,
    at: int,
    unavailable: Unavailable,
    drivers: OfflineDrivers,
) -> RunState:
    """``source``'s state at event ``at``, rebuilt from ``base`` (its state at ``base_seq`` < ``at``) as the
    module docstring says; the refusal built by ``unavailable`` where it cannot be."""
    raw = _events(store, source.run_id, 0, at + STEP_EVENTS)
    history = _resolved(store, source.run_id, raw)  # values, not references to the source store's payloads
    prefix, record = history[:base_seq], raw[base_seq:]
    copy = dataclasses.replace(
        agent, tools=answering_tools(agent.tools, Journal(history[base_seq:], store, source.run_id, agent.tools))
    )
    answers = [e.payload for e in record if e.type is EventType.REQUEST_ANSWERED and e.seq <= at]

    with tempfile.TemporaryDirectory(prefix="stateward-fork-") as tmp:
        scratch = open_store(str(Path(tmp) / "fork.db"))
        runtime = drivers(scratch, base.run_id, copy)
        try:
            # The run's history up to the base, then the base's state: what the controller sees is the run's.
            scratch.create_run(base, [NewEvent(type=e.type, payload=e.payload) for e in prefix])
            if base.pending is not None:  # the request the run waited on, open in the copy as in the run
                scratch.commit_step(base.run_id, base_seq, StepWrite(state=base, open_request=base.pending))
            return _walk(runtime, copy, base, at, record, answers, unavailable, source.run_id)
        finally:
            runtime.close()


def _walk(
    runtime: OfflineDriver,
    agent: Agent,
    state: RunState,
    at: int,
    record: list[Event],
    answers: list[dict[str, Any]],
    unavailable: Unavailable,
    run_id: str,
) -> RunState:
    """Step the copy until its log reaches ``at``, checking each batch of events it writes against the record."""
    base_seq = forkable = seq = runtime.store.last_seq(state.run_id)
    while seq < at:
        if state.status is RunStatus.WAITING_FOR_USER and state.pending is not None and answers:
            state = give_answer(runtime, state.run_id, state.pending.request_id, answers.pop(0), roles_of(agent))
        elif state.status in (RunStatus.RUNNING, RunStatus.PAUSING):
            state = runtime.step(state.run_id)
        else:
            raise unavailable(run_id, at, f"re-driving from event {base_seq} stopped at event {seq}", instead=forkable)
        before, seq = seq, runtime.store.last_seq(state.run_id)
        if seq == before:
            raise unavailable(run_id, at, f"re-driving from event {base_seq} stalled at event {seq}", instead=forkable)
        differs = _first_difference(runtime.store.read_events(state.run_id, before), record, before, seq)
        if differs is not None:
            why = f"re-driving from event {base_seq} did not reproduce event {differs}"
            raise unavailable(run_id, at, why, instead=forkable)
        if seq > at:
            why = f"events {before + 1}-{seq} were written as one step: no state existed between them"
            raise unavailable(run_id, at, why, instead=forkable)
        if state.next_call is None and not state.status.is_terminal:
            forkable = seq
    if state.next_call is not None:
        why = "an approved call had not run yet (an approval is single-use: it is not carried into a fork)"
        raise unavailable(run_id, at, why, instead=forkable)
    return state


def _events(store: Store, run_id: str, after: int, upto: int) -> list[Event]:
    """The record's events numbered ``after`` + 1 .. ``upto`` (paged: bounded reads)."""
    out: list[Event] = []
    while len(out) < upto - after and (page := store.read_events(run_id, after + len(out), PAGE)):
        out += [e for e in page if e.seq <= upto]
        if page[-1].seq >= upto:
            break
    return out


def _resolved(store: Store, run_id: str, events: list[Event]) -> list[Event]:
    """``events`` with their offloaded payloads put back (the journal answers with the values themselves)."""

    def fetch(name: str) -> str | None:
        found = store.get_artifact(run_id, name, 1)
        return None if found is None else found.content

    return [e.model_copy(update={"payload": resolve(e.payload, fetch)}) for e in events]


def _first_difference(copy: list[Event], record: list[Event], after: int, upto: int) -> int | None:
    """The first source seq in ``after`` + 1 .. min(``upto``, the record's end) where the copy's event is not
    the record's (None if all agree). Events past the record are judged by the caller (seq > at)."""
    recorded = {e.seq: e for e in record}
    for offset, event in enumerate(copy, start=after + 1):
        if offset > upto or offset not in recorded:
            return None
        old = recorded[offset]
        if old.type is not event.type or _plain(old.payload) != _plain(event.payload):
            return offset
    return None


def _plain(value: Any) -> Any:
    """``value`` without the keys that name a moment (VOLATILE), at any depth."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
