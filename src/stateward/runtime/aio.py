"""The Runtime's async entry points: each is its synchronous twin, run bridged (see core/bridge.py).

``astart`` is ``start``, ``aapprove`` is ``approve``, and so on — the same code, not a copy: inside
the bridge a model's ``acomplete`` and an ``async def`` tool are awaited on the caller's event loop,
sync models, sync tools and store calls run on threads, and the loop serves other runs meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, Protocol, Self, TypeVar

from stateward.core.bridge import run_bridged

P = ParamSpec("P")
T = TypeVar("T")


class Bridgeable(Protocol):
    def bridged(self) -> Self:
        """This object as async entry points use it (its blocking calls offloaded)."""
        ...


B = TypeVar("B", bound=Bridgeable)


def counterpart(method: Callable[Concatenate[B, P], T]) -> Callable[Concatenate[B, P], Coroutine[Any, Any, T]]:
    """The async counterpart of a synchronous entry point: same arguments, same result, same semantics."""

    async def amethod(self: B, /, *args: P.args, **kwargs: P.kwargs) -> T:
        view = self.bridged()
        return await run_bridged(lambda: method(view, *args, **kwargs))

    amethod.__name__ = amethod.__qualname__ = f"a{method.__name__}"
    amethod.__doc__ = (
        f"Async :meth:`{method.__name__}`: the same code, with async models and tools awaited on this event loop."
    )
    return amethod
