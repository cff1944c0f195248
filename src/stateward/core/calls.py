"""Long-lived threads that run the blocking calls a caller may stop waiting for.

A sync tool handler runs under its timeout, a sync model call under the step's pause token: when the
deadline passes or a pause is asked first, the caller stops waiting and the call is *abandoned* (Python
cannot kill a thread); it may still finish later, and its result is discarded. Starting a thread for every
call made that safe, and cost two thread starts per step. :class:`CallRunner` keeps the same guarantee with
threads that are reused: a call is handed to an idle thread, and a thread whose call was abandoned is never
handed another one (it ends when its call does; a fresh thread takes its place), so a stuck handler can
never hold up a later call. The number of abandoned calls still running is capped: past the cap a call is
refused with :class:`TooManyAbandonedCalls` instead of starting yet another thread.

Fork-safe: a child process has none of its parent's threads, so a runner seen from a new process id
forgets its idle threads and its counts and starts afresh (``os.register_at_fork`` and a pid check).
"""

from __future__ import annotations

import _thread
import contextlib
import contextvars
import logging
import os
import threading
import weakref
from collections.abc import Callable
from enum import Enum
from typing import TYPE_CHECKING, Any, Protocol

from stateward.core.errors import ErrorCode, RunError

if TYPE_CHECKING:
    import asyncio

log = logging.getLogger("stateward.calls")

__all__ = ["Call", "CallRunner", "Outcome", "TooManyAbandonedCalls", "default_runner", "run_off_loop"]

DEFAULT_MAX_ABANDONED = 64  # abandoned calls still running, per runner, before new calls are refused
DEFAULT_MAX_IDLE = 64  # idle threads kept for the next calls; more end once their call is done
DEFAULT_IDLE_S = 60.0  # an idle thread ends after this long without a call


class TooManyAbandonedCalls(RunError):
    """This process already has ``max_abandoned`` abandoned calls still running (handlers or model calls
    that passed their timeout or gave way to a pause and never returned): no new thread is started."""

    default_code = ErrorCode.TOO_MANY_ABANDONED_CALLS


class Outcome(Enum):
    """What waiting for a call came to."""

    PENDING = "pending"
    DONE = "done"  # it returned or raised: ``Call.value`` / ``Call.error``
    TIMED_OUT = "timed_out"  # the deadline passed first: abandoned
    CANCELLED = "cancelled"  # the pause token was set first: abandoned


class _Token(Protocol):  # what a call waits on besides its deadline (core.interrupt.PauseToken)
    def on_set(self, callback: Callable[[], None]) -> Callable[[], None]: ...
    def is_set(self) -> bool: ...


class Call:
    """One call handed to a runner thread; ``wait`` for it, or ``abandon`` it."""

    __slots__ = ("_done", "_on_done", "_runner", "context", "error", "fn", "outcome", "value")

    def __init__(
        self,
        runner: CallRunner,
        fn: Callable[[], Any],
        context: contextvars.Context,
        on_done: Callable[[], None] | None,
    ) -> None:
        self._runner = runner
        self.fn = fn
        self.context = context
        self._on_done = on_done
        self._done = _thread.allocate_lock()
        self._done.acquire()  # released when the call ends (or a waiter must wake)
        self.outcome = Outcome.PENDING
        self.value: Any = None
        self.error: BaseException | None = None

    def wait(self, timeout_s: float | None = None, token: _Token | None = None) -> Outcome:
        """Block until the call ends, ``timeout_s`` passes or ``token`` is set, whichever comes first; a
        call not done by then is abandoned (TIMED_OUT or CANCELLED)."""
        forget = None if token is None else token.on_set(self._wake)
        try:
            self._done.acquire(True, -1 if timeout_s is None else max(timeout_s, 0.0))
        finally:
            if forget is not None:
                forget()
        if self.outcome is Outcome.DONE:  # set under the runner's lock before the call woke us, and final
            return Outcome.DONE
        why = Outcome.CANCELLED if token is not None and token.is_set() else Outcome.TIMED_OUT
        return why if self._runner._abandon(self, why) else Outcome.DONE

    def abandon(self, why: Outcome = Outcome.CANCELLED) -> bool:
        """Stop waiting for the call (``why``: TIMED_OUT or CANCELLED): True if it had not ended (its thread
        is never reused), False if it had (its ``value`` / ``error`` stand)."""
        return self._runner._abandon(self, why)

    def result(self) -> Any:
        """The value of a call that is DONE, or its exception raised here."""
        if self.error is not None:
            raise self.error
        return self.value

    def _wake(self) -> None:
        # Not contextlib.suppress: it is made and entered for every call, and costs more than the release.
        try:  # noqa: SIM105
            self._done.release()
        except RuntimeError:  # already released: the waiter is awake
            pass

    def _ended(self) -> None:
        self._wake()
        if self._on_done is not None:
            try:
                self._on_done()
            except Exception:  # the runner's thread must survive it: it is back on the idle list already
                log.exception("a call's completion callback failed")


