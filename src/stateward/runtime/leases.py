"""Lease settings and the heartbeat that keeps a driven run's lease alive.

A run is written only by the holder of its lease. The heartbeat renews it; when a renewal finds the
lease superseded (a worker paused past its TTL, another one took over), the holder must stop before
its next write — and even if it does not, the store rejects that write by its fencing token.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, model_validator

from stateward.core.bridge import resolve
from stateward.core.errors import ErrorCode, StaleLeaseError, StatewardError, UserError
from stateward.runtime.faults import NO_FAULTS, FaultInjector
from stateward.store.base import Store
from stateward.store.records import Lease

if TYPE_CHECKING:
    import asyncio

log = logging.getLogger("stateward.lease")


class LeasePolicy(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    ttl_s: float = 30.0
    heartbeat_s: float = 10.0

    @model_validator(mode="after")
    def _ttl_covers_three_heartbeats(self) -> LeasePolicy:
        # A NaN TTL would be stored as no expiry at all: a lease nobody could ever take over.
        if not (math.isfinite(self.ttl_s) and math.isfinite(self.heartbeat_s) and self.heartbeat_s > 0):
            raise UserError(
                f"lease TTL {self.ttl_s} and heartbeat {self.heartbeat_s} must be positive, finite numbers of seconds",
                code=ErrorCode.INVALID_LEASE_POLICY,
            )
        if self.ttl_s < 3 * self.heartbeat_s - 1e-9:
            raise UserError(
                f"lease TTL {self.ttl_s}s must be at least 3 x the heartbeat {self.heartbeat_s}s",
                code=ErrorCode.INVALID_LEASE_POLICY,
            )
        return self


class LeaseKeeper:
    """Renews ``lease`` every heartbeat on a daemon thread until stopped or superseded."""

    def __init__(self, store: Store, lease: Lease, policy: LeasePolicy, faults: FaultInjector = NO_FAULTS):
        self._store = store
        self._faults = faults
        self._policy = policy
        self._lease = lease
        self._lost: StaleLeaseError | None = None
        self._returned = False  # released, by stop() or by a committed write
        self._start()

    def _start(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"lease-{self._lease.run_id}", daemon=True)
        self._thread.start()

    @property
    def lease(self) -> Lease:
        return self._lease

    def check(self) -> None:
        """Raise STALE_LEASE if a heartbeat found the lease superseded."""
        if self._lost is not None:
            raise self._lost

    def _beat(self) -> None:
        while not self._stop.wait(self._policy.heartbeat_s) and self._renew():
            pass

    def _renew(self) -> bool:
        """One renewal; False once the lease is lost (no further beats)."""
        try:
            self._faults.point("lease_renewal")
            self._lease = self._store.renew_lease(self._lease, self._policy.ttl_s)
        except StaleLeaseError as exc:
            log.error("lease lost: %s", exc)
            self._lost = exc
            return False
        except StatewardError as exc:  # the store was unreachable: try again next beat
            log.warning("lease renewal failed: %s", exc)
        return True

    def stop(self, *, release: bool = True) -> None:
        """End the heartbeat; give the lease up unless it was lost or already handed back (idempotent)."""
        self._stop.set()
        self._thread.join()
        self._release(release)

    def handing_back(self) -> None:
        """Stop renewing ahead of a write that releases the lease itself (``StepWrite.release_lease``):
        no heartbeat may renew a lease that commit gives up. :meth:`handed_back` once it committed."""
        self.stop(release=False)

    @property
    def returned(self) -> bool:
        """Whether the lease was given up (released, or handed back by a committed write)."""
        return self._returned

    def handed_back(self) -> None:
        """The lease was released by a committed write: a later :meth:`stop` releases nothing."""
        self._returned = True

    def _release(self, release: bool) -> None:
        if release and self._lost is None and not self._returned:
            self._returned = True
            self._store.release_lease(self._lease)


class AsyncLeaseKeeper(LeaseKeeper):
    """The same heartbeat as a timer on the running event loop (no thread, no task per run): what the
    async Runtime's driver uses. Each renewal (the same ``_renew``) runs on the loop's default executor,
    and the next beat is timed once it answered; a drive that ends first only cancels the timer.

    Made and stopped from code running bridged on that loop (see core/bridge.py).
    """

    def _start(self) -> None:
        import asyncio  # here, not at the top: a synchronous worker never loads it

        self._loop = asyncio.get_running_loop()
        self._renewing: asyncio.Future[bool] | None = None
        self._stopped = False
        self._timer: asyncio.TimerHandle | None = self._loop.call_later(self._policy.heartbeat_s, self._due)

    def _due(self) -> None:
        self._timer = None
        self._renewing = self._loop.run_in_executor(None, self._renew)
        self._renewing.add_done_callback(self._renewed)

    def _renewed(self, renewal: asyncio.Future[bool]) -> None:
        still = not (renewal.cancelled() or renewal.exception() is not None) and renewal.result()
        if still and not self._stopped:  # a lost lease beats no more
            self._timer = self._loop.call_later(self._policy.heartbeat_s, self._due)

    def stop(self, *, release: bool = True) -> None:
        self._stopped = True
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        renewing = self._renewing
        if renewing is not None and not renewing.done():
            with contextlib.suppress(Exception):  # its outcome is recorded by _renew itself
                resolve(renewing)  # never release under a renewal still in flight
        self._release(release)
