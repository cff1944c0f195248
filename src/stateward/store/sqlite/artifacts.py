"""Artifacts on SQLite: the versions a run's steps wrote, and those a fork inherits."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from stateward.store.lineage import inherited_artifact, inherited_artifacts
from stateward.store.records import (
    ArtifactRecord,
)
from stateward.store.sqlite.base import SQLiteBase


class SQLiteArtifacts(SQLiteBase):
    """:class:`~stateward.store.protocols.ArtifactShelf` on SQLite; a fork's inherited ones through
    store/lineage.py."""

    def list_artifacts(self, run_id: str) -> list[ArtifactRecord]:
        if self._fork_of(run_id) is None:
            return self._own_artifacts(run_id)
        return inherited_artifacts(self._fork_of, self._own_artifacts, self._shared_versions, run_id)

    def _shared_versions(self, run_id: str) -> dict[str, int]:
        lineage = self.load_run(run_id).lineage
        return {} if lineage is None else dict(lineage.artifacts)

    def _own_artifacts(self, run_id: str) -> list[ArtifactRecord]:
        with self._lock:
            rows = self._db.execute(
                "SELECT name, version, sha256, media_type, content, created_at FROM artifacts"
                " WHERE run_id=? ORDER BY name, version",
                (run_id,),
            ).fetchall()
        return [self._artifact(run_id, r) for r in rows]

    def get_artifact(self, run_id: str, name: str, version: int | None = None) -> ArtifactRecord | None:
        found = self._own_artifact(run_id, name, version)
        if found is not None or self._fork_of(run_id) is None:
            return found
        return inherited_artifact(self._fork_of, self._own_artifact, self._shared_versions, run_id, name, version)

    def _own_artifact(self, run_id: str, name: str, version: int | None) -> ArtifactRecord | None:
        sql = "SELECT name, version, sha256, media_type, content, created_at FROM artifacts WHERE run_id=? AND name=?"
        params: list[Any] = [run_id, name]
        if version is not None:
            sql += " AND version=?"
            params.append(version)
        with self._lock:
            row = self._db.execute(sql + " ORDER BY version DESC LIMIT 1", params).fetchone()
        return None if row is None else self._artifact(run_id, row)

    @staticmethod
    def _artifact(run_id: str, r: tuple[Any, ...]) -> ArtifactRecord:
        return ArtifactRecord(
            run_id=run_id,
            name=r[0],
            version=r[1],
            sha256=r[2],
            media_type=r[3],
            content=r[4],
            created_at=datetime.fromisoformat(r[5]),
        )
