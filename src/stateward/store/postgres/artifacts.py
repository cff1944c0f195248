"""Artifacts on PostgreSQL: the versions a run's steps wrote, and those a fork inherits."""

from __future__ import annotations

from typing import Any

from stateward.store import _pg_sql as q
from stateward.store.lineage import inherited_artifact, inherited_artifacts
from stateward.store.postgres.base import PostgresBase
from stateward.store.records import (
    ArtifactRecord,
)


class PostgresArtifacts(PostgresBase):
    """:class:`~stateward.store.protocols.ArtifactShelf` on PostgreSQL."""

    def list_artifacts(self, run_id: str) -> list[ArtifactRecord]:
        if self._fork_of(run_id) is None:
            return self._own_artifacts(run_id)
        return inherited_artifacts(self._fork_of, self._own_artifacts, self._shared_versions, run_id)

    def _shared_versions(self, run_id: str) -> dict[str, int]:
        lineage = self.load_run(run_id).lineage
        return {} if lineage is None else dict(lineage.artifacts)

    def _own_artifacts(self, run_id: str) -> list[ArtifactRecord]:
        with self._conn() as conn:
            rows = conn.execute(q.LIST_ARTIFACTS, (run_id,)).fetchall()
        return [_artifact(run_id, r) for r in rows]

    def get_artifact(self, run_id: str, name: str, version: int | None = None) -> ArtifactRecord | None:
        found = self._own_artifact(run_id, name, version)
        if found is not None or self._fork_of(run_id) is None:
            return found
        return inherited_artifact(self._fork_of, self._own_artifact, self._shared_versions, run_id, name, version)

    def _own_artifact(self, run_id: str, name: str, version: int | None) -> ArtifactRecord | None:
        with self._conn() as conn:
            row = conn.execute(q.GET_ARTIFACT, {"run_id": run_id, "name": name, "version": version}).fetchone()
        return None if row is None else _artifact(run_id, row)


def _artifact(run_id: str, r: tuple[Any, ...]) -> ArtifactRecord:
    return ArtifactRecord(
        run_id=run_id, name=r[0], version=r[1], sha256=r[2], media_type=r[3], content=r[4], created_at=r[5]
    )