class _Worker:
    __slots__ = ("call", "go")

    def __init__(self, call: Call) -> None:
        self.call: Call | None = call
        self.go = _thread.allocate_lock()
        self.go.acquire()  # released by whoever hands this worker its next call


class CallRunner:
    """Runs blocking calls on reusable daemon threads; a call waited for in vain is abandoned with its thread.

    Bounded: at most ``max_idle`` idle threads (each ends after ``idle_s`` unused) and at most
    ``max_abandoned`` abandoned calls still running (while that many are, :meth:`start` raises
    TooManyAbandonedCalls: the calls this process makes are getting stuck, and nothing new is started).
    The busy threads are the calls in flight: one per caller waiting.
    """

    def __init__(
        self,
        *,
        max_abandoned: int = DEFAULT_MAX_ABANDONED,
        max_idle: int = DEFAULT_MAX_IDLE,
        idle_s: float = DEFAULT_IDLE_S,
        name: str = "stateward-call",
    ) -> None:
        if max_abandoned < 0 or max_idle < 0 or idle_s <= 0:
            raise ValueError("max_abandoned and max_idle must be >= 0 and idle_s > 0")
        self.max_abandoned = max_abandoned
        self.max_idle = max_idle
        self.idle_s = idle_s
        self.name = name
        self._started = 0
        self._reset()
        _RUNNERS.add(self)

    def _reset(self) -> None:
        """Forget every thread: the state of a new runner, or of one inherited by a forked child."""
        self._pid = os.getpid()
        self._mutex = _thread.allocate_lock()
        self._idle: list[_Worker] = []
        self._busy = 0  # threads running a call someone may still wait for
        self._abandoned = 0  # threads running a call nobody waits for any more

    @property
    def abandoned(self) -> int:
        """Abandoned calls still running in this process."""
        return self._abandoned if self._pid == os.getpid() else 0

    @property
    def threads(self) -> int:
        """Threads of this runner alive in this process: idle, busy and abandoned."""
        if self._pid != os.getpid():
            return 0
        with self._mutex:
            return len(self._idle) + self._busy + self._abandoned

    def start(
        self,
        fn: Callable[[], Any],
        *,
        context: contextvars.Context | None = None,
        on_done: Callable[[], None] | None = None,
    ) -> Call:
        """Hand ``fn`` to an idle thread (a new one if none is idle) and return at once. It runs in
        ``context`` (default: an empty one, as in a new thread); ``on_done`` is called from that thread
        when it ends, unless it was abandoned first."""
        if self._pid != os.getpid():  # forked without the at-fork hook (a C-level fork): start afresh
            self._reset()
        call = Call(self, fn, contextvars.Context() if context is None else context, on_done)
        with self._mutex:
            if self._abandoned >= self.max_abandoned:
                raise TooManyAbandonedCalls(
                    f"{self._abandoned} abandoned calls are still running in this process (the cap); "
                    "a handler or model call that never returns holds each of them",
                    details={"abandoned": self._abandoned, "max_abandoned": self.max_abandoned},
                )
            worker = self._idle.pop() if self._idle else None
            self._busy += 1
        if worker is not None:
            worker.call = call
            worker.go.release()
            return call
        self._spawn(_Worker(call))
        return call

    def run(
        self,
        fn: Callable[[], Any],
        timeout_s: float | None = None,
        token: _Token | None = None,
        *,
        context: contextvars.Context | None = None,
    ) -> Call:
        """:meth:`start` then :meth:`Call.wait`: the call, with its ``outcome`` set."""
        call = self.start(fn, context=context)
        call.wait(timeout_s, token)
        return call

    def _spawn(self, worker: _Worker) -> None:
        self._started += 1
        try:
            name = f"{self.name}-{self._started}"
            threading.Thread(target=self._serve, args=(worker,), name=name, daemon=True).start()
        except BaseException:
            with self._mutex:
                self._busy -= 1
            raise

    def _abandon(self, call: Call, why: Outcome) -> bool:
        with self._mutex:
            if call.outcome is not Outcome.PENDING:
                return call.outcome is not Outcome.DONE
            call.outcome = why
            self._busy -= 1
            self._abandoned += 1
            return True

    def _serve(self, worker: _Worker) -> None:
        pid = self._pid
        while True:
            call = worker.call
            assert call is not None
            worker.call = None
            value: Any = None
            error: BaseException | None = None
            try:
                value = call.context.run(call.fn)
            except BaseException as exc:  # handed to the caller, never lost in the thread
                error = exc
            if self._pid != pid:  # the process forked meanwhile: this runner's counts are another's
                return
            with self._mutex:
                if call.outcome is not Outcome.PENDING:  # abandoned: the result is discarded, the thread ends
                    self._abandoned -= 1
                    return
                call.value, call.error, call.outcome = value, error, Outcome.DONE
                self._busy -= 1
                keep = len(self._idle) < self.max_idle
                if keep:
                    self._idle.append(worker)  # before waking the caller: its next call finds this thread
            call._ended()
            if not keep or not self._next(worker):
                return

    def _next(self, worker: _Worker) -> bool:
        """Wait for the next call; False when idle too long (the worker has left the idle list)."""
        if worker.go.acquire(True, self.idle_s):
            return True
        with self._mutex:
            if worker in self._idle:
                self._idle.remove(worker)
                return False
        worker.go.acquire()  # taken off the idle list meanwhile: its call is being handed over
        return True


