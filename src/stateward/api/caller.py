"""Who is calling a JSON route: the principal of the ``Authorization`` header, as a FastAPI dependency."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from stateward.api.identity import KEY_PREFIX, Principal, authenticate
from stateward.api.oidc import OidcVerifier
from stateward.store.keys import KeyStore

_bearer = HTTPBearer(
    auto_error=False,
    description="An API key from `stateward keys create`, or an OIDC token if an issuer is configured.",
)


def principal(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> Principal:
    """The caller, from the Authorization header only: an API key, else (with an issuer configured) a JWT."""
    header = None if credentials is None else f"{credentials.scheme} {credentials.credentials}"
    oidc: OidcVerifier | None = request.app.state.oidc
    if oidc is not None and credentials is not None and not credentials.credentials.startswith(KEY_PREFIX):
        return oidc.principal(credentials.credentials)
    keys: KeyStore = request.app.state.keys
    return authenticate(keys, header)


Caller = Annotated[Principal, Depends(principal)]
