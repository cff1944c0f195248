"""One move between a run and its family, for the Runtime's drive: start the child a parent waits on, or
hand a child's outcome back to its parent, and name the run to drive next.

The writes themselves are runtime/children.py's (each idempotent); this module only chooses which one the
run's state calls for, with the fault points the crash harness stops at.
"""

from __future__ import annotations

from datetime import datetime

from stateward.core.state import RunState
from stateward.core.status import RunStatus
from stateward.runtime import children
from stateward.runtime.children import AgentMaker
from stateward.runtime.driver import DRIVABLE
from stateward.runtime.faults import CHILD_BOUNDARIES, FaultInjector
from stateward.store.base import Store


def hop(store: Store, faults: FaultInjector, make: AgentMaker, state: RunState, now: datetime) -> str | None:
    """The move ``state`` calls for (start the child it waits on or hand back an ended one's outcome; or
    hand its own outcome to its parent) and the run to drive next, if any."""
    call = children.waited_child(state)
    if call is not None:
        faults.point(CHILD_BOUNDARIES[0])
        child = children.ensure_child(store, make, state, now)
        if child is None:
            return state.run_id if children.waited_child(store.load_run(state.run_id)) is None else None
        if child.status in DRIVABLE:
            return child.run_id
        if child.status.is_terminal:
            return hand_back(store, faults, child, now)
        return None
    if state.parent is not None and state.status.is_terminal:
        return hand_back(store, faults, state, now)
    if state.parent is not None and state.status is RunStatus.WAITING_FOR_USER:
        return runnable_sibling(store, make, state, now)
    return None


def runnable_sibling(store: Store, make: AgentMaker, child: RunState, now: datetime) -> str | None:
    """A parallel call's next child to drive while ``child`` waits (None: none is runnable here)."""
    assert child.parent is not None
    if not children.siblings_open(store, child):
        return None
    parent = store.load_run(child.parent.run_id)
    following = children.ensure_child(store, make, parent, now)
    return following.run_id if following is not None and following.status in DRIVABLE else None


def hand_back(store: Store, faults: FaultInjector, child: RunState, now: datetime) -> str | None:
    """Deliver an ended child's outcome to its parent; the parent, if that made it runnable."""
    faults.point(CHILD_BOUNDARIES[1])
    answer = children.final_answer(store, child)
    if child.parent is None:
        return None
    if children.deliver(store, child, now, answer) or children.siblings_open(store, child):
        return child.parent.run_id  # resumed; or (a parallel call) its next child to drive is its parent's
    return None
