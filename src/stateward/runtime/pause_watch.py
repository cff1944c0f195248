"""Noticing a pause (or cancel) asked while a step's calls are in flight (source 11.2: PAUSING cancels the long
calls that can be cancelled).

Between steps the driver reads the run's control request itself. During a step it cannot: it is waiting on
a model or a tool. A :class:`PauseWatch` (one per drive) reads the control request once a step has been in
flight for ``poll_s``, and every ``poll_s`` after, and sets the step's :class:`PauseToken` when one is there;
the calls watching the token give way (core/interrupt.py). A short step never reads anything.

Who keeps the time costs nothing per step:

- under the synchronous Runtime, one watcher thread for the whole process (:class:`_Watcher`) holds the
  armed steps in a heap by due time; arming a step pushes an entry, disarming marks it done. It is started
  on first use and again in a forked child (which has none of its parent's threads): a pid check and
  ``os.register_at_fork``, so a child never waits on a watcher that is not there. Its reads are one at a
  time: a store that answers slowly delays the other runs' reads too (between steps each driver reads
  its run's request itself, so nothing is lost, only noticed later);
- under the async Runtime (bridged code on an event loop), a timer on that loop (``call_later``): no
  thread of its own; its store read runs on the loop when the store's calls are brief (as the bridged
  Runtime's are), else on the loop's executor.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import threading
import time
from typing import TYPE_CHECKING

from stateward.core.bridge import in_bridge
from stateward.core.errors import StatewardError
from stateward.core.interrupt import PauseToken
from stateward.store.base import Store

if TYPE_CHECKING:
    import asyncio

log = logging.getLogger("stateward.pause_watch")

DEFAULT_POLL_S = 0.2


class PauseWatch:
    """Watches one run's control request while a step is armed; stopped with the drive."""

    def __init__(self, store: Store, run_id: str, poll_s: float = DEFAULT_POLL_S) -> None:
        self._store = store
        self._run_id = run_id
        self.poll_s = poll_s
        self._entry: _Armed | None = None  # the step in flight, under the synchronous Runtime
        self._token: PauseToken | None = None  # the step in flight, on an event loop
        self._timer: asyncio.TimerHandle | None = None
        self._reading: asyncio.Future[bool] | None = None

    def arm(self) -> PauseToken:
        """A fresh token for the step about to run; watched until :meth:`disarm`."""
        token = PauseToken()
        if in_bridge():
            import asyncio  # loaded: a bridge runs on an event loop

            loop = asyncio.get_running_loop()
            self._token = token
            self._timer = loop.call_later(self.poll_s, self._due_on_loop, loop, token)
        else:
            self._entry = _watcher().watch(self, token)
        return token

    def disarm(self) -> None:
        """The step ended: its token is no longer watched (a read already under way finds it gone)."""
        entry, self._entry = self._entry, None
        if entry is not None:
            entry.done = True
        self._token = None
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()

    def stop(self) -> None:
        """The drive ended: nothing is watched any more (there is no thread of its own to join)."""
        self.disarm()
        reading, self._reading = self._reading, None
        if reading is not None:
            reading.cancel()

    def asked(self) -> bool:
        """Whether a pause or cancel request is stored for the run (False when the store cannot say: the
        driver reads it again between steps). Never raises: the watcher serves every run of the process."""
        try:
            return self._store.get_control(self._run_id) is not None
        except StatewardError as exc:
            log.warning("run %s: cannot read its control request: %s", self._run_id, exc)
        except Exception as exc:  # e.g. a store closed as its drive ended: the step is over anyway
            log.debug("run %s: control request unreadable: %r", self._run_id, exc)
        return False

    # -- on the event loop (the async Runtime) ---------------------------------------------------
    def _due_on_loop(self, loop: asyncio.AbstractEventLoop, token: PauseToken) -> None:
        if self._token is not token or token.is_set():
            return
        self._timer = None  # the step is still in flight: read the request, then look again
        if getattr(self._store, "brief_calls", False):  # a read of microseconds: on the loop, as bridged calls are
            self._read(loop, token, self.asked())
            return
        reading = self._reading = loop.run_in_executor(None, self.asked)
        reading.add_done_callback(lambda done: self._read(loop, token, _answer(done)))

    def _read(self, loop: asyncio.AbstractEventLoop, token: PauseToken, asked: bool) -> None:
        self._reading = None
        if self._token is not token:  # that step ended meanwhile
            return
        if asked:
            token.set()
        elif not token.is_set():
            self._timer = loop.call_later(self.poll_s, self._due_on_loop, loop, token)


def _answer(done: asyncio.Future[bool]) -> bool:
    return not done.cancelled() and done.exception() is None and done.result()


class _Armed:
    """One step in flight, watched by the process's watcher thread."""

    __slots__ = ("done", "due", "token", "watch")

    def __init__(self, watch: PauseWatch, token: PauseToken, due: float) -> None:
        self.watch = watch
        self.token = token
        self.due = due
        self.done = False


class _Watcher:
    """The process's one watcher thread: reads the control request of each step in flight once it is due."""

    def __init__(self) -> None:
        self._pid = os.getpid()
        self._cond = threading.Condition(threading.Lock())
        self._heap: list[tuple[float, int, _Armed]] = []
        self._order = itertools.count()
        self._idle = False  # waiting with nothing due: a new entry must wake it
        self._thread = threading.Thread(target=self._serve, name="stateward-pause-watch", daemon=True)
        self._thread.start()

    def watch(self, watch: PauseWatch, token: PauseToken) -> _Armed:
        entry = _Armed(watch, token, time.monotonic() + watch.poll_s)
        with self._cond:
            earliest = self._heap[0][0] if self._heap else None
            heapq.heappush(self._heap, (entry.due, next(self._order), entry))
            if self._idle or (earliest is not None and entry.due < earliest):
                self._cond.notify()
        return entry

    def _serve(self) -> None:
        while True:
            entry = self._next()
            if entry.done or entry.token.is_set():
                continue
            if entry.watch.asked():
                entry.token.set()
                continue
            entry.due = time.monotonic() + entry.watch.poll_s
            with self._cond:
                heapq.heappush(self._heap, (entry.due, next(self._order), entry))

    def _next(self) -> _Armed:
        """The next entry due; ended steps are dropped on the way."""
        with self._cond:
            while True:
                heap = self._heap
                while heap and heap[0][2].done:
                    heapq.heappop(heap)
                if not heap:
                    self._idle = True
                    self._cond.wait()
                    self._idle = False
                    continue
                wait = heap[0][0] - time.monotonic()
                if wait <= 0:
                    return heapq.heappop(heap)[2]
                self._cond.wait(wait)


_WATCHERS: list[_Watcher] = []
_LOCK = threading.Lock()


def _watcher() -> _Watcher:
    """The process's watcher, started on first use and again in a forked child."""
    if _WATCHERS and _WATCHERS[0]._pid == os.getpid():
        return _WATCHERS[0]
    with _LOCK:
        if not _WATCHERS or _WATCHERS[0]._pid != os.getpid():
            _WATCHERS[:] = [_Watcher()]
        return _WATCHERS[0]


def _after_fork_in_child() -> None:
    global _LOCK
    _WATCHERS.clear()  # the parent's watcher thread does not exist here
    _LOCK = threading.Lock()  # it may have been held by another thread at the fork


os.register_at_fork(after_in_child=_after_fork_in_child)
