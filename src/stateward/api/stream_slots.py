"""How many event streams may be open at once: in all, and per principal.

A stream takes a slot before it starts and gives it back when its connection ends, however it ends
(the run ended, the client went away, a write timed out). Past the per-principal cap the refusal is
``STREAM_LIMIT_PER_KEY`` (that caller should close one of its own streams); past the global cap it is
``STREAM_LIMIT`` (the service is full: retry later). Both are 429 with ``Retry-After``.
"""

from __future__ import annotations

import threading
from collections import Counter

from stateward.core.errors import ErrorCode, UserError


class StreamRefused(UserError):
    """A stream past a cap; ``retry_after_s`` is what the 429 tells the client to wait."""

    def __init__(self, message: str, *, code: ErrorCode, retry_after_s: int):
        super().__init__(message, code=code)
        self.retry_after_s = retry_after_s


class Slot:
    """One open stream's place under the caps; :meth:`release` gives it back (once, whatever calls it)."""

    def __init__(self, slots: StreamSlots, holder: tuple[str, str]):
        self._slots = slots
        self.holder = holder
        self._released = False

    def release(self) -> None:
        """Give the place back; a second call does nothing."""
        if not self._released:
            self._released = True
            self._slots._give_back(self.holder)


class StreamSlots:
    """The counts, shared by the request threads that take slots and the event loop that gives them back."""

    def __init__(self, total: int, per_holder: int, *, retry_after_s: int):
        self.total = total
        self.per_holder = per_holder
        self.retry_after_s = retry_after_s
        self._lock = threading.Lock()
        self._held: Counter[tuple[str, str]] = Counter()
        self._open = 0

    def take(self, holder: tuple[str, str]) -> Slot:
        """A slot for ``holder`` (tenant, principal), or StreamRefused naming the cap that is full."""
        with self._lock:
            if self._held[holder] >= self.per_holder:
                raise StreamRefused(
                    f"this principal already has {self.per_holder} event streams open; close one first",
                    code=ErrorCode.STREAM_LIMIT_PER_KEY,
                    retry_after_s=self.retry_after_s,
                )
            if self._open >= self.total:
                raise StreamRefused(
                    f"the service has {self.total} event streams open; retry later",
                    code=ErrorCode.STREAM_LIMIT,
                    retry_after_s=self.retry_after_s,
                )
            self._held[holder] += 1
            self._open += 1
        return Slot(self, holder)

    @property
    def open(self) -> int:
        """Streams open now (for tests and metrics)."""
        return self._open

    def _give_back(self, holder: tuple[str, str]) -> None:
        with self._lock:
            self._open -= 1
            self._held[holder] -= 1
            if self._held[holder] <= 0:
                del self._held[holder]
