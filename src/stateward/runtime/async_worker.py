"""A worker that drives many runs at once in one event loop.

It is :class:`~stateward.runtime.worker.Worker` with coroutines instead of threads: the same drive
(bridged: see core/bridge.py), the same setback counting, stop and sweeps. One claimer fills the free
slots (fewer than ``concurrency`` runs in flight) with one claim for all of them (``Store.claim_batch``:
one transaction, not one per run); each claimed run is driven in its own task, so a run waiting on its
model or an ``async def`` tool costs the others nothing. Leases are renewed by a heartbeat timer per run
(AsyncLeaseKeeper); ``stop`` (SIGTERM) ends claiming, and the runs in flight stop at their next step
boundary, left RUNNING for any worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import ClassVar

from stateward.core.bridge import run_bridged
from stateward.core.errors import StatewardError
from stateward.runtime.runtime import Runtime
from stateward.runtime.worker import Worker, WorkerStats, positive_seconds
from stateward.store.base import MAX_CLAIM_BATCH
from stateward.store.records import Lease

log = logging.getLogger("stateward.worker")

__all__ = ["AsyncWorker"]


class AsyncWorker(Worker):
    """Claims runnable runs and drives up to ``concurrency`` of them at once in one event loop.

    ``run()`` runs its own loop (the CLI's ``stateward worker --async``); ``arun()`` works inside one
    that is already running. Stats, ``stop``, ``max_crashes`` and the sweeps are the threaded worker's.
    """

    max_concurrency: ClassVar[int] = 10_000  # tasks, not threads: bounded by memory and the store's pace

    def __init__(
        self,
        runtime: Runtime,
        *,
        concurrency: int = 100,
        poll_s: float = 0.2,
        expire_every_s: float = 5.0,
        observer: Callable[[str, str], None] | None = None,
        max_crashes: int | None = None,
    ):
        """As :class:`Worker`; ``runtime`` is used through its bridged view (store calls off the loop)."""
        super().__init__(
            runtime.bridged(),
            concurrency=concurrency,
            poll_s=poll_s,
            expire_every_s=expire_every_s,
            observer=observer,
            max_crashes=max_crashes,
        )

    def run(self, *, idle_exit_s: float | None = None) -> WorkerStats:
        """Work in a new event loop until ``stop`` is set or, with ``idle_exit_s``, until idle that long."""
        return asyncio.run(self.arun(idle_exit_s=idle_exit_s))

    async def arun(self, *, idle_exit_s: float | None = None) -> WorkerStats:
        """Work in the running event loop until ``stop`` is set or idle ``idle_exit_s`` seconds."""
        if idle_exit_s is not None:
            positive_seconds("the idle exit", idle_exit_s)
        owner = f"{self.runtime.owner}/async"
        in_flight: set[asyncio.Task[None]] = set()
        freed = asyncio.Event()  # set as a run in flight ends: a slot is free again

        def ended(task: asyncio.Task[None]) -> None:
            in_flight.discard(task)
            freed.set()

        sweeper = asyncio.create_task(self._asweep(), name="stateward-sweep")
        idle_since = time.monotonic()
        try:
            while not self.stop.is_set():
                free = self.concurrency - len(in_flight)
                if free <= 0:
                    freed.clear()
                    await freed.wait()
                    continue
                leases = await self._aclaim(owner, min(free, MAX_CLAIM_BATCH))
                if not leases:
                    if in_flight:
                        idle_since = time.monotonic()
                    elif idle_exit_s is not None and time.monotonic() - idle_since >= idle_exit_s:
                        break
                    await asyncio.sleep(self.poll_s)
                    continue
                idle_since = time.monotonic()
                for lease in leases:
                    task = asyncio.create_task(self._adrive(lease), name=f"stateward-run-{lease.run_id}")
                    in_flight.add(task)
                    task.add_done_callback(ended)
        finally:
            if in_flight:  # each stops at its next step boundary once ``stop`` is set
                await asyncio.gather(*in_flight, return_exceptions=True)
            sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sweeper
        return self.stats

    async def _asweep(self) -> None:
        """Expired requests, due timers and due model retries every ``expire_every_s`` (never fatal)."""
        while not self.stop.is_set():
            await run_bridged(self._sweep)
            await asyncio.sleep(self.expire_every_s)

    async def _aclaim(self, owner: str, limit: int) -> list[Lease]:
        try:
            return await run_bridged(self._claim_batch, owner, limit)
        except Exception:  # a bug of ours, not a run's: count it, keep working
            log.exception("async worker: unexpected error while claiming; going on")
            self.stats.add("loop_errors")
            return []

    def _claim_batch(self, owner: str, limit: int) -> list[Lease]:
        """Lease up to ``limit`` runnable runs in one transaction (counted); none when the store refused (counted)."""
        try:
            leases = self.runtime.store.claim_batch(owner, self.runtime.lease_policy.ttl_s, limit, builds=self.builds)
        except StatewardError as exc:
            log.warning("claim failed: %s", exc)
            self.stats.add("errors")
            return []
        self.stats.add("claimed", len(leases))
        return leases

    async def _adrive(self, lease: Lease) -> None:
        try:
            await run_bridged(self._drive, lease)
        except Exception:
            log.exception("async worker: unexpected error driving run %s; going on", lease.run_id)
            self.stats.add("loop_errors")
