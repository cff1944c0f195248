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

import asyncio
import contextvars
import threading
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any, TypeVar

T = TypeVar("T")

POLL_S = 0.05  # how often a waiting call looks at the token


class PauseToken:
    """Set once a pause was asked while this step's calls were in flight."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def set(self) -> None:
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()


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


def wait_or_cancel(done: threading.Event, timeout_s: float | None, token: PauseToken | None) -> bool | None:
    """Wait for ``done``: True once set, False at ``timeout_s``, None when ``token`` was set first."""
    if token is None:
        return done.wait(timeout_s)
    waited = 0.0
    while timeout_s is None or waited < timeout_s:
        if token.is_set():
            return None
        step = POLL_S if timeout_s is None else min(POLL_S, timeout_s - waited)
        if done.wait(step):
            return True
        waited += step
    return done.is_set()


def abandon_on_pause(fn: Callable[[], T], kind: str, name: str, token: PauseToken) -> T:
    """Run blocking ``fn`` on a daemon thread and wait for it, unless the pause comes first: then the call is
    abandoned (Python cannot kill a thread), its late result discarded, and :class:`CallCancelled` raised."""
    box: dict[str, Any] = {}
    done = threading.Event()

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc
        finally:
            done.set()

    started = time.monotonic()
    context = contextvars.copy_context()  # the caller's context vars (e.g. the model-attempt sink)
    threading.Thread(target=context.run, args=(target,), name=f"stateward-{kind}-{name}", daemon=True).start()
    if wait_or_cancel(done, None, token) is None:
        raise CallCancelled(kind, name, elapsed_s=time.monotonic() - started)
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


async def cancel_on_pause(awaitable: Awaitable[T], kind: str, name: str, token: PauseToken) -> T:
    """Await ``awaitable`` as a task; cancel it (cooperatively) and raise :class:`CallCancelled` if the pause
    comes first."""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(awaitable)
    started = loop.time()
    while True:
        done, _ = await asyncio.wait({task}, timeout=POLL_S)
        if done:
            return task.result()
        if token.is_set():
            task.cancel()
            raise CallCancelled(kind, name, elapsed_s=loop.time() - started)
