"""A fault injector that SIGKILLs its own process at persistence boundaries, with a seeded probability."""

from __future__ import annotations

import os
import random
import signal


class RandomKill:
    def __init__(self, seed: str, probability: float, *, log_path: str | None = None):
        self._rng = random.Random(seed)
        self._p = probability
        self._log_path = log_path

    def point(self, name: str) -> None:
        if self._rng.random() >= self._p:
            return
        if self._log_path is not None:
            # O_APPEND writes of one short line are atomic enough across processes for a tally.
            fd = os.open(self._log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            os.write(fd, f"{name}\n".encode())
            os.close(fd)
        os.kill(os.getpid(), signal.SIGKILL)


class SignalAt:
    """Sends its own process ``signum`` the ``nth`` time it reaches boundary ``name``, once: SIGKILL is a
    crash at that boundary; SIGSTOP a worker frozen mid-step (GC pause, VM migration) while its lease runs
    out and another worker takes the run over."""

    def __init__(self, name: str, nth: int = 1, *, signum: signal.Signals = signal.SIGKILL):
        self._name = name
        self._left = nth
        self._signum = signum

    def point(self, name: str) -> None:
        if name != self._name:
            return
        self._left -= 1
        if self._left == 0:
            os.kill(os.getpid(), self._signum)
