"""Child runs: a parent's agent-tool call started, waited on, and answered by the child's end.

A parent's call commits its CHILD_RUN wait first (``transition.await_child``, naming the child's derived run
id and carved budget); the child run is created after that, idempotently (an existing child is the child), and
its end resumes the parent (``transition.child_returned``). Each step is a separate, idempotent write, so a
process that dies between any two leaves nothing a later pass cannot finish: ``settle`` (a worker's sweep)
starts a child whose parent waits for it but which was never created, and delivers an ended child's outcome
its parent never received. A parent never waits on a second child for the same call (a parallel call's
children are one per goal, each its own key), and a parallel call's outcome is delivered by the last of
its children to end, once.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from stateward.core.errors import ErrorCode, RunError, RunNotFoundError, StatewardError
from stateward.core.events import EventType, NewEvent
from stateward.core.state import ChildCall, ParentLink, RequestKind, RunState, TraceLink
from stateward.core.status import RunStatus
from stateward.observability.payloads import resolve
from stateward.runtime import transition
from stateward.runtime.agent import Agent
from stateward.runtime.child_call import child_observation, children_observation, total_usage
from stateward.runtime.control import ControlRequest
from stateward.runtime.write import Write
from stateward.store.base import Store

log = logging.getLogger("stateward.children")
AgentMaker = Callable[[str, dict[str, Any]], Agent]  # (name, params) -> the agent a new run of it runs
SETTLE_PAGES = 10  # a sweep reads at most this many pages of open requests (bounded work per sweep)
_LOST_RACE = (ErrorCode.CONCURRENT_UPDATE, ErrorCode.REQUEST_NOT_OPEN, ErrorCode.STALE_REQUEST)


def run_started(agent: Agent, state: RunState) -> NewEvent:
    """``run_started``: the first event of every run, a child's included."""
    return NewEvent(
        type=EventType.RUN_STARTED,
        payload={
            "agent": agent.agent_ref.name,
            "agent_version": agent.agent_ref.version,
            "params": agent.agent_ref.params,
            "mode": agent.controller.mode,
            "goal": state.goal,
            "budget": state.budget.model_dump(),
            "tenant": state.tenant,
        },
    )


def waited_child(state: RunState) -> ChildCall | None:
    """The child call ``state`` waits on, if it waits on one."""
    pending = state.pending
    if state.status is not RunStatus.WAITING_FOR_USER or pending is None or pending.kind is not RequestKind.CHILD_RUN:
        return None
    return pending.child


def waited_calls(state: RunState) -> tuple[ChildCall, ...]:
    """Every child call ``state`` waits on: one, or a parallel call's several (none if it waits on none)."""
    call = waited_child(state)
    if call is None or state.pending is None:
        return ()
    return (call, *state.pending.siblings)


def _existing(store: Store, run_id: str) -> RunState | None:
    try:
        return store.load_run(run_id)
    except RunNotFoundError:
        return None


def ensure_child(store: Store, make: AgentMaker, parent: RunState, now: datetime) -> RunState | None:
    """The child runs ``parent`` waits on, each created if it does not exist yet (tenant inherited, approvals
    not: a child starts with none); returned is the one to look at next: the first runnable one, else the
    first still open, else (all ended) the last. None if ``parent`` waits on no child, if a cancel of
    ``parent`` was asked (it is cancelled, and no child starts), or if the child's agent cannot be built (the
    parent's call then fails with CHILD_AGENT_UNAVAILABLE)."""
    found: list[RunState] = []
    for call in waited_calls(parent):
        child = _existing(store, call.run_id) or _start(store, make, parent, call, now)
        if child is None:
            return None
        found.append(child)
    if not found:
        return None
    runnable = [c for c in found if c.status in (RunStatus.RUNNING, RunStatus.PAUSING)]
    still_open = [c for c in found if not c.status.is_terminal]
    return (runnable or still_open or found[-1:])[0]


