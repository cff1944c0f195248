"""A store as the async Runtime uses it: each call made inside a bridge runs on a thread pool.

sqlite3 and psycopg block; called from the event loop's thread they would stall every run the loop
is driving. Wrapped here, the same store methods (the same transactions, the same fencing) run on
``executor`` while the loop goes on; outside a bridge (a lease heartbeat's thread, say) they are
called directly, exactly as before. The stores already serialize their own connections.

A store whose every call is brief (``brief_calls``: SQLite without an fsync per commit) is not
wrapped: its calls take microseconds on one connection, and a hop to a thread and back would cost
more CPU than the call itself (that hop was most of the async worker's cost per run).
"""

from __future__ import annotations

import functools
from concurrent.futures import Executor
from typing import Any, cast

from stateward.core.bridge import blocking, in_bridge
from stateward.store.base import Store


class OffloadedStore:
    """Forwards every attribute to ``store``; a method called inside a bridge runs on ``executor``."""

    def __init__(self, store: Store, executor: Executor):
        self._store = store
        self._executor = executor

    @property
    def inner(self) -> Store:
        """The wrapped store."""
        return self._store

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if not callable(attr):
            return attr
        executor = self._executor

        @functools.wraps(attr)
        def call(*args: Any, **kwargs: Any) -> Any:
            if not in_bridge():
                return attr(*args, **kwargs)
            return blocking(functools.partial(attr, *args, **kwargs), executor)

        self.__dict__[name] = call  # made once per method: later calls skip __getattr__
        return call


def offloaded(store: Store, executor: Executor) -> Store:
    """``store`` whose calls from bridged code run on ``executor`` (a Store in every other respect);
    a store whose calls are all brief, as it is."""
    if getattr(store, "brief_calls", False):
        return store
    return cast(Store, OffloadedStore(store, executor))
