"""The PostgreSQL store's connections: the ones it just used, kept at hand, in front of its pool.

A checkout from psycopg_pool (a lock, statistics, the ``check`` callback, a hand-back that inspects
the connection) costs about as much client time as a step's own serialization. The store therefore
keeps the connections it is done with on a stack of its own and lends the most recently used one
first: one thread calling again and again gets its own connection back, warm (its prepared statements
in place), for a list pop and a zero-timeout ``poll``. Nothing is tied to a thread, so a thread that
ends holds nothing and a store shared by more threads than connections starves none of them.

The rules the pool kept still hold:

* **Bounded.** Every connection on the stack was taken from the pool, so there are never more than
  its ``max_size``. A caller that finds the stack empty waits in the pool; one handing a connection
  back while anyone waits there gives it to the pool instead of the stack (:meth:`Connections.give`).
* **Sound before it is lent.** A connection is pinged first when it sat unused longer than
  ``idle_s`` or its socket has something to read although no query is in flight (a server that ends
  a session says so before it hangs up: a terminated backend, a restart). A dead one is handed to
  the pool, which discards and replaces it, and the next one is tried (see store/_pg_check.py).
* **The pool still maintains them.** A connection goes back to the pool once it has been out of it
  for :data:`RETURN_AFTER_S` or sat at the bottom of the stack that long, so the pool's lifetime,
  shrinking and reset apply to it as to any other.
* **Never shared across a fork.** A child process (``os.register_at_fork``) never uses or closes its
  parent's connections (closing one would end the parent's session): on first use in the child the
  store sets them aside untouched and opens a pool of its own.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import pq
from psycopg_pool import ConnectionPool

from stateward.store._pg_check import IdleCheck, has_input

Conn = psycopg.Connection[tuple[Any, ...]]

RETURN_AFTER_S = 30.0  # a connection out of the pool this long goes back to it at its next hand-back

_IDLE = pq.TransactionStatus.IDLE
_OK = pq.ConnStatus.OK
_forks = [0]  # children forked since import (incremented in each child): a store born earlier starts afresh
_inherited: list[object] = []  # a parent's pools and connections, seen in a child: kept, never used or closed
_fork_lock = threading.Lock()  # serialises the child's first uses of stores born in its parent


def _forked() -> None:
    global _fork_lock
    _forks[0] += 1
    _fork_lock = threading.Lock()  # a parent's thread may have held it at the fork


os.register_at_fork(after_in_child=_forked)


class Lent:
    """A connection out of the pool, with what lending it again needs (one cursor kept, its socket's poller)."""

    __slots__ = ("conn", "cursor", "out_since", "parked_at", "poller")

    def __init__(self, conn: Conn, now: float):
        self.conn = conn
        self.cursor = psycopg.RawCursor(conn)  # the store's ``$n`` statements (store/_pg_sql.Positional)
        self.out_since = now
        self.parked_at = now
        self.poller: Any = None
        if hasattr(select, "poll"):
            with contextlib.suppress(psycopg.Error, ValueError, OSError):
                poller = select.poll()
                poller.register(conn.fileno(), select.POLLIN)
                self.poller = poller

    def has_input(self) -> bool:
        """Whether the idle connection's socket is readable (a server's farewell) or gone."""
        if self.poller is None:
            return has_input(self.conn)
        return bool(self.poller.poll(0))


class Connections:
    """The store's lending desk: ``take`` a connection, ``give`` it back when the call is done."""

    def __init__(self, make_pool: Callable[[], ConnectionPool[Conn]], idle: IdleCheck):
        """``make_pool`` opens the pool (again in a forked child); ``idle`` is the pool's check, whose
        idle limit also decides when a connection from the stack is pinged."""
        self._make_pool = make_pool
        self._idle = idle
        self._clock = time.monotonic
        self._born = _forks[0]
        self._lock = threading.Lock()
        self._parked: deque[Lent] = deque()
        self._waiting = 0  # callers of this store blocked in the pool for a connection
        self._closed = False
        self.pool = make_pool()

    def take(self) -> Lent:
        """The most recently used sound connection, else one from the pool (which may wait for one)."""
        if self._born != _forks[0]:
            self._after_fork()
        parked = self._parked
        while parked:
            try:
                lent = parked.pop()
            except IndexError:  # another thread took the last one
                break
            if self._sound(lent):
                return lent
        return self._from_pool()

    def give(self, lent: Lent) -> None:
        """Back on the stack, or to the pool: a connection in a transaction or broken (the pool rolls back
        or replaces it), one out of the pool for RETURN_AFTER_S, or one that a waiting caller needs."""
        if self._born != _forks[0]:
            _inherited.append(lent)  # the parent's, lent before the fork: never handed to the child's pool
            return
        pgconn = lent.conn.pgconn
        now = self._clock()
        if (
            pgconn.transaction_status != _IDLE
            or pgconn.status != _OK
            or now - lent.out_since > RETURN_AFTER_S
            or self._closed
        ):
            self._to_pool(lent)
            return
        lent.parked_at = now
        parked = self._parked
        parked.append(lent)
        if self._waiting:  # read after the append: a caller counted in before it saw the stack gets one
            self._hand_one(parked.popleft)
            return
        try:
            bottom = parked[0]
        except IndexError:  # taken meanwhile
            return
        if now - bottom.parked_at > RETURN_AFTER_S:  # the bottom of the stack, unused for that long: not needed
            self._hand_one(parked.popleft)

    def close(self) -> None:
        """Close the pool with every connection the store held (those lent out close when given back)."""
        self._closed = True
        if self._born == _forks[0]:
            while self._parked:
                with contextlib.suppress(IndexError):
                    self._to_pool(self._parked.pop())
        self.pool.close()

    # -- inside ---------------------------------------------------------------------------------
    def _sound(self, lent: Lent) -> bool:
        """Whether a parked connection may be lent (pinging it if it idled or its socket spoke); a dead
        one goes to the pool, which replaces it."""
        if self._clock() - lent.parked_at <= self._idle.idle_s and not lent.has_input():
            return True
        try:
            ConnectionPool.check_connection(lent.conn)
        except psycopg.Error:
            self._to_pool(lent)
            return False
        return True

    def _from_pool(self) -> Lent:
        with self._lock:
            self._waiting += 1
        try:
            # Counted in, look once more: a connection parked before the count was seen is on the stack now.
            while self._parked:
                try:
                    lent = self._parked.pop()
                except IndexError:
                    break
                if self._sound(lent):
                    return lent
            conn = self.pool.getconn()  # the pool's check (IdleCheck) vets what it lends
        finally:
            with self._lock:
                self._waiting -= 1
        return Lent(conn, self._clock())

    def _hand_one(self, pop: Callable[[], Lent]) -> None:
        try:
            lent = pop()
        except IndexError:  # someone took it meanwhile: they needed it
            return
        self._to_pool(lent)

    def _to_pool(self, lent: Lent) -> None:
        self._idle.used(lent.conn)
        self.pool.putconn(lent.conn)

    def _after_fork(self) -> None:
        """In a forked child: set the parent's pool and connections aside untouched, open a pool here."""
        with _fork_lock:
            if self._born == _forks[0]:
                return
            _inherited.append((self.pool, list(self._parked)))
            self._lock = threading.Lock()  # a parent's thread may have held the old one at the fork
            self._parked = deque()
            self._waiting = 0
            if not self._closed:  # a store closed in the parent stays closed (its pool refuses every call)
                self.pool = self._make_pool()
            self._born = _forks[0]
