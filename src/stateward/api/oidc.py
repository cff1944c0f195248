"""OIDC bearer tokens: JWTs verified against a configured issuer's JWKS, made into the same Principal an
API key makes (tenant, subject, roles), so every answer, pause, resume and cancel records it alike.

Optional: without an issuer configured only API keys are accepted. A token must be signed by a key of
the issuer's JWKS (fetched over HTTP and cached; a key id not in the cache refetches it), with an
asymmetric algorithm from the allowed list (never ``none`` or HMAC), for the configured audience and
issuer, and not expired (a small leeway for clock skew). The tenant and roles come from claims
(``tenant`` and ``roles`` by default); a token without a tenant is refused.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jwt

from stateward.api.identity import OIDC_KEY_ID, AuthError, Principal
from stateward.core.errors import ErrorCode, UserError
from stateward.core.run_inputs import NAME_PATTERN as _NAME

_SUBJECT = re.compile(r"^[\x21-\x7e]{1,200}$")
_BAD_TOKEN = "invalid, expired or unverifiable bearer token"
MAX_ROLES = 50


@dataclass(frozen=True)
class OidcSettings:
    """The issuer whose tokens the service accepts, and where its claims keep tenant and roles."""

    issuer: str
    audience: str
    jwks_url: str
    tenant_claim: str = "tenant"
    roles_claim: str = "roles"
    algorithms: tuple[str, ...] = ("RS256", "ES256", "PS256", "EdDSA")
    leeway_s: float = 30.0
    jwks_timeout_s: float = 5.0
    jwks_cache_s: int = 300

    def __post_init__(self) -> None:
        if not (self.issuer and self.audience and self.jwks_url.startswith(("https://", "http://"))):
            raise UserError(
                "OIDC needs an issuer, an audience and an http(s) JWKS URL", code=ErrorCode.CONFIGURATION_ERROR
            )
        if any(a.upper().startswith("HS") or a.lower() == "none" for a in self.algorithms):
            raise UserError(
                "OIDC tokens must be signed with an asymmetric algorithm", code=ErrorCode.CONFIGURATION_ERROR
            )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> OidcSettings | None:
        """``STATEWARD_OIDC_ISSUER``, ``_AUDIENCE``, ``_JWKS_URL`` (default: the issuer's
        ``/.well-known/jwks.json``), ``_TENANT_CLAIM``, ``_ROLES_CLAIM``; None when no issuer is set."""
        env = os.environ if env is None else env
        issuer = env.get("STATEWARD_OIDC_ISSUER", "").strip()
        if not issuer:
            return None
        return cls(
            issuer=issuer,
            audience=env.get("STATEWARD_OIDC_AUDIENCE", "").strip(),
            jwks_url=env.get("STATEWARD_OIDC_JWKS_URL", "").strip() or f"{issuer.rstrip('/')}/.well-known/jwks.json",
            tenant_claim=env.get("STATEWARD_OIDC_TENANT_CLAIM", "tenant"),
            roles_claim=env.get("STATEWARD_OIDC_ROLES_CLAIM", "roles"),
        )


class OidcVerifier:
    """Verifies bearer JWTs for one issuer; the JWKS is fetched on first use and cached."""

    def __init__(self, settings: OidcSettings):
        self.settings = settings
        self._jwks = jwt.PyJWKClient(
            settings.jwks_url, cache_keys=True, lifespan=settings.jwks_cache_s, timeout=int(settings.jwks_timeout_s)
        )

    def principal(self, token: str) -> Principal:
        """The token's principal; UNAUTHENTICATED, alike for every failure."""
        s = self.settings
        try:
            key = self._jwks.get_signing_key_from_jwt(token)
            claims: dict[str, Any] = jwt.decode(
                token,
                key.key,
                algorithms=list(s.algorithms),
                audience=s.audience,
                issuer=s.issuer,
                leeway=s.leeway_s,
                options={"require": ["exp", "iss", "aud", "sub"]},
            )
        except (jwt.PyJWTError, ValueError):
            raise AuthError(_BAD_TOKEN) from None
        return _principal_of(claims, s)


def _principal_of(claims: Mapping[str, Any], s: OidcSettings) -> Principal:
    subject, tenant, roles = claims.get("sub"), claims.get(s.tenant_claim), claims.get(s.roles_claim, [])
    if isinstance(roles, str):
        roles = roles.split()
    if (
        not isinstance(subject, str)
        or not _SUBJECT.match(subject)
        or not isinstance(tenant, str)
        or not _NAME.match(tenant)
        or not isinstance(roles, list)
        or len(roles) > MAX_ROLES
        or not all(isinstance(r, str) and _NAME.match(r) for r in roles)
    ):
        raise AuthError(_BAD_TOKEN)
    return Principal(key_id=OIDC_KEY_ID, name=subject, tenant=tenant, roles=frozenset(roles))
