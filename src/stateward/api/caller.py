"""Who is calling a JSON route: the principal of the ``Authorization`` header, as a FastAPI dependency."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from stateward.api.identity import Principal, authenticate
from stateward.store.keys import KeyStore

_bearer = HTTPBearer(auto_error=False, description="An API key from `stateward keys create`.")


def principal(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> Principal:
    """The caller, from the Authorization header only."""
    header = None if credentials is None else f"{credentials.scheme} {credentials.credentials}"
    keys: KeyStore = request.app.state.keys
    return authenticate(keys, header)


Caller = Annotated[Principal, Depends(principal)]
