"""Forking a run: a new run whose history up to an event of its source is the source's.

``Runtime.fork(run_id, at=SEQ)`` (``stateward runs fork RUN --at SEQ``) starts from the run's state at
event ``SEQ``: a checkpoint taken at that event, the run's snapshot when ``SEQ`` is its last event and nobody
drives it, its first state at ``run_started``, or else the state rebuilt by re-driving the nearest of those
before ``SEQ`` offline, checked event for event against the record (runtime/fork_point.py). An event inside
a step, one at which an approved call had not run, one the re-drive does not reproduce, and one at which
the run had ended are refused by name (FORK_POINT_UNAVAILABLE, with the event to fork at instead).

What carries over, and what does not:

- **history**: the fork's store row names its source and ``SEQ``; its events are read through the
  source's rows (store/lineage.py), never copied;
- **side effects**: the fork's calls are made under its lineage's idempotency keys (``Lineage.key_scope``,
  the first run of the lineage), so a call the lineage journalled is answered from the journal and its
  handler never runs again;
- **usage**: the state at ``SEQ`` is the fork's, counters included; a budget is never reset. A larger
  budget is an explicit grant (``budget=``), recorded on the ``run_forked`` event;
- **approvals**: grants not yet spent at ``SEQ`` and an approved call not yet run are not carried (a
  guarded call in the fork asks again); answers given after ``SEQ`` never reach the fork;
- **requests**: the request open at ``SEQ`` is re-opened in the fork under a new id (the same question
  and action, the same time to live from now);
- **version, model, params**: the fork runs under its source's agent version unless ``agent_version``
  names another, which it reaches as a migration would (runtime/migration.py: only through a migration
  that version registers; a request whose action changed is closed as stale). ``model_spec`` and
  ``params`` rebuild the agent from the registry with those params (the version must still be one this
  process builds).

Forking a run of another tenant is refused exactly like an unknown run (RUN_NOT_FOUND).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from stateward.core.budget import Budget
from stateward.core.errors import ErrorCode, RunError, UserError
from stateward.core.events import CheckpointReason, EventType, NewEvent
from stateward.core.run_inputs import check_run_id
from stateward.core.state import AgentRef, Lineage, RunState
from stateward.core.status import RunStatus
from stateward.runtime import transition
from stateward.runtime.agent import Agent
from stateward.runtime.fork_point import OfflineDrivers, redrive_to
from stateward.runtime.migration import migrate_write

if TYPE_CHECKING:
    from stateward.runtime.agent_registry import AgentRegistry
    from stateward.store.base import Store

MAX_POINTS_NAMED = 50  # fork points a refusal lists
MAX_CHECKPOINTS = 10_000  # checkpoints searched for the nearest one before a fork point


def fork_run(
    store: Store,
    agents: AgentRegistry,
    run_id: str,
    *,
    at: int,
    by: str,
    now: datetime,
    new_run_id: str,
    agent_version: str | None = None,
    model_spec: str | None = None,
    params: Mapping[str, Any] | None = None,
    budget: Budget | None = None,
    drivers: OfflineDrivers,
) -> tuple[RunState, Agent, list[NewEvent]]:
    """Create the fork (see the module docstring) of a run the caller has checked is visible; return its first
    state, the agent it runs under and the events written. Nothing is driven here."""
    if isinstance(at, bool) or not isinstance(at, int) or at < 1:
        raise UserError(f"a fork point is an event number >= 1, not {at!r}"[:200], code=ErrorCode.INVALID_ARGUMENT)
    check_run_id(new_run_id)
    source, last = store.load_run_at(run_id)
    point = state_at(store, agents, source, last, at, drivers)
    if point.status.is_terminal:
        raise _unavailable(run_id, at, f"the run had ended ({point.status.value}) at event {at}: nothing to go on with")
    agent, ref = _fork_agent(agents, point.agent, agent_version, model_spec, params)
    key_scope = point.run_id if point.lineage is None else point.lineage.key_scope
    forked = point.model_copy(
        update={
            "run_id": new_run_id,
            "tenant": source.tenant,
            "approvals": (),
            "next_call": None,
            "setback": None,
            "trace": None,
            "budget": point.budget if budget is None else _granted(point, budget),
            "lineage": Lineage(forked_from=run_id, at_seq=at, key_scope=key_scope, artifacts=dict(point.artifacts)),
        }
    )
    events: list[NewEvent] = [_forked_event(point, forked, ref, by=by, key_scope=key_scope, granted=budget)]
    if forked.pending is not None:
        reopened = transition.reopen(forked, now=now)
        forked = reopened.state
        events += reopened.events
    if ref != forked.agent:
        move = None if ref.version == forked.agent.version else agents.migration(forked.agent, ref.version or "")
        write = migrate_write(forked, agent, move, to=ref, by=by, now=now, stopped_only=False)
        forked, events = write.state, [*events, *write.events]
    opened = forked.pending
    store.create_fork(forked, events, source=run_id, at_seq=at, open_request=opened, checkpoint=CheckpointReason.FORK)
    return forked, agent, events


def _forked_event(
    point: RunState, forked: RunState, ref: AgentRef, *, by: str, key_scope: str, granted: Budget | None
) -> NewEvent:
    """``run_forked``: where from, by whom, under which version, the usage carried and any budget granted."""
    lineage = forked.lineage
    assert lineage is not None
    return NewEvent(
        type=EventType.RUN_FORKED,
        payload={
            "forked_from": lineage.forked_from,
            "at_seq": lineage.at_seq,
            "by": by,
            "agent": point.agent.name,
            "agent_version": point.agent.version,
            "to_version": ref.version,
            "params": ref.params,
            "key_scope": key_scope,
            "usage": point.usage.model_dump(),
            "budget_granted": None if granted is None else forked.budget.model_dump(),
            "dropped_grants": [g.request_id for g in point.approvals],
        },
    )


def state_at(
    store: Store, agents: AgentRegistry, source: RunState, last: int, at: int, drivers: OfflineDrivers
) -> RunState:
    """The run's state at event ``at``: a checkpoint's, the stopped run's own at its last event, its first at
    ``run_started``, else rebuilt from the nearest of those before it (runtime/fork_point.py).
    FORK_POINT_UNAVAILABLE where no state existed or it cannot be rebuilt."""
    if at > last:
        raise _unavailable(source.run_id, at, f"the run has {last} events")
    checkpoint = store.checkpoint_at(source.run_id, at)
    if checkpoint is not None:
        return checkpoint.state
    if at == last and source.status not in (RunStatus.RUNNING, RunStatus.PAUSING):
        return source
    first = store.read_events(source.run_id, 0, 1)
    start = _started(source, first[0].payload if first else {})
    if at == 1:
        return start
    before = [c for c in store.checkpoints_of(source.run_id, MAX_CHECKPOINTS) if c.seq < at]
    base, base_seq = (before[-1].state, before[-1].seq) if before else (start, 1)
    if base.status.is_terminal:
        raise _unavailable(source.run_id, at, f"the run had ended at event {base_seq}")
    return redrive_to(store, agents.build(base.agent), source, base, base_seq, at, _unavailable, drivers)


def _started(source: RunState, payload: Mapping[str, Any]) -> RunState:
    """The run as ``run_started`` recorded it: its agent, goal, budget and tenant, nothing used yet."""
    ref = AgentRef(
        name=str(payload.get("agent", source.agent.name)),
        version=payload.get("agent_version"),
        params=dict(payload.get("params") or {}),
    )
    root = source.run_id if source.lineage is None else source.lineage.key_scope
    return RunState(
        run_id=root,
        tenant=str(payload.get("tenant", source.tenant)),
        agent=ref,
        goal=str(payload.get("goal", source.goal)),
        budget=Budget.model_validate(payload.get("budget") or {}),
    )


def _fork_agent(
    registry: AgentRegistry,
    ref: AgentRef,
    agent_version: str | None,
    model_spec: str | None,
    params: Mapping[str, Any] | None,
) -> tuple[Agent, AgentRef]:
    """The fork's agent and its reference: the source's, or rebuilt with other params, model or version."""
    target = agent_version or ref.version
    if model_spec is None and not params:
        wanted = AgentRef(name=ref.name, version=target, params=ref.params)
        return registry.build(wanted), wanted
    given = {**ref.params, **dict(params or {})}
    if model_spec is not None:
        given.pop("model_spec", None)
    agent = registry.create(ref.name, given, model_spec=model_spec)
    built = agent.agent_ref
    if target is not None and built.version != target:
        raise RunError(
            f"this process builds agent {ref.name!r} under version {built.version!r}, not {target!r}",
            code=ErrorCode.AGENT_VERSION_UNAVAILABLE,
            details={"agent": ref.name, "asked": target, "available": [built.version]},
        )
    return agent, built


def _granted(point: RunState, budget: Budget) -> Budget:
    """A budget explicitly granted to a fork: never below what the run had (a fork never resets a budget)."""
    lowered = [
        name
        for name, value in budget.model_dump().items()
        if (before := getattr(point.budget, name)) is not None and value is not None and value < before
    ]
    if lowered:
        raise UserError(
            f"a budget granted to a fork may only grow: {', '.join(lowered)} would be lower",
            code=ErrorCode.INVALID_ARGUMENT,
            details={"lowered": lowered},
        )
    return budget


def _unavailable(
    run_id: str, at: int, why: str, points: list[int] | None = None, *, instead: int | None = None
) -> RunError:
    named = (points or [])[:MAX_POINTS_NAMED]
    return RunError(
        f"run {run_id} cannot be forked at event {at}: {why}"
        + (f" (fork points: {', '.join(map(str, named))})" if named else "")
        + (f"; fork at event {instead} instead" if instead is not None else ""),
        code=ErrorCode.FORK_POINT_UNAVAILABLE,
        details={"run_id": run_id, "at": at, "points": named, "instead": instead},
    )
