"""When the PostgreSQL store's pool tests a connection before lending it: not on every checkout.

psycopg_pool's stock check pings on every checkout, one round trip more on every call (a step's
single statement would pay two). Instead a connection is pinged only when (a) it sat idle longer
than ``idle_s`` (a firewall may have dropped the quiet socket), or (b) its socket has something to
read although no query is in flight: a server that closed the session (a restart, a terminated
backend) says so before it hangs up, and a zero-timeout ``select`` sees it without a round trip.
A dead connection is replaced before anyone sees it. The store's own stack of connections in front of
the pool (store/_pg_conns.py) applies the same rule to what it lends.

What gets through: a connection that dies silently within ``idle_s`` of its last use (the network
dropped without a word). It fails the call it is lent to with STORE_UNAVAILABLE, a named error
worth retrying (a worker's drive stops there, and the run is claimed again once its lease is
released or expires); nothing is half-written (a step is one statement, or one transaction that
either committed or did not); and the pool discards the broken connection, so the retry gets a
sound one.
"""

from __future__ import annotations

import select
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

DEFAULT_IDLE_S = 5.0


class IdleCheck:
    """A pool ``check`` callback that pings only connections idle longer than ``idle_s`` seconds."""

    def __init__(self, idle_s: float = DEFAULT_IDLE_S, clock: Callable[[], float] = time.monotonic):
        self.idle_s = idle_s
        self._clock = clock
        self._used: weakref.WeakKeyDictionary[psycopg.Connection[Any], float] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def used(self, conn: psycopg.Connection[Any]) -> None:
        """Note that ``conn`` just served a call (the store calls this as it hands the connection back)."""
        with self._lock:
            self._used[conn] = self._clock()

    def __call__(self, conn: psycopg.Connection[Any]) -> None:
        """Raise (psycopg's error) if an idle connection is dead; the pool then lends another."""
        with self._lock:
            last = self._used.get(conn)
        if last is None or self._clock() - last > self.idle_s or has_input(conn):
            ConnectionPool.check_connection(conn)


def has_input(conn: psycopg.Connection[Any]) -> bool:
    """Whether an idle connection's socket is readable (a server's farewell, EOF) or already closed."""
    try:
        fd = conn.fileno()
    except psycopg.Error:
        return True
    if not hasattr(select, "poll"):  # Windows: select() copes with its socket handles
        return bool(select.select([fd], [], [], 0)[0])
    poller = select.poll()  # not select(): a busy process may hold descriptors past FD_SETSIZE
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))
