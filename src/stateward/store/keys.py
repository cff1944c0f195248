"""What the HTTP service keeps in the store besides runs: API keys (hashed) and the first response to
each ``Idempotency-Key``.

Both stores implement :class:`KeyStore` (schema version 4); the conformance suite holds them to the same
clauses. A key's secret is never stored: only the SHA-256 of a high-entropy random secret.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from stateward.core.errors import ErrorCode, StoreError

MAX_KEYS_LISTED = 1000


class ApiKeyRecord(BaseModel):
    """An API key as stored: who it makes the caller (tenant, name, roles) and the hash of its secret."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key_id: str
    name: str
    tenant: str
    roles: tuple[str, ...]
    secret_sha256: str
    created_at: datetime
    revoked_at: datetime | None = None

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None


class StoredResponse(BaseModel):
    """The first response given to an ``Idempotency-Key`` within a tenant, and what it answered."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tenant: str
    idempotency_key: str
    fingerprint: str  # who asked what: a replay must match it
    status_code: int
    body: str  # the JSON body as sent
    created_at: datetime


@runtime_checkable
class KeyStore(Protocol):
    """The service's part of a store (schema 4): API keys and idempotent responses."""

    def add_api_key(self, key: ApiKeyRecord) -> None:
        """Insert a new key; KEY_EXISTS if its id is taken (nothing is overwritten)."""
        ...

    def get_api_key(self, key_id: str) -> ApiKeyRecord | None: ...

    def list_api_keys(self, limit: int = MAX_KEYS_LISTED) -> list[ApiKeyRecord]:
        """Keys oldest first, revoked ones included, at most ``limit``."""
        ...

    def revoke_api_key(self, key_id: str, at: datetime) -> ApiKeyRecord:
        """Mark the key revoked (the first revocation time stands); KEY_NOT_FOUND if there is none."""
        ...

    def remember_response(self, response: StoredResponse) -> StoredResponse:
        """Keep the response unless one is already kept for its (tenant, key); return the one kept."""
        ...

    def recall_response(self, tenant: str, idempotency_key: str) -> StoredResponse | None: ...


def key_exists(key_id: str) -> StoreError:
    return StoreError(f"an API key {key_id!r} already exists", code=ErrorCode.KEY_EXISTS, details={"key_id": key_id})


def key_not_found(key_id: str) -> StoreError:
    return StoreError(f"no API key {key_id!r}", code=ErrorCode.KEY_NOT_FOUND, details={"key_id": key_id[:80]})
