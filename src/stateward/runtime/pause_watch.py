"""Noticing a pause (or cancel) asked while a step's calls are in flight (source 11.2: PAUSING cancels the long
calls that can be cancelled).

Between steps the driver reads the run's control request itself. During a step it cannot: it is waiting on
a model or a tool. :class:`PauseWatch` is one daemon thread per driver (not per run: a worker driving a
hundred runs keeps one thread) that, every ``poll_s``, reads the control request of each step that has been
in flight for at least ``poll_s`` and sets that step's :class:`PauseToken` when one is there; the calls
watching the token give way at once (core/interrupt.py). A short step is never read for; with no step in
flight the thread sleeps until one is armed.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from stateward.core.errors import StatewardError
from stateward.core.interrupt import PauseToken
from stateward.store.base import Store

log = logging.getLogger("stateward.pause_watch")

DEFAULT_POLL_S = 0.5


@dataclass(frozen=True)
class _Armed:
    run_id: str
    token: PauseToken = field(default_factory=PauseToken)
    since: float = field(default_factory=time.monotonic)


class PauseWatch:
    """Watches the control requests of the steps in flight; its thread starts with the first armed step."""

    def __init__(self, store: Store, poll_s: float = DEFAULT_POLL_S) -> None:
        self._store = store
        self.poll_s = poll_s
        self._armed: dict[int, _Armed] = {}
        self._lock = threading.Lock()
        self._busy = threading.Event()  # set while any step is armed (or to wake the thread to stop)
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def arm(self, run_id: str) -> PauseToken:
        """A fresh token for the step of ``run_id`` about to run; watched until :meth:`disarm`."""
        armed = _Armed(run_id)
        with self._lock:
            self._armed[id(armed.token)] = armed
            self._busy.set()
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="stateward-pause-watch", daemon=True)
                self._thread.start()
        return armed.token

    def disarm(self, token: PauseToken) -> None:
        with self._lock:
            self._armed.pop(id(token), None)
            if not self._armed:
                self._busy.clear()

    def stop(self) -> None:
        """End the thread (the Runtime is closing); a later :meth:`arm` starts a new one."""
        with self._lock:
            thread, self._thread = self._thread, None
            self._stopped.set()
            self._busy.set()
        if thread is not None:
            thread.join()
        self._stopped.clear()
        with self._lock:
            if not self._armed:
                self._busy.clear()

    def _watch(self) -> None:
        while True:
            self._busy.wait()
            if self._stopped.wait(self.poll_s):
                return
            now = time.monotonic()
            with self._lock:
                due = [a for a in self._armed.values() if now - a.since >= self.poll_s and not a.token.is_set()]
            for armed in due:
                if self._asked(armed.run_id):
                    armed.token.set()

    def _asked(self, run_id: str) -> bool:
        try:
            return self._store.get_control(run_id) is not None
        except StatewardError as exc:  # the store is unreachable: the driver reads it again between steps
            log.warning("run %s: cannot read its control request: %s", run_id, exc)
            return False
        except Exception as exc:  # e.g. a store closed under a step: never kill the watch thread
            log.warning("run %s: control request not read: %r", run_id, exc)
            return False
