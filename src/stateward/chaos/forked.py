"""Forked drivers of one campaign run: one that SIGKILLs itself at a persistence boundary, and two that race.

A forked child inherits the parent's code as it is (a test's monkeypatch included) and nothing it must
import afresh: everything the child runs is imported here, at module level, before any fork. A child
that imports under a module lock some other thread of the parent held at the fork waits forever; that
was the campaign's one early hang.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import Final

from stateward.chaos.faults import SignalAt
from stateward.core.errors import StatewardError
from stateward.core.state import RequestKind, RunState
from stateward.core.status import RunStatus
from stateward.runtime.agent_registry import AgentRegistry
from stateward.runtime.faults import NO_FAULTS, RESUME_BEFORE_LEASE, FaultInjector
from stateward.runtime.leases import LeasePolicy
from stateward.runtime.runtime import Runtime
from stateward.store.base import open_store

CHILD_TIMEOUT_S: Final = 30.0
Finish = Callable[[Runtime, str, float], object]


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
    db: str, agents: AgentRegistry, run_id: str, faults: FaultInjector, lease: LeasePolicy, finish: Finish
) -> int:
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 0
        try:
            child = Runtime(open_store(db), lease=lease, agents=agents, faults=faults, owner=f"camp-{os.getpid()}")
            finish(child, run_id, time.monotonic() + 60)
        except BaseException:
            code = 1
        os._exit(code)
    return pid


def _reap(pid: int, deadline: float) -> int | None:
    """The child's wait status, or None when it had to be killed at ``deadline`` (never counted as a kill)."""
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None
        time.sleep(0.01)


def kill_child(
    db: str, agents: AgentRegistry, run_id: str, point: str, nth: int, lease: LeasePolicy, finish: Finish = finish_with
) -> bool:
    """Fork a driver that SIGKILLs itself at the ``nth`` ``point``; True when it died that way."""
    pid = _fork(db, agents, run_id, SignalAt(point, nth), lease, finish)
    status = _reap(pid, time.monotonic() + CHILD_TIMEOUT_S)
    return status is not None and os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL


def _stopped(pid: int, deadline: float) -> bool | None:
    """Wait until the child froze itself (True), ended without reaching the point (False: reaped), or
    neither by ``deadline`` (None: still running)."""
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG | os.WUNTRACED)
        if done:
            return os.WIFSTOPPED(status)
        time.sleep(0.005)
    return None


def race(db: str, agents: AgentRegistry, run_id: str, point: str, nth: int, lease: LeasePolicy, finish: Finish) -> bool:
    """Two worker processes on one run: the first freezes at the ``nth`` ``point`` holding the lease; once
    its lease has expired a second takes the run over and drives it; then the first thaws and must find
    itself fenced out. True when the first really froze mid-run (the race happened)."""
    first = _fork(db, agents, run_id, SignalAt(point, nth, signum=signal.SIGSTOP), lease, finish)
    froze = _stopped(first, time.monotonic() + CHILD_TIMEOUT_S)
    if froze:
        time.sleep(lease.ttl_s * 1.5)  # its lease runs out while it cannot renew it
        second = _fork(db, agents, run_id, NO_FAULTS, lease, finish)
        _reap(second, time.monotonic() + CHILD_TIMEOUT_S)
        os.kill(first, signal.SIGCONT)
    if froze is not False:  # False: it ended on its own and was reaped
        _reap(first, time.monotonic() + CHILD_TIMEOUT_S)
    return bool(froze)


def resumer(answers: int) -> Finish:
    """A worker's body that resumes the run, then drives it to a stop answering at most ``answers`` waits."""

    def body(runtime: Runtime, run_id: str, deadline: float) -> object:
        runtime.resume(run_id, by=runtime.owner)
        return finish_with(runtime, run_id, deadline, answers)

    return body


def resume_race(db: str, agents: AgentRegistry, run_id: str, lease: LeasePolicy) -> bool:
    """Two worker processes resume one PAUSED run: the first is frozen after its resume was checked and
    before it takes the lease; the second resumes and drives the run into its next wait; then the first
    thaws and must be refused (the run is no longer paused). True when the first really froze there."""
    first = _fork(db, agents, run_id, SignalAt(RESUME_BEFORE_LEASE, signum=signal.SIGSTOP), lease, resumer(answers=0))
    froze = _stopped(first, time.monotonic() + CHILD_TIMEOUT_S)
    if froze:
        second = _fork(db, agents, run_id, NO_FAULTS, lease, resumer(answers=0))
        _reap(second, time.monotonic() + CHILD_TIMEOUT_S)
        os.kill(first, signal.SIGCONT)
    if froze is not False:
        _reap(first, time.monotonic() + CHILD_TIMEOUT_S)
    return bool(froze)
