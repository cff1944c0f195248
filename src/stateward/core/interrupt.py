"""A pause asked while a call is in flight: the token a step's calls watch, and how they give way.

Source 11.2: pausing is not killing the process. PAUSING stops new work, lets short calls end safely,
*cancels the long calls that can be cancelled*, saves the checkpoint and releases the lease. The Runtime
hands each step a :class:`PauseToken` (through :data:`pause_token`) and sets it when a pause is asked
meanwhile. A call that can be cancelled - a model call, a read-only tool call - watches it and gives way
by raising :class:`CallCancelled`; a side-effecting call never does (it is waited for up to its timeout,
and an unknown outcome is reconciled, as everywhere else).

``CallCancelled`` is a ``BaseException`` on purpose (like ``asyncio.CancelledError``): code that catches
``Exception`` to turn a failure into a verdict (a model check's UNKNOWN, a failed attempt) must not
swallow it. It never leaves the Runtime: the driver records the cancelled call and pauses the run.
"""

from __future__ import annotations

import _thread
import contextlib
import contextvars
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any, TypeVar

from stateward.core.calls import CallRunner, Outcome, default_runner

T = TypeVar("T")


class PauseToken:
    """Set once a pause was asked while this step's calls were in flight; the calls waiting on it are woken
    at once through :meth:`on_set` (nothing polls). Made for every step, so it is a flag and a lock."""

    __slots__ = ("_callbacks", "_lock", "_set")

    def __init__(self) -> None:
        self._set = False
        self._lock = _thread.allocate_lock()
        self._callbacks: list[Callable[[], None]] = []

    def set(self) -> None:
        """Ask the step's calls to give way: every callback registered with :meth:`on_set` runs, once."""
        with self._lock:
            if self._set:
                return
            self._set = True
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    def is_set(self) -> bool:
        """Whether a pause was asked while this step was in flight."""
        return self._set

    def on_set(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` (from the setting thread) when the token is set, at once if it already is;
        returns what forgets it."""
        with self._lock:
            if not self._set:
                self._callbacks.append(callback)
                return lambda: self._forget(callback)
        callback()
        return _nothing

    def _forget(self, callback: Callable[[], None]) -> None:
        with self._lock:
            if callback in self._callbacks:
                self._callbacks.remove(callback)


def _nothing() -> None:
    return None


class CallCancelled(BaseException):  # a control signal, like asyncio.CancelledError
    """An in-flight call gave way to a pause: ``kind`` is "model" or "tool", ``name`` the model or tool.
    Its result, if it still comes, is discarded."""

    def __init__(self, kind: str, name: str, *, elapsed_s: float = 0.0) -> None:
        super().__init__(f"{kind} call {name!r} cancelled: pause requested")
        self.kind = kind
        self.name = name
        self.elapsed_s = elapsed_s
        self.model_usage: tuple[Any, ...] = ()  # model calls of the same step that did answer (the Runtime's)


# Set by the Runtime around one step; None outside a step (nothing to give way to).
pause_token: ContextVar[PauseToken | None] = ContextVar("stateward_pause_token", default=None)


def abandon_on_pause(
    fn: Callable[[], T], kind: str, name: str, token: PauseToken, runner: CallRunner | None = None
) -> T:
    """Run blocking ``fn`` on a runner thread (core/calls.py) with the caller's context vars and wait for it,
    unless the pause comes first: then the call is abandoned (Python cannot kill a thread), its late result
    discarded, and :class:`CallCancelled` raised."""
    started = time.monotonic()
    call = (runner or default_runner()).run(fn, None, token, context=contextvars.copy_context())
    if call.outcome is Outcome.CANCELLED:
        raise CallCancelled(kind, name, elapsed_s=time.monotonic() - started)
    return call.result()  # type: ignore[no-any-return]


async def cancel_on_pause(awaitable: Awaitable[T], kind: str, name: str, token: PauseToken) -> T:
    """Await ``awaitable`` in the calling task; cancel it (cooperatively) and raise :class:`CallCancelled` if
    the pause comes first. The token's setter wakes the loop (``call_soon_threadsafe``): nothing polls. No
    task of its own: the calling task is cancelled while it awaits the call, and un-cancelled after."""
    import asyncio  # here, not at the top: a synchronous process never loads it

    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None, "cancel_on_pause runs in a task"
    started = loop.time()
    awaiting = True
    paused = False

    def give_way() -> None:
        nonlocal paused
        if awaiting and not paused:  # on the loop's thread: the task is suspended in the await below
            paused = True
            task.cancel()

    def on_pause() -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nothing is left to cancel
            loop.call_soon_threadsafe(give_way)

    forget = token.on_set(on_pause)
    try:
        value = await awaitable
    except asyncio.CancelledError:
        if paused and task.uncancel() == 0:  # our cancel alone: the task goes on, the call gave way
            raise CallCancelled(kind, name, elapsed_s=loop.time() - started) from None
        raise
    finally:
        awaiting = False
        forget()
    if paused:  # the call swallowed the cancel and answered: its answer stands, the task is not cancelled
        task.uncancel()
    return value