def _start(store: Store, make: AgentMaker, parent: RunState, call: ChildCall, now: datetime) -> RunState | None:
    """``call``'s child run, created (or the one another process created first)."""
    control = ControlRequest.decode(store.get_control(parent.run_id))
    if control is not None and control.kind == "cancel":
        # Cancelled while the step that made the call was in flight: the call starts nothing.
        state, seq = store.load_run_at(parent.run_id)
        if call in waited_calls(state):
            _commit(store, state, seq, transition.cancel(state, by=control.by, roles=control.roles, now=now))
        return None
    try:
        agent = make(call.agent, call.params)
    except StatewardError as exc:
        log.warning("run %s: cannot start child agent %s: %s", parent.run_id, call.agent, exc)
        _return_failure(store, parent, call, f"{exc.code}: {exc.message}", now)
        return None
    assert parent.pending is not None
    link = ParentLink(
        run_id=parent.run_id,
        request_id=parent.pending.request_id,
        idempotency_key=call.idempotency_key,
        root_run_id=parent.run_id if parent.parent is None else parent.parent.root_run_id,
        depth=1 if parent.parent is None else parent.parent.depth + 1,
        on_handoff=call.on_handoff,
        parent_role=call.parent_role,
    )
    child = RunState(
        run_id=call.run_id,
        tenant=parent.tenant,
        agent=agent.agent_ref,
        goal=call.goal,
        budget=call.budget,
        parent=link,
        # The child's trace continues the parent's: its segments are children of the segment that made the call.
        trace=None if parent.trace is None else TraceLink(root=parent.trace.last, last=parent.trace.last),
    )
    started = NewEvent(type=EventType.CHILD_RUN_STARTED, payload=link.model_dump(mode="json"))
    try:
        store.create_run(child, [run_started(agent, child), started])
    except RunError as exc:
        if exc.code is not ErrorCode.RUN_EXISTS:
            raise
        return store.load_run(call.run_id)  # another process started it first: that is the child
    return child


def deliver(store: Store, child: RunState, now: datetime, answer: str | None = None) -> bool:
    """Resume ``child``'s parent with the call's outcome, if ``child`` ended, its parent still waits on it
    and (a parallel call) every other child of the call ended too; False when there was nothing to do
    (a sibling is still open, someone delivered it first, or the parent no longer waits: it was cancelled)."""
    link = child.parent
    if link is None or not child.status.is_terminal:
        return False
    parent, seq = store.load_run_at(link.run_id)
    calls = waited_calls(parent)
    if child.run_id not in {c.run_id for c in calls} or parent.pending is None:
        return False
    ended: list[tuple[RunState, str | None]] = []
    for call in calls:
        other = child if call.run_id == child.run_id else _existing(store, call.run_id)
        if other is None or not other.status.is_terminal:
            return False  # the last of the call's children to end delivers
        ended.append((other, answer if other is child else final_answer(store, other)))
    observed = children_observation(calls, parent.pending.call_step or 0, ended)
    usage = total_usage([state for state, _ in ended])
    write = transition.child_returned(parent, calls[0].run_id, usage, observed, now=now)
    return _commit(store, parent, seq, write)


def siblings_open(store: Store, child: RunState) -> bool:
    """Whether the parallel call that started ``child`` still waits on another of its children."""
    if child.parent is None:
        return False
    calls = waited_calls(store.load_run(child.parent.run_id))
    if child.run_id not in {c.run_id for c in calls}:
        return False
    others = [c for c in calls if c.run_id != child.run_id]
    return any((o := _existing(store, c.run_id)) is None or not o.status.is_terminal for c in others)


def _return_failure(store: Store, parent: RunState, call: ChildCall, error: str, now: datetime) -> bool:
    state, seq = store.load_run_at(parent.run_id)
    if call not in waited_calls(state) or state.pending is None:
        return False
    observed = child_observation(call, state.pending.call_step or 0, None, error=error)
    write = transition.child_returned(state, call.run_id, None, observed, now=now)
    return _commit(store, state, seq, write)


