"""The HTTP service's API keys and idempotent responses on SQLite."""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime
from typing import Any

from stateward.store.keys import MAX_KEYS_LISTED, ApiKeyRecord, StoredResponse, key_exists, key_not_found
from stateward.store.paging import (
    page_size,
)
from stateward.store.sqlite.base import SQLiteBase


class SQLiteKeys(SQLiteBase):
    """:class:`~stateward.store.keys.KeyStore` on SQLite (schema 4)."""

    _KEY_COLUMNS = "key_id, name, tenant, roles, secret_sha256, created_at, revoked_at"

    def add_api_key(self, key: ApiKeyRecord) -> None:
        with self._tx() as db:
            try:
                db.execute(
                    f"INSERT INTO api_keys({self._KEY_COLUMNS}) VALUES (?,?,?,?,?,?,?)",
                    (
                        key.key_id,
                        key.name,
                        key.tenant,
                        json.dumps(list(key.roles)),
                        key.secret_sha256,
                        key.created_at.isoformat(),
                        None if key.revoked_at is None else key.revoked_at.isoformat(),
                    ),
                )
            except sqlite3.IntegrityError:
                raise key_exists(key.key_id) from None

    def get_api_key(self, key_id: str) -> ApiKeyRecord | None:
        with self._lock:
            row = self._db.execute(f"SELECT {self._KEY_COLUMNS} FROM api_keys WHERE key_id=?", (key_id,)).fetchone()
        return None if row is None else _key(row)

    def list_api_keys(self, limit: int = MAX_KEYS_LISTED) -> list[ApiKeyRecord]:
        with self._lock:
            rows = self._db.execute(
                f"SELECT {self._KEY_COLUMNS} FROM api_keys ORDER BY created_at, key_id LIMIT ?", (page_size(limit),)
            ).fetchall()
        return [_key(r) for r in rows]

    def revoke_api_key(self, key_id: str, at: datetime) -> ApiKeyRecord:
        with self._tx() as db:
            db.execute(
                "UPDATE api_keys SET revoked_at=? WHERE key_id=? AND revoked_at IS NULL", (at.isoformat(), key_id)
            )
            row = db.execute(f"SELECT {self._KEY_COLUMNS} FROM api_keys WHERE key_id=?", (key_id,)).fetchone()
        if row is None:
            raise key_not_found(key_id)
        return _key(row)

    def remember_response(self, response: StoredResponse) -> StoredResponse:
        with self._tx() as db:
            db.execute(
                "INSERT INTO api_responses(tenant, idempotency_key, fingerprint, status_code, body, created_at)"
                " VALUES (?,?,?,?,?,?) ON CONFLICT(tenant, idempotency_key) DO NOTHING",
                (
                    response.tenant,
                    response.idempotency_key,
                    response.fingerprint,
                    response.status_code,
                    response.body,
                    response.created_at.isoformat(),
                ),
            )
            kept = self._response(db, response.tenant, response.idempotency_key)
        assert kept is not None
        return kept

    def recall_response(self, tenant: str, idempotency_key: str) -> StoredResponse | None:
        with self._lock:
            return self._response(self._db, tenant, idempotency_key)

    @staticmethod
    def _response(db: sqlite3.Connection, tenant: str, idempotency_key: str) -> StoredResponse | None:
        row = db.execute(
            "SELECT fingerprint, status_code, body, created_at FROM api_responses WHERE tenant=? AND idempotency_key=?",
            (tenant, idempotency_key),
        ).fetchone()
        if row is None:
            return None
        return StoredResponse(
            tenant=tenant,
            idempotency_key=idempotency_key,
            fingerprint=row[0],
            status_code=row[1],
            body=row[2],
            created_at=datetime.fromisoformat(row[3]),
        )


def _key(r: tuple[Any, ...]) -> ApiKeyRecord:
    return ApiKeyRecord(
        key_id=r[0],
        name=r[1],
        tenant=r[2],
        roles=tuple(json.loads(r[3])),
        secret_sha256=r[4],
        created_at=datetime.fromisoformat(r[5]),
        revoked_at=None if r[6] is None else datetime.fromisoformat(r[6]),
    )
