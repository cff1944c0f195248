"""Running a handler under a timeout: the one place the gateway calls a handler, sync or ``async def``.

A synchronous call runs on a thread of the process's call runner (core/calls.py): a handler that does not
answer in time is abandoned, not killed (Python cannot kill a thread), and may still finish later. That is
exactly the "response lost" case the side-effect journal and ``lookup`` reconcile. The abandoned thread is
never handed another call, so a stuck handler cannot starve later ones, as it would a plain pool; while too
many abandoned calls are still running, a call is refused without running (SERVICE_UNAVAILABLE).

An ``async def`` handler is awaited under ``asyncio.timeout``: natively on the loop under the async
Runtime (see :mod:`stateward.core.bridge`), on a loop in its own thread under the synchronous one. At
its deadline it is cancelled — which, like abandoning a thread, leaves the outcome unknown: the
executor treats both alike (TIMEOUT; a side effect is reconciled, never blindly retried).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Coroutine
from typing import Any, NamedTuple

from stateward.core.bridge import in_bridge, resolve
from stateward.core.calls import Call, Outcome, TooManyAbandonedCalls, default_runner, run_off_loop
from stateward.core.interrupt import CallCancelled, PauseToken, cancel_on_pause

from .errors import ServiceUnavailable


class Finished(NamedTuple):
    """How a handler call ended: its value or error, or no answer in time. A tuple: made for every call."""

    value: Any = None
    error: BaseException | None = None
    timed_out: bool = False


def run_with_timeout(
    fn: Callable[[], Any], timeout_s: float, *, name: str = "tool", token: PauseToken | None = None
) -> Finished:
    """``fn()`` on a runner thread, waited for at most ``timeout_s``; with a ``token``, given up (abandoned,
    its late result discarded) with :class:`CallCancelled` as soon as a pause is asked."""
    started = time.monotonic()
    try:
        call = default_runner().run(fn, timeout_s, token)
    except TooManyAbandonedCalls as exc:
        return _refused(exc)
    return _finished(call, name, started)


def _finished(call: Call, name: str, started: float) -> Finished:
    if call.outcome is Outcome.CANCELLED:
        raise CallCancelled("tool", name, elapsed_s=time.monotonic() - started)
    if call.outcome is Outcome.TIMED_OUT:
        return Finished(timed_out=True)
    return Finished(value=call.value, error=call.error)


def _refused(exc: TooManyAbandonedCalls) -> Finished:
    """Not run at all: a refusal without action, which the gateway may retry (and journals as FAILED)."""
    return Finished(error=ServiceUnavailable(str(exc), details=exc.details))


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
    is_async: bool | None = None,
) -> Finished:
    """Call ``handler(**kwargs)`` within ``timeout_s``, wherever the calling code runs. With a ``token`` (a
    read-only call: one with a side effect is never handed one) a pause asked meanwhile cancels the call:
    :class:`CallCancelled` is raised and whatever the handler still returns is discarded. ``is_async``:
    whether the handler is an ``async def``, when the caller knows (else it is asked here)."""
    if is_async_handler(handler) if is_async is None else is_async:
        if in_bridge():
            bounded = _bounded(handler(**kwargs), timeout_s)
            return resolve(bounded if token is None else cancel_on_pause(bounded, "tool", name, token))
        import asyncio  # here, not at the top: a process with only sync handlers never loads it

        return _first(
            run_with_timeout(
                lambda: asyncio.run(_bounded(handler(**kwargs), timeout_s)), timeout_s, name=name, token=token
            )
        )
    if in_bridge():
        waited = _off_loop(lambda: handler(**kwargs), timeout_s, name=name)
        return resolve(waited if token is None else cancel_on_pause(waited, "tool", name, token))
    return run_with_timeout(lambda: handler(**kwargs), timeout_s, name=name, token=token)


async def _bounded(call: Coroutine[Any, Any, Any], timeout_s: float) -> Finished:
    """Await ``call`` for at most ``timeout_s``; a TimeoutError the handler raises itself is its error."""
    import asyncio

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


async def _off_loop(fn: Callable[[], Any], timeout_s: float, *, name: str) -> Finished:
    """A blocking handler under the async Runtime: on a runner thread (abandoned at the deadline, as in
    ``run_with_timeout``, or when the awaiting task is cancelled), awaited without blocking the loop."""
    started = time.monotonic()
    try:
        call = await run_off_loop(fn, timeout_s=timeout_s)
    except TooManyAbandonedCalls as exc:
        return _refused(exc)
    return _finished(call, name, started)