def _commit(store: Store, parent: RunState, seq: int, write: Write) -> bool:
    try:
        store.commit_step(parent.run_id, seq, write.stored())
    except RunError as exc:
        if exc.code in _LOST_RACE:
            return False  # another process delivered it between our read and our write
        raise
    return True


def final_answer(store: Store, child: RunState) -> str | None:
    """The reason the child's last decision gave for finishing (its answer, for a ReAct agent), if any."""
    last = store.last_seq(child.run_id)

    def fetch(name: str) -> str | None:
        found = store.get_artifact(child.run_id, name, 1)
        return None if found is None else found.content

    for event in reversed(store.read_events(child.run_id, max(0, last - 20), 20)):
        if event.type is EventType.SIGNAL_RECEIVED:
            signal = resolve(event.payload.get("signal"), fetch)
            if isinstance(signal, str):
                try:
                    signal = json.loads(signal)
                except ValueError:
                    return None
            if isinstance(signal, dict) and signal.get("type") in ("FINISH", "FAIL"):
                reason = signal.get("reason")
                return reason if isinstance(reason, str) else None
            return None
    return None


def settle(store: Store, make: AgentMaker, now: datetime) -> list[str]:
    """One sweep over the open CHILD_RUN waits: start each child never created, deliver each ended child's
    outcome to its parent. Returns the runs it made runnable (children started, parents resumed)."""
    moved: list[str] = []
    cursor: str | None = None
    for _ in range(SETTLE_PAGES):
        page = store.page_requests(open_only=True, limit=200, cursor=cursor)
        for row in page.items:
            if row.request.kind is not RequestKind.CHILD_RUN or row.request.child is None:
                continue
            try:
                moved += settle_one(store, make, store.load_run(row.run_id), now)
            except StatewardError as exc:
                log.warning("run %s: child not settled: %s", row.run_id, exc)
        cursor = page.next_cursor
        if cursor is None:
            break
    return moved


def settle_one(store: Store, make: AgentMaker, parent: RunState, now: datetime) -> list[str]:
    """``settle`` for one parent: its children started if missing, the call's outcome delivered if they all
    ended."""
    calls = waited_calls(parent)
    if not calls:
        return []
    missing = [c.run_id for c in calls if _existing(store, c.run_id) is None]
    child = ensure_child(store, make, parent, now)
    if child is None:
        return [parent.run_id] if waited_child(store.load_run(parent.run_id)) is None else []
    if child.status.is_terminal:
        return [parent.run_id] if deliver(store, child, now, final_answer(store, child)) else []
    return [r for r in missing if _existing(store, r) is not None]


MAX_CHAIN = 64  # how far up a chain is walked (a tree deeper than this is shown cut at its top)


def chain(store: Store, state: RunState) -> list[str]:
    """The run ids above ``state``, root first, down to its parent."""
    above: list[str] = []
    link = state.parent
    while link is not None and len(above) < MAX_CHAIN:
        above.append(link.run_id)
        link = store.load_run(link.run_id).parent
    return above[::-1]


def children_of(store: Store, run_id: str) -> list[RunState]:
    """The child runs of ``run_id``, in the order its calls started them (from its CHILD_RUN requests; a
    call whose child was never started has none)."""
    found: list[RunState] = []
    cursor: str | None = None
    for _ in range(SETTLE_PAGES):
        page = store.page_requests(run_id=run_id, open_only=False, limit=200, cursor=cursor)
        for row in page.items:
            call = row.request.child
            if row.request.kind is RequestKind.CHILD_RUN and call is not None:
                for each in (call, *row.request.siblings):
                    if (child := _existing(store, each.run_id)) is not None:
                        found.append(child)
        cursor = page.next_cursor
        if cursor is None:
            break
    return found