_RUNNERS: weakref.WeakSet[CallRunner] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for runner in list(_RUNNERS):
        runner._reset()


os.register_at_fork(after_in_child=_after_fork_in_child)

_DEFAULT: list[CallRunner] = []


def default_runner() -> CallRunner:
    """The process's runner for tool handlers and cancellable model calls (made on first use)."""
    if not _DEFAULT:
        _DEFAULT.append(CallRunner())
    return _DEFAULT[0]


async def run_off_loop(
    fn: Callable[[], Any],
    *,
    timeout_s: float | None = None,
    context: contextvars.Context | None = None,
    runner: CallRunner | None = None,
) -> Call:
    """Blocking ``fn`` on a runner thread, awaited without blocking the running loop. At ``timeout_s`` the
    call is abandoned (TIMED_OUT); when the awaiting task is cancelled, too (CANCELLED, and the
    cancellation goes on). The call comes back with its ``outcome`` set."""
    import asyncio  # here, not at the top: a synchronous process never loads it

    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def settle() -> None:
        if not done.done():
            done.set_result(None)

    def on_done() -> None:
        with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits for this answer any more
            loop.call_soon_threadsafe(settle)

    call = (runner or default_runner()).start(fn, context=context, on_done=on_done)
    try:
        if timeout_s is None:
            await done
        else:
            await asyncio.wait_for(done, timeout_s)
    except TimeoutError:
        call.abandon(Outcome.TIMED_OUT)
    except BaseException:
        call.abandon(Outcome.CANCELLED)
        raise
    return call
