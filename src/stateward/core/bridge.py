"""Where the runtime's one, synchronous implementation meets an event loop.

The Runtime's semantics (budget check -> decide -> handle -> act -> persist; the gateway's journal,
retries, breaker and reconciliation) are written once, as plain synchronous code. The async entry
points do not copy that code into ``async def`` twins that could drift: :func:`run_bridged` runs the
same code inside a greenlet on the event loop's thread, and each I/O boundary (a model call, a tool
handler, a store call, a backoff sleep) goes through :func:`resolve`, which suspends the greenlet and
awaits the coroutine natively on the loop. Many runs thus interleave in one loop at their awaits,
exactly as coroutines would. Outside a bridge ``resolve`` runs the coroutine to completion on a loop
of its own, so an async model or tool also works under the synchronous Runtime.

This is the technique SQLAlchemy's asyncio layer uses (``greenlet_spawn`` / ``await_only``). No I/O
happens here; the module only decides where an awaitable is awaited. ``asyncio`` and ``greenlet`` are
imported by the first bridge or awaitable, not with this module: a synchronous worker never loads them.
"""

from __future__ import annotations

import contextvars
import functools
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from stateward.core.calls import default_runner

if TYPE_CHECKING:
    from concurrent.futures import Executor

    import greenlet

P = ParamSpec("P")
T = TypeVar("T")

__all__ = ["blocking", "in_bridge", "resolve", "run_bridged", "run_coroutine", "sleep"]


@functools.cache
def _bridged() -> type[greenlet.greenlet]:
    import greenlet

    class _Bridged(greenlet.greenlet):
        """A greenlet running synchronous runtime code on behalf of the coroutine that is its parent."""

    return _Bridged


def in_bridge() -> bool:
    """Whether the calling code runs inside :func:`run_bridged` (so ``resolve`` awaits on the loop)."""
    if "greenlet" not in sys.modules:  # run_bridged imports it: no bridge has run in this process
        return False
    return isinstance(sys.modules["greenlet"].getcurrent(), _bridged())


async def run_bridged(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Run synchronous ``fn`` on this loop's thread; every ``resolve`` inside it is awaited here."""
    import greenlet

    child = _bridged()(fn, greenlet.getcurrent())
    child.gr_context = contextvars.copy_context()  # the task's context vars, e.g. a telemetry span
    result: Any = child.switch(*args, **kwargs)
    while not child.dead:
        try:
            value = await result
        except BaseException:  # handed to the code that awaited it, which may catch it
            result = child.throw(*sys.exc_info())
        else:
            result = child.switch(value)
    return result  # type: ignore[no-any-return]


def resolve(awaitable: Awaitable[T]) -> T:
    """The awaitable's result: awaited on the loop inside a bridge, else on a loop of its own."""
    if in_bridge():
        import asyncio

        parent = sys.modules["greenlet"].getcurrent().parent
        assert parent is not None
        if asyncio.iscoroutine(awaitable):
            # Awaited as it is, the coroutine would run in the context of the task driving the bridge,
            # which does not see what the bridged code set meanwhile (a model-attempt sink, a span):
            # run it as a task of this context instead. Cancelling the awaiting task cancels it too.
            awaitable = asyncio.get_running_loop().create_task(awaitable, context=contextvars.copy_context())
        return parent.switch(awaitable)  # type: ignore[no-any-return]
    return run_coroutine(_awaited(awaitable))


async def _awaited(awaitable: Awaitable[T]) -> T:
    return await awaitable


def run_coroutine(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion from synchronous code outside any bridge.

    On a thread without a running loop that is ``asyncio.run``; a thread that already runs one (sync
    API called from async code) cannot block on it, so the coroutine runs on a call runner's thread.
    """
    import asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    context = contextvars.copy_context()
    return default_runner().run(lambda: asyncio.run(coro), context=context).result()  # type: ignore[no-any-return]


def blocking(fn: Callable[[], T], executor: Executor | None = None) -> T:
    """Call blocking ``fn``: directly outside a bridge; inside one, on ``executor`` (the loop's default
    when None) with the caller's context vars, so the loop keeps serving other runs meanwhile."""
    if not in_bridge():
        return fn()
    import asyncio

    context = contextvars.copy_context()
    loop = asyncio.get_running_loop()
    return resolve(loop.run_in_executor(executor, context.run, fn))


def sleep(seconds: float) -> None:
    """``time.sleep`` outside a bridge; inside one, ``asyncio.sleep``: a backoff never stalls the loop."""
    if in_bridge():
        import asyncio

        resolve(asyncio.sleep(seconds))
    else:
        time.sleep(seconds)
