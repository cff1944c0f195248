"""Moving a stopped run to another version of its agent, on purpose and only through a registered migration.

A run records the version it started under, and only that build (or one declared compatible) drives it.
An operator who wants a waiting run to go on under a new version says so (``stateward runs migrate RUN
--to VERSION``); the new version must register a migration from the run's version
(``registry.agent("x", version="2", migrations={"1": fn})``). ``fn`` may change the run's ``facts`` and
``memo`` (what a new definition reads differently); nothing else: a migration never resets a budget, never
answers a request and never changes whose run it is (INVALID_MIGRATION otherwise, nothing written).

An approval the run waits for, or holds, is bound to an exact action (tool + canonical arguments + plan
version). Under the new version that action is checked again: if its tool is gone, no longer asks for
approval, refuses the arguments, or canonicalises them to another digest, the request is closed as
**stale** (a named verdict and reason, recorded) and the run goes on RUNNING to decide again — a stale
approval is never re-bound to whatever the new version calls that action. Unspent grants and an approved
call not yet run are dropped the same way. Only WAITING_FOR_USER and PAUSED runs move (RUN_NOT_MIGRATABLE
otherwise: a running run is in someone's hands, an ended one has nothing left to drive).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import ValidationError

from stateward.core.canonical import action_digest
from stateward.core.errors import ErrorCode, RunError, StatewardError
from stateward.core.events import CheckpointReason, EventType, NewEvent
from stateward.core.state import AgentRef, AnswerVerdict, GuardedAction, RunState
from stateward.core.status import RunStatus
from stateward.runtime import transition
from stateward.runtime.agent import Agent
from stateward.runtime.agent_registry import Migration
from stateward.store.records import RequestAnswer, StepWrite

MIGRATABLE = (RunStatus.WAITING_FOR_USER, RunStatus.PAUSED)
MUTABLE_FIELDS = frozenset({"facts", "memo"})  # what a migration function may change
STALE = "stale"  # the verdict word a stale request is closed with (its answer's text starts with it)


def check_migratable(state: RunState) -> None:
    """RUN_NOT_MIGRATABLE unless the run is stopped (waiting for a person, or paused)."""
    if state.status not in MIGRATABLE:
        raise RunError(
            f"run {state.run_id} is {state.status.value}; only a WAITING_FOR_USER or PAUSED run is migrated",
            code=ErrorCode.RUN_NOT_MIGRATABLE,
            details={"run_id": state.run_id, "status": state.status.value},
        )


def apply_migration(state: RunState, move: Migration | None) -> RunState:
    """The run's state after ``move`` (None: nothing to transform); INVALID_MIGRATION if it raised, returned
    no RunState, or changed anything but ``facts`` and ``memo``."""
    if move is None:
        return state
    try:
        moved = move(state)
    except StatewardError:
        raise
    except Exception as exc:
        raise _invalid(state, f"the migration raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(moved, RunState):
        raise _invalid(state, f"the migration returned {type(moved).__name__}, not a RunState")
    changed = sorted(
        name
        for name in type(state).model_fields
        if name not in MUTABLE_FIELDS and getattr(moved, name) != getattr(state, name)
    )
    if changed:
        raise _invalid(state, f"a migration may change only facts and memo, not {', '.join(changed)}")
    return moved


def stale_reason(action: GuardedAction, agent: Agent) -> str | None:
    """Why ``action`` is not the same action under ``agent`` (its tool gone, no longer guarded, its arguments
    refused or canonicalised differently), or None when it still is."""
    spec = agent.tools.get(action.tool)
    if spec is None:
        return f"tool {action.tool!r} no longer exists"
    if not spec.requires_approval:
        return f"tool {action.tool!r} no longer asks for approval"
    try:
        args = spec.canonical_args(spec.validate_args(action.args))
        digest = action_digest(spec.name, args, action.plan_version)
    except (ValidationError, TypeError, ValueError) as exc:
        return f"tool {action.tool!r} refuses the approved arguments: {str(exc).splitlines()[0][:200]}"
    if digest != action.digest:
        return f"tool {action.tool!r} binds the approved arguments to another action"
    return None


def migrate_write(
    state: RunState,
    agent: Agent,
    move: Migration | None,
    *,
    to: AgentRef,
    by: str,
    now: datetime,
    stopped_only: bool = True,
) -> StepWrite:
    """The one step that moves ``state`` to ``to`` (its new agent ``agent`` already built): the migration
    applied, stale requests closed and stale grants dropped, recorded as ``agent_migrated`` with who, from, to.
    ``stopped_only=False`` is a fork's (a new run nobody drives yet may start under another version)."""
    if stopped_only:
        check_migratable(state)
    moved, stale = _without_stale_grants(apply_migration(state, move).model_copy(update={"agent": to}), agent)
    events: list[NewEvent] = []
    closed: RequestAnswer | None = None
    pending = moved.pending
    guarded = None if pending is None else pending.guarded_action
    reason = None if guarded is None else stale_reason(guarded, agent)
    if pending is not None and guarded is not None and reason is not None:
        closed = RequestAnswer(
            request_id=pending.request_id, verdict=AnswerVerdict.CLOSED, text=f"{STALE}: {reason}", by=by, at=now
        )
        stale.append({"request_id": pending.request_id, "tool": guarded.tool, "reason": reason})
    migrated = NewEvent(
        type=EventType.AGENT_MIGRATED,
        payload={
            "by": by,
            "agent": to.name,
            "from_version": state.agent.version,
            "to_version": to.version,
            "migration": None if move is None else _qualname(move),
            "stale": stale,
        },
    )
    events.append(migrated)
    if closed is not None:
        events.append(
            NewEvent(
                type=EventType.REQUEST_ANSWERED,
                payload={"request_id": closed.request_id, "verdict": STALE, "by": by, "reason": reason},
            )
        )
        resumed = transition.resume_on_answer(moved, closed, "request_stale")
        moved = resumed.state
        events += resumed.events
    return StepWrite(
        state=moved, events=events, close_request=closed, checkpoint=CheckpointReason.MIGRATION, set_agent_version=True
    )


def _without_stale_grants(moved: RunState, agent: Agent) -> tuple[RunState, list[dict[str, Any]]]:
    """``moved`` without the grants and the approved call whose action ``agent`` no longer has (never
    re-bound to another), and what was dropped and why."""
    stale: list[dict[str, Any]] = []
    kept = []
    for grant in moved.approvals:
        why = stale_reason(grant.action, agent)
        if why is None:
            kept.append(grant)
        else:
            stale.append({"grant": grant.request_id, "tool": grant.action.tool, "reason": why})
    next_call = moved.next_call
    if next_call is not None and next_call.reconciled is None:
        why = stale_reason(next_call.action, agent)
        if why is not None:
            stale.append({"approved_call": next_call.request_id, "tool": next_call.action.tool, "reason": why})
            next_call = None
    return moved.model_copy(update={"approvals": tuple(kept), "next_call": next_call}), stale


def _invalid(state: RunState, why: str) -> RunError:
    return RunError(
        f"run {state.run_id}: {why}"[:1000],
        code=ErrorCode.INVALID_MIGRATION,
        details={"run_id": state.run_id, "agent": state.agent.name, "from": state.agent.version},
    )


def _qualname(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', type(obj).__qualname__)}"
