"""Forked drivers of one campaign run: one that SIGKILLs itself at a persistence boundary, and two that race.

A forked child inherits the parent's code as it is (a test's monkeypatch included) and nothing it must
import afresh: everything the child runs is imported here, at module level, before any fork. A child
that imports under a module lock some other thread of the parent held at the fork waits forever; that
was the campaign's one early hang.

Every child has a deadline (:class:`ChildWatch`): one still running at it is SIGKILLed and recorded as
hung - a liveness failure the campaign reports with its cell - never waited for. A child can hang on
something it inherited: a lock, or an object that believes a thread of the parent is still alive (a
forked child has only the thread that forked).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from stateward.chaos.faults import SignalAt
from stateward.core.errors import StatewardError
from stateward.core.state import RequestKind, RunState
from stateward.core.status import RunStatus
from stateward.runtime.agent_registry import AgentRegistry
from stateward.runtime.faults import NO_FAULTS, RESUME_BEFORE_LEASE, FaultInjector
from stateward.runtime.leases import LeasePolicy
from stateward.runtime.runtime import Runtime
from stateward.store.backends import open_store

# Generous: a child is hung when it is still running at its deadline, and a loaded CI machine must not
# make a slow driver (the 90-step payment run, driven to its next stop) look hung.
CHILD_TIMEOUT_S: Final = 60.0
Finish = Callable[[Runtime, str, float], object]


@dataclass(frozen=True)
class HungChild:
    """A forked child still running at its deadline: SIGKILLed, and reported (never counted as a kill)."""

    role: str  # what the child was doing: "driver", "racer", "resumer", "worker", "approver"
    pid: int
    waited_s: float


@dataclass
class ChildWatch:
    """The deadline every forked child of one scenario gets, and the children that missed it."""

    timeout_s: float = CHILD_TIMEOUT_S
    hung: list[HungChild] = field(default_factory=list)

    def reap(self, pid: int, role: str, started: float | None = None) -> int | None:
        """The child's wait status, or None when it was still running at its deadline (then SIGKILLed,
        reaped and recorded in ``hung``)."""
        began = time.monotonic() if started is None else started
        deadline = began + self.timeout_s
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return status
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                self.hung.append(HungChild(role, pid, round(time.monotonic() - began, 2)))
                return None
            time.sleep(0.01)

    def stopped(self, pid: int, role: str) -> bool | None:
        """Wait until the child froze itself (True) or ended without reaching its point (False: reaped). A
        child doing neither by the deadline is SIGKILLed and recorded as hung (None)."""
        began = time.monotonic()
        while time.monotonic() < began + self.timeout_s:
            done, status = os.waitpid(pid, os.WNOHANG | os.WUNTRACED)
            if done:
                return os.WIFSTOPPED(status)
            time.sleep(0.005)
        self.reap(pid, role, began)
        return None


def finish_with(runtime: Runtime, run_id: str, deadline: float, answers: int = 6, drive: bool = True) -> RunState:
    """Drive the run to a stop, approving what it asks for (at most ``answers`` times; ``drive=False``:
    answer without driving on)."""
    state = runtime.drive(run_id) if drive else runtime.get(run_id)
    while time.monotonic() < deadline:
        if state.status in (RunStatus.RUNNING, RunStatus.PAUSING):
            time.sleep(0.05)  # a dead driver's lease has yet to expire
            state = runtime.drive(run_id)
            continue
        # Only approvals are answered: a question for a person (a handoff) is left waiting, as it should be.
        open_requests = [
            r for r in runtime.store.list_requests(run_id, open_only=True) if r.request.kind is RequestKind.APPROVAL
        ]
        if state.status is not RunStatus.WAITING_FOR_USER or not open_requests or answers == 0:
            return state
        answers -= 1
        try:
            request_id = open_requests[0].request.request_id
            state = runtime.approve(run_id, request_id, by="campaign", drive=drive).state
            if not drive:
                return state
        except StatewardError:  # a handoff takes a reply, not an approval: the run waits for a person
            return state
    return state


def _fork(
    db: str,
    agents: AgentRegistry,
    run_id: str,
    faults: FaultInjector,
    lease: LeasePolicy,
    finish: Finish,
    budget_s: float = CHILD_TIMEOUT_S,
) -> int:
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 0
        try:
            child = Runtime(open_store(db), lease=lease, agents=agents, faults=faults, owner=f"camp-{os.getpid()}")
            finish(child, run_id, time.monotonic() + budget_s)
        except BaseException:
            code = 1
        os._exit(code)
    return pid


def _budget(watch: ChildWatch) -> float:
    """A child's own time to drive the run: well inside the deadline its parent kills it at."""
    return watch.timeout_s * 0.8


def kill_child(
    db: str,
    agents: AgentRegistry,
    run_id: str,
    point: str,
    nth: int,
    lease: LeasePolicy,
    finish: Finish = finish_with,
    watch: ChildWatch | None = None,
) -> bool:
    """Fork a driver that SIGKILLs itself at the ``nth`` ``point``; True when it died that way (a driver
    still running at its deadline is killed and recorded in ``watch.hung``, never counted as a kill)."""
    watch = watch or ChildWatch()
    pid = _fork(db, agents, run_id, SignalAt(point, nth), lease, finish, _budget(watch))
    status = watch.reap(pid, "driver")
    return status is not None and os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL


def race(
    db: str,
    agents: AgentRegistry,
    run_id: str,
    point: str,
    nth: int,
    lease: LeasePolicy,
    finish: Finish,
    watch: ChildWatch | None = None,
) -> bool:
    """Two worker processes on one run: the first freezes at the ``nth`` ``point`` holding the lease; once
    its lease has expired a second takes the run over and drives it; then the first thaws and must find
    itself fenced out. True when the first really froze mid-run (the race happened)."""
    watch = watch or ChildWatch()
    first = _fork(db, agents, run_id, SignalAt(point, nth, signum=signal.SIGSTOP), lease, finish, _budget(watch))
    froze = watch.stopped(first, "racer")
    if froze:
        time.sleep(lease.ttl_s * 1.5)  # its lease runs out while it cannot renew it
        second = _fork(db, agents, run_id, NO_FAULTS, lease, finish, _budget(watch))
        watch.reap(second, "racer")
        os.kill(first, signal.SIGCONT)
        watch.reap(first, "racer")
    return bool(froze)


def resumer(answers: int) -> Finish:
    """A worker's body that resumes the run, then drives it to a stop answering at most ``answers`` waits."""

    def body(runtime: Runtime, run_id: str, deadline: float) -> object:
        runtime.resume(run_id, by=runtime.owner)
        return finish_with(runtime, run_id, deadline, answers)

    return body


def resume_race(
    db: str, agents: AgentRegistry, run_id: str, lease: LeasePolicy, watch: ChildWatch | None = None
) -> bool:
    """Two worker processes resume one PAUSED run: the first is frozen after its resume was checked and
    before it takes the lease; the second resumes and drives the run into its next wait; then the first
    thaws and must be refused (the run is no longer paused). True when the first really froze there."""
    watch = watch or ChildWatch()
    frozen = SignalAt(RESUME_BEFORE_LEASE, signum=signal.SIGSTOP)
    first = _fork(db, agents, run_id, frozen, lease, resumer(answers=0), _budget(watch))
    froze = watch.stopped(first, "resumer")
    if froze:
        second = _fork(db, agents, run_id, NO_FAULTS, lease, resumer(answers=0), _budget(watch))
        watch.reap(second, "resumer")
        os.kill(first, signal.SIGCONT)
        watch.reap(first, "resumer")
    return bool(froze)
