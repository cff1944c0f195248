"""Leases and claims on PostgreSQL: fencing tokens judged by the database clock, claims with
``FOR UPDATE SKIP LOCKED``."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from stateward.core.errors import ErrorCode, RunError, RunNotFoundError, StaleLeaseError
from stateward.store import _pg_sql as q
from stateward.store.base import Buildable, build_pairs, claim_limit
from stateward.store.postgres.base import PostgresBase
from stateward.store.records import (
    Lease,
)


class PostgresLeases(PostgresBase):
    """:class:`~stateward.store.protocols.LeaseBook` on PostgreSQL."""

    def acquire_lease(self, run_id: str, owner: str, ttl_s: float) -> Lease:
        """Take the run's lease if nobody else holds a live one; every acquisition is a new fencing token."""
        with self._conn() as conn:
            row = conn.execute(q.ACQUIRE_LEASE, {"owner": owner, "ttl": ttl_s, "run_id": run_id}).fetchone()
            if row is not None:
                return Lease(run_id=run_id, owner=owner, version=row[0], expires_at=row[1])
            held = conn.execute(q.LEASE_ROW, (run_id,)).fetchone()
        if held is None:
            raise RunNotFoundError(f"no run {run_id!r}", details={"run_id": run_id})
        holder, _, expires = held
        raise RunError(
            f"run {run_id} is leased by {holder} until {expires:.3f}",
            code=ErrorCode.LEASE_HELD,
            details={"run_id": run_id, "holder": holder},
        )

    def claim_next(
        self,
        owner: str,
        ttl_s: float,
        statuses: tuple[str, ...] = ("RUNNING", "PAUSING"),
        *,
        builds: Buildable | None = None,
    ) -> Lease | None:
        """The runnable run nobody holds a live lease on that has waited longest since a write left it without
        a lease (``queued_at``: its creation, an unleased step, a lease given back); rows other claimers have
        locked are skipped. A worker's own steps do not move it, so they stay heap-only updates (migration 7)."""
        claimed = self.claim_batch(owner, ttl_s, 1, statuses, builds=builds)
        return claimed[0] if claimed else None

    def claim_batch(
        self,
        owner: str,
        ttl_s: float,
        limit: int,
        statuses: tuple[str, ...] = ("RUNNING", "PAUSING"),
        *,
        builds: Buildable | None = None,
    ) -> list[Lease]:
        """Up to ``limit`` of them in one statement, in queue order."""
        params: dict[str, Any] = {"statuses": list(statuses), "owner": owner, "ttl": ttl_s, "limit": claim_limit(limit)}
        sql = q.CLAIM_RUNS
        if builds is not None:
            pairs = build_pairs(builds)
            params |= {
                "agents": list(builds),
                "build_agents": [a for a, _ in pairs],
                "build_versions": [v for _, v in pairs],
            }
            sql = q.CLAIM_BUILDABLE_RUNS
        with self._conn() as conn:
            rows = conn.execute(sql, params).fetchall()
        rows.sort(key=lambda row: (row[3], row[0]))
        return [Lease(run_id=row[0], owner=owner, version=row[1], expires_at=row[2]) for row in rows]

    def due_runs(self, status: str, now: datetime, limit: int = 100) -> list[str]:
        with self._conn() as conn:
            rows = conn.execute(q.DUE_RUNS, (status, now.timestamp(), limit)).fetchall()
        return [str(r[0]) for r in rows]

    def renew_lease(self, lease: Lease, ttl_s: float) -> Lease:
        with self._conn() as conn:
            row = conn.execute(q.RENEW_LEASE, (ttl_s, lease.run_id, lease.owner, lease.version)).fetchone()
        if row is None:
            raise StaleLeaseError(
                f"lease {lease.version} of {lease.owner} on run {lease.run_id} was superseded",
                details={"run_id": lease.run_id, "lease_version": lease.version},
            )
        return lease.model_copy(update={"expires_at": row[0]})

    def release_lease(self, lease: Lease) -> None:
        with self._conn() as conn:
            conn.execute(q.RELEASE_LEASE, (lease.run_id, lease.owner, lease.version))

    def lease_of(self, run_id: str) -> Lease | None:
        owner, version, expires = self._one(q.LEASE_ROW, run_id)
        if owner is None:
            return None
        return Lease(run_id=run_id, owner=owner, version=version, expires_at=expires)
