"""The HTTP service (``stateward serve``): authenticated principals, tenant-scoped routes under ``/v1``.

Needs the ``serve`` extra (FastAPI, uvicorn) only for :func:`create_app` and :func:`serve`; names are
imported on first use, so minting keys (``stateward keys``) needs neither.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stateward.api.app import ApiSettings, create_app
    from stateward.api.identity import Principal, Role, authenticate, mint_key
    from stateward.api.serve import serve

_EXPORTS = {
    "ApiSettings": "stateward.api.app",
    "Principal": "stateward.api.identity",
    "Role": "stateward.api.identity",
    "authenticate": "stateward.api.identity",
    "create_app": "stateward.api.app",
    "mint_key": "stateward.api.identity",
    "serve": "stateward.api.serve",
}
__all__ = ["ApiSettings", "Principal", "Role", "authenticate", "create_app", "mint_key", "serve"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'stateward.api' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
