"""Workers: claim runnable runs, drive each to its next stop, repeat; shut down between steps.

Any number of worker processes on any number of machines can share one PostgreSQL store (claims
use ``FOR UPDATE SKIP LOCKED``) or one SQLite file on one machine. A run resumed by an approval
that was recorded without driving is picked up here like any other.

A worker survives anything one run does: a step that raises is recorded on that run and retried
with backoff (recovery.py), an agent this process cannot build backs off the same way, and an
unexpected error in the loop itself is logged and counted while the loop goes on.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

from stateward.core.errors import ErrorCode, StaleLeaseError, StatewardError, UserError
from stateward.core.setback import Setback, SetbackKind
from stateward.core.state import RunState
from stateward.core.status import RunStatus
from stateward.runtime.runtime import Runtime
from stateward.store.records import Lease

log = logging.getLogger("stateward.worker")


def positive_seconds(name: str, value: float) -> float:
    """NaN compares false with everything: a plain ``<= 0`` check would let it through."""
    if not (math.isfinite(value) and value > 0):
        raise UserError(
            f"{name} must be a positive number of seconds (got {value})", code=ErrorCode.INVALID_WORKER_CONFIG
        )
    return value


@dataclass
class WorkerStats:
    claimed: int = 0
    stale_leases: int = 0
    errors: int = 0  # named store or runtime errors met while claiming or driving
    crashed_steps: int = 0  # steps that raised; each recorded on its run (step_crashed)
    agent_unavailable: int = 0  # claimed runs whose agent this process could not build
    model_outages: int = 0  # runs paused because their model provider stayed down
    runs_failed: int = 0  # runs this worker ended FAILED / step_crashed (their retries spent)
    runs_parked: int = 0  # runs left PAUSED for an operator (agent or model still unavailable)
    loop_errors: int = 0  # unexpected errors in the worker's own loop (logged; the loop went on)
    stopped_on_crashes: bool = False  # stopped because ``max_crashes`` was reached
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, name: str, n: int = 1) -> None:
        with self.lock:
            setattr(self, name, getattr(self, name) + n)

    def as_dict(self) -> dict[str, int | bool]:
        return {k: v for k, v in vars(self).items() if k != "lock"}

    @property
    def troubled(self) -> bool:
        """Runs ended or parked because of what they met here, or the loop itself went wrong."""
        return self.stopped_on_crashes or bool(self.runs_failed or self.runs_parked or self.loop_errors)


_COUNTER = {
    SetbackKind.STEP_CRASHED: "crashed_steps",
    SetbackKind.AGENT_UNAVAILABLE: "agent_unavailable",
    SetbackKind.MODEL_UNAVAILABLE: "model_outages",
}


class Worker:
    """Claims runnable runs and drives up to ``concurrency`` of them at once, one thread per slot."""

    # Each slot is an OS thread polling the store: past a few hundred they only contend.
    max_concurrency: ClassVar[int] = 256

    def __init__(
        self,
        runtime: Runtime,
        *,
        concurrency: int = 1,
        poll_s: float = 0.2,
        expire_every_s: float = 5.0,
        observer: Callable[[str, str], None] | None = None,
        max_crashes: int | None = None,
    ):
        """``max_crashes``: stop (like SIGTERM: finish the steps in flight) once this many steps crashed."""
        if not 1 <= concurrency <= self.max_concurrency:
            raise UserError(
                f"concurrency must be 1 to {self.max_concurrency} for a {type(self).__name__} (got {concurrency})",
                code=ErrorCode.INVALID_WORKER_CONFIG,
            )
        if max_crashes is not None and max_crashes < 1:
            raise UserError("max_crashes must be at least 1", code=ErrorCode.INVALID_WORKER_CONFIG)
        self.max_crashes = max_crashes
        positive_seconds("the poll interval", poll_s)
        positive_seconds("the expiry sweep interval", expire_every_s)
        self.runtime = runtime
        self.concurrency = concurrency
        self.poll_s = poll_s
        self.expire_every_s = expire_every_s
        self.stop = threading.Event()
        self.stats = WorkerStats()
        self._observe = observer or (lambda kind, run_id: None)
        self._builds: dict[str, tuple[str, ...]] | None = None

    @property
    def builds(self) -> dict[str, tuple[str, ...]]:
        """The agent versions this worker can build, worked out once: its claims skip runs of those agents
        recorded under any other version, so workers of two builds side by side each drive their own."""
        if self._builds is None:
            self._builds = self.runtime.agents.claimable()
        return self._builds

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
                worked = self._once(owner)
            except Exception:  # a bug of ours, not a run's: never let it end the thread silently
                log.exception("worker loop %s: unexpected error; going on", owner)
                self.stats.add("loop_errors")
                self.stop.wait(self.poll_s)
                continue
            if worked:
                idle_since = time.monotonic()
            elif idle_exit_s is not None and time.monotonic() - idle_since >= idle_exit_s:
                return
            else:
                self.stop.wait(self.poll_s)

    def _once(self, owner: str) -> bool:
        """Claim one runnable run and drive it to its next stop; False when there was none."""
        lease = self._claim(owner)
        if lease is None:
            return False
        self._drive(lease)
        return True

    def _claim(self, owner: str) -> Lease | None:
        """Lease one runnable run (counted), or None: there was none, or the store refused (counted)."""
        try:
            lease = self.runtime.store.claim_next(owner, self.runtime.lease_policy.ttl_s, builds=self.builds)
        except StatewardError as exc:
            log.warning("claim failed: %s", exc)
            self.stats.add("errors")
            return None
        if lease is not None:
            self.stats.add("claimed")
        return lease

    def _drive(self, lease: Lease) -> None:
        """Drive a claimed run to its next stop; a lost lease or a store refusal is counted, not raised."""
        try:
            self.runtime.drive_leased(lease, self.stop, on_setback=self._setback)
        except StaleLeaseError as exc:
            log.error("run %s: %s; this worker stopped driving it", lease.run_id, exc)
            self.stats.add("stale_leases")
            self._observe("stale_lease", lease.run_id)
        except StatewardError as exc:
            log.error("run %s failed to drive: %s", lease.run_id, exc)
            self.stats.add("errors")

    def _setback(self, setback: Setback, state: RunState) -> None:
        """Count what a run met here; stop the worker once ``max_crashes`` steps crashed."""
        self.stats.add(_COUNTER[setback.kind])
        if state.status is RunStatus.FAILED:
            self.stats.add("runs_failed")
        elif state.status is RunStatus.PAUSED and setback.retry_at is None:
            self.stats.add("runs_parked")
        self._observe(setback.kind.value, state.run_id)
        if self.max_crashes is not None and self.stats.crashed_steps >= self.max_crashes:
            if not self.stop.is_set():
                log.error("worker: %d steps crashed (--max-crashes); stopping", self.stats.crashed_steps)
            self.stats.stopped_on_crashes = True
            self.stop.set()

    def _sweep(self) -> None:
        """Expired requests and due timers, model outages whose retry time came, then child runs left between
        two writes (a child never started, an ended child's outcome never handed back); never fatal."""
        sweeps = (
            ("expiry", self.runtime.expire_requests),
            ("retry", self.runtime.resume_due),
            ("children", self.runtime.settle_children),
        )
        for name, sweep in sweeps:
            try:
                sweep(drive=False)
            except Exception as exc:
                log.warning("%s sweep failed: %s", name, exc, exc_info=not isinstance(exc, StatewardError))
                if not isinstance(exc, StatewardError):
                    self.stats.add("loop_errors")
