"""Workers: claim runnable runs, drive each to its next stop, repeat; shut down between steps.

Any number of worker processes on any number of machines can share one PostgreSQL store (claims
use ``FOR UPDATE SKIP LOCKED``) or one SQLite file on one machine. A run resumed by an approval
that was recorded without driving is picked up here like any other.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from stateward.core.errors import StaleLeaseError, StatewardError, UserError
from stateward.runtime.runtime import Runtime

log = logging.getLogger("stateward.worker")


def positive_seconds(name: str, value: float) -> float:
    """NaN compares false with everything: a plain ``<= 0`` check would let it through."""
    if not (math.isfinite(value) and value > 0):
        raise UserError(f"{name} must be a positive number of seconds (got {value})", code="INVALID_WORKER_CONFIG")
    return value


@dataclass
class WorkerStats:
    claimed: int = 0
    stale_leases: int = 0
    errors: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, name: str) -> None:
        with self.lock:
            setattr(self, name, getattr(self, name) + 1)


class Worker:
    def __init__(
        self,
        runtime: Runtime,
        *,
        concurrency: int = 1,
        poll_s: float = 0.2,
        expire_every_s: float = 5.0,
        observer: Callable[[str, str], None] | None = None,
    ):
        if concurrency < 1:
            raise UserError("concurrency must be at least 1", code="INVALID_WORKER_CONFIG")
        positive_seconds("the poll interval", poll_s)
        positive_seconds("the expiry sweep interval", expire_every_s)
        self.runtime = runtime
        self.concurrency = concurrency
        self.poll_s = poll_s
        self.expire_every_s = expire_every_s
        self.stop = threading.Event()
        self.stats = WorkerStats()
        self._observe = observer or (lambda kind, run_id: None)

    def run(self, *, idle_exit_s: float | None = None) -> WorkerStats:
        """Work until ``stop`` is set (e.g. by SIGTERM) or, with ``idle_exit_s``, until idle that long."""
        if idle_exit_s is not None:
            positive_seconds("the idle exit", idle_exit_s)
        threads = [
            threading.Thread(target=self._loop, args=(i, idle_exit_s), name=f"stateward-worker-{i}", daemon=True)
            for i in range(self.concurrency)
        ]
        for t in threads:
            t.start()
        last_sweep = 0.0
        while any(t.is_alive() for t in threads):
            if time.monotonic() - last_sweep >= self.expire_every_s:
                last_sweep = time.monotonic()
                self._sweep()
            for t in threads:
                t.join(timeout=self.poll_s)
        return self.stats

    def _loop(self, index: int, idle_exit_s: float | None) -> None:
        owner = f"{self.runtime.owner}/{index}"
        idle_since = time.monotonic()
        while not self.stop.is_set():
            try:
                lease = self.runtime.store.claim_next(owner, self.runtime.lease_policy.ttl_s)
            except StatewardError as exc:
                log.warning("claim failed: %s", exc)
                self.stats.add("errors")
                lease = None
            if lease is None:
                if idle_exit_s is not None and time.monotonic() - idle_since >= idle_exit_s:
                    return
                self.stop.wait(self.poll_s)
                continue
            self.stats.add("claimed")
            try:
                self.runtime.drive_leased(lease, self.stop)
            except StaleLeaseError as exc:
                log.error("run %s: %s; this worker stopped driving it", lease.run_id, exc)
                self.stats.add("stale_leases")
                self._observe("stale_lease", lease.run_id)
            except StatewardError as exc:
                log.error("run %s failed to drive: %s", lease.run_id, exc)
                self.stats.add("errors")
            idle_since = time.monotonic()

    def _sweep(self) -> None:
        try:
            self.runtime.expire_requests(drive=False)
        except StatewardError as exc:
            log.warning("expiry sweep failed: %s", exc)
