"""Who is calling: API keys minted, hashed and checked, and the principal a key makes its caller.

A key is ``swk_<key_id>.<secret>``: the id finds the stored record, the secret (256 random bits) is
checked against its SHA-256 in constant time. The secret is shown once, when the key is made, and is
never stored or logged. No fastapi here: the CLI mints keys without the service's dependencies.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable
from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from stateward.core.errors import ErrorCode, StatewardError, UserError
from stateward.core.run_inputs import NAME_PATTERN as _NAME
from stateward.store.keys import ApiKeyRecord, KeyStore

KEY_PREFIX = "swk_"
OIDC_KEY_ID = "oidc"  # the key id of every principal an OIDC token makes
_TOKEN = re.compile(r"^swk_([0-9a-f]{16})\.([A-Za-z0-9_-]{43})$")


class Role(StrEnum):
    """What a key may do over HTTP; ``admin`` implies every other. Other role names a key holds are
    domain roles, matched against a request's ``approver_role``."""

    VIEWER = "viewer"  # read runs and events (every other role reads too)
    SUBMITTER = "submitter"  # start runs
    APPROVER = "approver"  # answer requests whose approver_role the key holds (or that need none)
    OPERATOR = "operator"  # pause, resume, cancel
    ADMIN = "admin"


class Principal(BaseModel):
    """The caller as the credential says: never anything the caller typed."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key_id: str
    name: str
    tenant: str
    roles: frozenset[str]

    @property
    def subject(self) -> str:
        """How answers, pauses, resumes and cancels record who did them."""
        return f"{self.name} [{self.key_id}]"

    @property
    def scope(self) -> str:
        """Whose Idempotency-Keys these are: the API key's id, or an OIDC token's issuer-given subject (every
        OIDC principal shares the key id ``oidc``, so the subject tells them apart)."""
        return f"oidc:{self.name}" if self.key_id == OIDC_KEY_ID else self.key_id

    def has(self, role: Role) -> bool:
        """Admin implies every role, and every role of the service implies reading (viewer)."""
        if role is Role.VIEWER:
            return any(r.value in self.roles for r in Role)
        return role.value in self.roles or Role.ADMIN.value in self.roles


class AuthError(StatewardError):
    """The caller is not authenticated (401) or lacks the role a route needs (403)."""

    default_code = ErrorCode.UNAUTHENTICATED


def _checked_name(what: str, value: str) -> str:
    if not _NAME.match(value):
        raise UserError(
            f"{what} must be 1-64 characters of letters, digits and ._@:- (starting with a letter or digit),"
            f" not {value[:80]!r}",
            code=ErrorCode.INVALID_ARGUMENT,
            details={what: value[:80]},
        )
    return value


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def mint_key(
    store: KeyStore, *, tenant: str, name: str, roles: Iterable[str], now: datetime
) -> tuple[ApiKeyRecord, str]:
    """Store a new key and return it with its token (``swk_<id>.<secret>``), the only time the secret exists."""
    role_set = tuple(sorted({_checked_name("role", r) for r in roles}))
    if not role_set:
        raise UserError("a key needs at least one role", code=ErrorCode.INVALID_ARGUMENT)
    key_id = secrets.token_hex(8)
    secret = secrets.token_urlsafe(32)
    record = ApiKeyRecord(
        key_id=key_id,
        name=_checked_name("name", name),
        tenant=_checked_name("tenant", tenant),
        roles=role_set,
        secret_sha256=_hash(secret),
        created_at=now,
    )
    store.add_api_key(record)
    return record, f"{KEY_PREFIX}{key_id}.{secret}"


_BAD_KEY = "missing, malformed, unknown or revoked API key"


def authenticate(store: KeyStore, authorization: str | None) -> Principal:
    """The principal of an ``Authorization: Bearer <key>`` header; UNAUTHENTICATED, alike for every failure."""
    scheme, _, token = (authorization or "").partition(" ")
    match = _TOKEN.match(token.strip()) if scheme.lower() == "bearer" else None
    if match is None:
        raise AuthError(_BAD_KEY)
    key_id, secret = match.groups()
    record = store.get_api_key(key_id)
    expected = record.secret_sha256 if record is not None else _hash("")
    if not hmac.compare_digest(expected, _hash(secret)) or record is None or record.revoked:
        raise AuthError(_BAD_KEY)
    return Principal(key_id=record.key_id, name=record.name, tenant=record.tenant, roles=frozenset(record.roles))


def require(principal: Principal, role: Role) -> None:
    """FORBIDDEN unless the principal holds ``role`` (or admin)."""
    if not principal.has(role):
        raise AuthError(f"this needs the {role.value!r} role", code=ErrorCode.FORBIDDEN, details={"role": role.value})
