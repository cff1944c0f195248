"""The observations a drive starts with: what the run's controller has seen of its tool calls, from the log.

A call whose outcome was unknown (``PENDING_VERIFICATION``) and was later settled (by a lookup, a retry, or a
person's answer to its reconciliation) is seen as what was recorded about it, never as the stale "nobody knows".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from stateward.core.contract import Observation, ObservationLog
from stateward.core.events import Event, EventType
from stateward.core.state import RunState
from stateward.observability.payloads import resolve
from stateward.store.base import Store

OBSERVED = (EventType.TOOL_ATTEMPTED, EventType.ACTION_REFUSED, EventType.CHILD_RUN_RETURNED)


def observations_of(store: Store, state: RunState) -> ObservationLog:
    """The run's observations in order, superseded unknown outcomes left out. A run that has taken no step has
    observed nothing (an observation comes from a step, or from an answer to a step's wait), so a freshly
    submitted run's drive reads no events."""
    if state.usage.steps == 0:
        return ObservationLog()
    run_id = state.run_id

    def fetch(name: str) -> str | None:
        found = store.get_artifact(run_id, name, 1)
        return None if found is None else found.content

    return observations_in(store.read_events(run_id), state, fetch)


def observations_in(
    log: Iterable[Event], state: RunState, fetch: Callable[[str], str | None] = lambda _name: None
) -> ObservationLog:
    """:func:`observations_of` over events already read (a backend that keeps them itself, e.g. a Temporal
    workflow); ``fetch`` resolves a payload offloaded to an artifact."""
    events = [ev for ev in log if ev.type in OBSERVED]
    observed = [
        (ev.payload.get("idempotency_key"), Observation.model_validate(resolve(ev.payload["observation"], fetch)))
        for ev in events
    ]
    settling = None if state.next_call is None else state.next_call.reconciled
    stale = superseded_pending(observed, None if settling is None else settling.idempotency_key)
    # A call that started a child run is seen as the child's outcome, once it returned.
    returned = {ev.payload.get("idempotency_key") for ev in events if ev.type is EventType.CHILD_RUN_RETURNED}
    stale |= {
        index
        for index, ev in enumerate(events)
        if ev.type is EventType.TOOL_ATTEMPTED and ev.payload.get("idempotency_key") in returned
    }
    return ObservationLog(obs for index, (_, obs) in enumerate(observed) if index not in stale)


def superseded_pending(observed: list[tuple[Any, Observation]], settling: str | None) -> set[int]:
    """The PENDING_VERIFICATION observations (by position in ``observed``: idempotency key, observation) that a
    later outcome of the same call replaced, or that a person's answer about to be recorded (``settling``, its
    key) replaces."""
    last_of = {key: index for index, (key, _) in enumerate(observed) if isinstance(key, str)}
    return {
        index
        for index, (key, obs) in enumerate(observed)
        if obs.status == "PENDING_VERIFICATION" and isinstance(key, str) and (last_of[key] > index or key == settling)
    }
