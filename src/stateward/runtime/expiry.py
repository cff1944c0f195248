"""The periodic sweep: expired requests (the agent's declared policy: fail, cancel, or escalate), due
timers, and PAUSED runs whose retry time came."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from stateward.core.errors import ErrorCode, RunError
from stateward.core.setback import without_retry
from stateward.core.state import RequestKind
from stateward.core.status import RunStatus
from stateward.runtime import transition
from stateward.runtime.recovery import RETRY_BY

log = logging.getLogger("stateward.expiry")

if TYPE_CHECKING:
    from collections.abc import Callable
    from datetime import datetime

    from stateward.core.state import RunState
    from stateward.runtime.agent import Agent
    from stateward.runtime.write import Write
    from stateward.store.base import Store


def expire_due(store: Store, now: datetime, agent_for: Callable[[RunState], Agent]) -> list[tuple[str, str, str]]:
    """Apply each expired request's policy (its run's agent, from ``agent_for``, says which) as of ``now``;
    returns (run id, request id, what happened) for each."""
    expired: list[tuple[str, str, str]] = []
    for record in store.list_requests(None, open_only=True):
        request = record.request
        if request.expires_at is None or now < request.expires_at:
            continue
        state, seq = store.load_run_at(record.run_id)
        if state.status is not RunStatus.WAITING_FOR_USER or state.pending != request:
            continue
        try:
            write, happened = expiry_write(state, now, agent_for)
        except Exception as exc:  # one run whose agent cannot be built here must not stop the sweep
            log.warning("run %s: cannot apply its expiry policy here: %s", record.run_id, exc)
            continue
        try:
            store.commit_step(record.run_id, seq, write.stored())
        except RunError as exc:
            if exc.code in {ErrorCode.CONCURRENT_UPDATE, ErrorCode.LEASE_HELD}:
                continue  # answered or moved on meanwhile: the next sweep looks again
            raise
        expired.append((record.run_id, request.request_id, happened))
    return expired


def expiry_write(state: RunState, now: datetime, agent_for: Callable[[RunState], Agent]) -> tuple[Write, str]:
    """What the expiry of the request ``state`` waits on does (a timer fires; any other request takes its
    agent's policy: fail, cancel or escalate), and its name: every backend's sweep, a store's or a workflow's."""
    pending = state.pending
    assert pending is not None
    if pending.kind is RequestKind.TIMER:
        return transition.fire_timer(state, now), "timer_fired"
    agent = agent_for(state)
    write = transition.expire(
        state,
        agent.on_request_expiry,
        now=now,
        role=agent.escalation_role,
        expires_at=None if agent.request_ttl is None else now + agent.request_ttl,
    )
    return write, agent.on_request_expiry


def retry_write(state: RunState) -> Write:
    """A PAUSED run whose retry time came -> RUNNING, recorded as stateward's doing; setbacks and usage carry on."""
    setback = state.setback
    assert setback is not None
    return transition.resume(
        state, "retry_due", by=RETRY_BY, retrying=setback.kind.value, setback=without_retry(setback)
    )


def resume_due(store: Store, now: datetime) -> list[str]:
    """PAUSED runs whose retry time came -> RUNNING, through the table, recorded as stateward's doing.

    A worker claims them next. Counts of setbacks and the budget's usage carry on unchanged.
    """
    resumed: list[str] = []
    for run_id in store.due_runs(RunStatus.PAUSED.value, now):
        state, seq = store.load_run_at(run_id)
        setback = state.setback
        if state.status is not RunStatus.PAUSED or setback is None or setback.retry_at is None:
            continue
        if now < setback.retry_at:
            continue
        write = retry_write(state)
        try:
            store.commit_step(run_id, seq, write.stored())
        except RunError as exc:
            if exc.code in {ErrorCode.CONCURRENT_UPDATE, ErrorCode.LEASE_HELD}:
                continue  # resumed or cancelled meanwhile
            raise
        resumed.append(run_id)
    return resumed
