"""``/readyz``: the store answers and is not damaged, checked at most once per interval.

SQLite's ``PRAGMA quick_check`` reads every page of the file, so a probe every few seconds on a large
store would cost the service a full read each time; the verdict is kept for ``interval_s`` (a damaged
verdict too: a corrupt file does not heal by itself). The response names the failure (STORE_CORRUPT /
STORE_UNAVAILABLE) but never the store's path, host or database name.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from stateward.core.errors import ErrorCode, StoreError
from stateward.store.base import Store

DEFAULT_INTERVAL_S = 30.0


@dataclass
class Readiness:
    """The store's last integrity verdict and when it was taken (``clock`` is monotonic seconds)."""

    store: Store
    interval_s: float = DEFAULT_INTERVAL_S
    clock: Callable[[], float] = time.monotonic
    _checked_at: float | None = None
    _verdict: tuple[str, str] | None = None  # (code, message) of the last failure, None when it passed
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def problem(self) -> tuple[str, str] | None:
        """None when ready, else (code, message) for the 503 body."""
        with self._lock:
            now = self.clock()
            if self._checked_at is None or now - self._checked_at >= self.interval_s:
                self._verdict = self._check()
                self._checked_at = now
            verdict = self._verdict
        if verdict is not None:
            return verdict
        try:
            self.store.list_runs(limit=1)
        except Exception as exc:  # any failure of the store means "not ready", never a 500
            return ErrorCode.STORE_UNAVAILABLE.value, f"the store does not answer: {type(exc).__name__}"
        return None

    def _check(self) -> tuple[str, str] | None:
        try:
            self.store.check_integrity()
        except StoreError as exc:
            if exc.code == ErrorCode.STORE_CORRUPT:
                return exc.code, "the store is damaged (its integrity check failed); restore it from a backup"
            return ErrorCode.STORE_UNAVAILABLE.value, f"the store does not answer: {exc.code}"
        except Exception as exc:
            return ErrorCode.STORE_UNAVAILABLE.value, f"the store does not answer: {type(exc).__name__}"
        return None
