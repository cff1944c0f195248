"""Noticing a pause (or cancel) asked while a step's calls are in flight (source 11.2: PAUSING cancels the long
calls that can be cancelled).

Between steps the driver reads the run's control request itself. During a step it cannot: it is waiting on
a model or a tool. :class:`PauseWatch` is one daemon thread per drive that, while a step has been in flight
for ``poll_s``, reads the control request every ``poll_s`` and sets the step's :class:`PauseToken` when one
is there; the calls watching the token give way (core/interrupt.py). A short step never reads anything.
"""

from __future__ import annotations

import logging
import threading

from stateward.core.errors import StatewardError
from stateward.core.interrupt import PauseToken
from stateward.store.base import Store

log = logging.getLogger("stateward.pause_watch")

DEFAULT_POLL_S = 0.2


class PauseWatch:
    """Watches one run's control request while a step is armed; started lazily, stopped with the drive."""

    def __init__(self, store: Store, run_id: str, poll_s: float = DEFAULT_POLL_S) -> None:
        self._store = store
        self._run_id = run_id
        self._poll_s = poll_s
        self._token: PauseToken | None = None
        self._armed = threading.Event()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def arm(self) -> PauseToken:
        """A fresh token for the step about to run; watched until :meth:`disarm`."""
        token = self._token = PauseToken()
        self._armed.set()
        if self._thread is None:
            self._thread = threading.Thread(target=self._watch, name=f"pause-watch-{self._run_id}", daemon=True)
            self._thread.start()
        return token

    def disarm(self) -> None:
        self._armed.clear()
        self._token = None

    def stop(self) -> None:
        self._stopped.set()
        self._armed.set()  # wake the thread so it sees the stop
        if self._thread is not None:
            self._thread.join()

    def _watch(self) -> None:
        while not self._stopped.is_set():
            self._armed.wait()
            token = self._token
            if self._stopped.wait(self._poll_s) or token is None or token is not self._token:
                continue  # stopped, or that step ended within one poll: nothing to read
            if not token.is_set() and self._asked():
                token.set()

    def _asked(self) -> bool:
        try:
            return self._store.get_control(self._run_id) is not None
        except StatewardError as exc:  # the store is unreachable: the driver reads it again between steps
            log.warning("run %s: cannot read its control request: %s", self._run_id, exc)
            return False
