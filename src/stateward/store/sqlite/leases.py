"""Leases and claims on SQLite: fencing tokens, and the claims by which workers find runnable runs."""

from __future__ import annotations

import sqlite3
import time
from datetime import datetime

from stateward.core.errors import ErrorCode, RunError, RunNotFoundError, StaleLeaseError
from stateward.store.base import Buildable, build_pairs, claim_limit
from stateward.store.records import (
    Lease,
)
from stateward.store.sqlite.base import SQLiteBase


class SQLiteLeases(SQLiteBase):
    """:class:`~stateward.store.protocols.LeaseBook` on SQLite: leases and claims."""

    def acquire_lease(self, run_id: str, owner: str, ttl_s: float) -> Lease:
        """Take the run's lease if nobody else holds a live one; every acquisition is a new fencing token."""
        with self._tx() as db:
            row = db.execute(
                "SELECT lease_owner, lease_version, lease_expires_at FROM runs WHERE run_id=?", (run_id,)
            ).fetchone()
            if row is None:
                raise RunNotFoundError(f"no run {run_id!r}", details={"run_id": run_id})
            holder, version, expires = row
            now = time.time()
            if holder is not None and holder != owner and expires is not None and expires > now:
                raise RunError(
                    f"run {run_id} is leased by {holder} until {expires:.3f}",
                    code=ErrorCode.LEASE_HELD,
                    details={"run_id": run_id, "holder": holder},
                )
            return self._grant(db, run_id, owner, int(version) + 1, now + ttl_s)

    def claim_next(
        self,
        owner: str,
        ttl_s: float,
        statuses: tuple[str, ...] = ("RUNNING", "PAUSING"),
        *,
        builds: Buildable | None = None,
    ) -> Lease | None:
        """The oldest runnable run nobody holds a live lease on, leased to ``owner``."""
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
        """Up to ``limit`` of them, oldest first, in one transaction of two statements whatever their number."""
        claim_limit(limit)
        marks = ",".join("?" * len(statuses))
        version_clause, version_args = buildable_clause(builds)
        with self._tx() as db:
            now = time.time()
            rows = db.execute(
                f"SELECT run_key, run_id, lease_version, status FROM runs WHERE status IN ({marks})"
                " AND (lease_owner IS NULL OR lease_expires_at < ?) AND (not_before IS NULL OR not_before <= ?)"
                f"{version_clause} ORDER BY updated_at, run_id LIMIT ?",
                (*statuses, now, now, *version_args, limit),
            ).fetchall()
            if not rows:
                return []
            expires_at = now + ttl_s
            # Under BEGIN IMMEDIATE nobody else writes meanwhile: each version is the one read, plus one.
            keys = ",".join("?" * len(rows))
            db.execute(
                f"UPDATE runs SET lease_owner=?, lease_version=lease_version+1, lease_expires_at=?"
                f" WHERE run_key IN ({keys})",
                (owner, expires_at, *(row[0] for row in rows)),
            )
        for key, run_id, _, status in rows:  # the drive that follows looks neither up again
            self._remember(run_id, int(key), str(status))
        return [
            Lease(run_id=run_id, owner=owner, version=int(version) + 1, expires_at=expires_at)
            for _, run_id, version, _ in rows
        ]

    def due_runs(self, status: str, now: datetime, limit: int = 100) -> list[str]:
        with self._lock:
            rows = self._db.execute(
                "SELECT run_id FROM runs WHERE status=? AND not_before IS NOT NULL AND not_before <= ?"
                " ORDER BY not_before, run_id LIMIT ?",
                (status, now.timestamp(), limit),
            ).fetchall()
        return [str(r[0]) for r in rows]

    @staticmethod
    def _grant(db: sqlite3.Connection, run_id: str, owner: str, version: int, expires_at: float) -> Lease:
        db.execute(
            "UPDATE runs SET lease_owner=?, lease_version=?, lease_expires_at=? WHERE run_id=?",
            (owner, version, expires_at, run_id),
        )
        return Lease(run_id=run_id, owner=owner, version=version, expires_at=expires_at)

    def renew_lease(self, lease: Lease, ttl_s: float) -> Lease:
        expires_at = time.time() + ttl_s
        with self._tx() as db:
            cur = db.execute(
                "UPDATE runs SET lease_expires_at=? WHERE run_id=? AND lease_owner=? AND lease_version=?",
                (expires_at, lease.run_id, lease.owner, lease.version),
            )
            if cur.rowcount != 1:
                raise StaleLeaseError(
                    f"lease {lease.version} of {lease.owner} on run {lease.run_id} was superseded",
                    details={"run_id": lease.run_id, "lease_version": lease.version},
                )
        return lease.model_copy(update={"expires_at": expires_at})

    def release_lease(self, lease: Lease) -> None:
        with self._tx() as db:
            db.execute(
                "UPDATE runs SET lease_owner=NULL, lease_expires_at=NULL WHERE run_id=? AND lease_owner=?"
                " AND lease_version=?",
                (lease.run_id, lease.owner, lease.version),
            )

    def lease_of(self, run_id: str) -> Lease | None:
        row = self._one("SELECT lease_owner, lease_version, lease_expires_at FROM runs WHERE run_id=?", run_id)
        if row[0] is None:
            return None
        return Lease(run_id=run_id, owner=row[0], version=row[1], expires_at=row[2])


def buildable_clause(builds: Buildable | None) -> tuple[str, tuple[str, ...]]:
    """The claim's version filter (see ``Buildable``) and its parameters; nothing without ``builds``."""
    if builds is None or not builds:
        return "", ()
    pairs = build_pairs(builds)
    names = ",".join("?" * len(builds))
    clause = f" AND NOT (agent IN ({names}) AND agent_version IS NOT NULL"
    if pairs:
        clause += f" AND (agent, agent_version) NOT IN (VALUES {','.join(['(?,?)'] * len(pairs))})"
    return clause + ")", (*builds, *(item for pair in pairs for item in pair))
