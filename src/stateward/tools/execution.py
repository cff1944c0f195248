"""Running a handler under a timeout: the one place the gateway calls a handler, sync or ``async def``.

Each synchronous call gets its own daemon thread: a handler that does not answer in time is abandoned,
not killed (Python cannot kill a thread), and may still finish later. That is exactly the "response
lost" case the side-effect journal and ``lookup`` reconcile; a shared pool would instead be starved by it.

An ``async def`` handler is awaited under ``asyncio.timeout``: natively on the loop under the async
Runtime (see :mod:`stateward.core.bridge`), on a loop in its own thread under the synchronous one. At
its deadline it is cancelled — which, like abandoning a thread, leaves the outcome unknown: the
executor treats both alike (TIMEOUT; a side effect is reconciled, never blindly retried).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from stateward.core.bridge import in_bridge, resolve
from stateward.core.interrupt import CallCancelled, PauseToken, cancel_on_pause, wait_or_cancel


@dataclass(frozen=True)
class Finished:
    value: Any = None
    error: BaseException | None = None
    timed_out: bool = False


def run_with_timeout(
    fn: Callable[[], Any], timeout_s: float, *, name: str = "tool", token: PauseToken | None = None
) -> Finished:
    """``fn()`` on its own daemon thread, waited for at most ``timeout_s``; with a ``token``, given up (abandoned,
    its late result discarded) with :class:`CallCancelled` as soon as a pause is asked."""
    box: dict[str, Any] = {}
    done = threading.Event()

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # reported to the caller, never lost in the thread
            box["error"] = exc
        finally:
            done.set()

    started = time.monotonic()
    threading.Thread(target=target, name=f"stateward-tool-{name}", daemon=True).start()
    answered = wait_or_cancel(done, timeout_s, token, lambda: bool(box))
    if answered is None:
        raise CallCancelled("tool", name, elapsed_s=time.monotonic() - started)
    if not answered:
        return Finished(timed_out=True)
    return Finished(value=box.get("value"), error=box.get("error"))


def is_async_handler(handler: Callable[..., Any]) -> bool:
    """An ``async def`` function (or a callable object whose ``__call__`` is one)."""
    call = type(handler).__call__ if not inspect.isfunction(handler) else None
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(call)


def call_handler(
    handler: Callable[..., Any],
    kwargs: dict[str, Any],
    timeout_s: float,
    *,
    name: str,
    token: PauseToken | None = None,
) -> Finished:
    """Call ``handler(**kwargs)`` within ``timeout_s``, wherever the calling code runs. With a ``token`` (a
    read-only call: one with a side effect is never handed one) a pause asked meanwhile cancels the call:
    :class:`CallCancelled` is raised and whatever the handler still returns is discarded."""
    if is_async_handler(handler):
        if in_bridge():
            bounded = _bounded(handler(**kwargs), timeout_s)
            return resolve(bounded if token is None else cancel_on_pause(bounded, "tool", name, token))
        return _first(
            run_with_timeout(
                lambda: asyncio.run(_bounded(handler(**kwargs), timeout_s)), timeout_s, name=name, token=token
            )
        )
    if in_bridge():
        waited = _in_thread(lambda: handler(**kwargs), timeout_s, name=name)
        return resolve(waited if token is None else cancel_on_pause(waited, "tool", name, token))
    return run_with_timeout(lambda: handler(**kwargs), timeout_s, name=name, token=token)


async def _bounded(call: Coroutine[Any, Any, Any], timeout_s: float) -> Finished:
    """Await ``call`` for at most ``timeout_s``; a TimeoutError the handler raises itself is its error."""
    try:
        async with asyncio.timeout(timeout_s) as deadline:
            value = await call
    except TimeoutError as exc:
        return Finished(timed_out=True) if deadline.expired() else Finished(error=exc)
    except Exception as exc:  # reported to the caller like a sync handler's exception
        return Finished(error=exc)
    return Finished(value=value)


def _first(outer: Finished) -> Finished:
    """A loop run in a thread returns its own Finished: unwrap it (the outer one only says it timed out)."""
    return outer.value if isinstance(outer.value, Finished) else outer


async def _in_thread(fn: Callable[[], Any], timeout_s: float, *, name: str) -> Finished:
    """A blocking handler under the async Runtime: its own daemon thread (abandoned at the deadline, as
    in ``run_with_timeout``), awaited without blocking the loop."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Finished] = loop.create_future()

    def settle(fin: Finished) -> None:
        if not done.done():
            done.set_result(fin)

    def target() -> None:
        try:
            fin = Finished(value=fn())
        except BaseException as exc:  # reported to the caller, never lost in the thread
            fin = Finished(error=exc)
        with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits for this answer any more
            loop.call_soon_threadsafe(settle, fin)

    threading.Thread(target=target, name=f"stateward-tool-{name}", daemon=True).start()
    try:
        return await asyncio.wait_for(asyncio.shield(done), timeout_s)
    except TimeoutError:
        return Finished(timed_out=True)
