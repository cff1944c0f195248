"""Every refusal as ``{"error": {"code", "message"}}`` with an HTTP status chosen by its code.

Unknown ids and another tenant's ids are the same 404 with the same code and message shape: nothing
tells a caller that a run exists in a tenant it cannot see.
"""

from __future__ import annotations

from typing import Any

from stateward.core.errors import StatewardError, StoreError, UserError

STATUS_BY_CODE: dict[str, int] = {
    "UNAUTHENTICATED": 401,
    "FORBIDDEN": 403,
    "ROLE_NOT_ALLOWED": 403,
    "RESUME_NOT_ALLOWED": 403,
    "CSRF_REJECTED": 403,
    "RUN_NOT_FOUND": 404,
    "UNKNOWN_REQUEST": 404,
    "ARTIFACT_NOT_FOUND": 404,
    "AGENT_NOT_REGISTERED": 404,
    "WEBHOOK_NOT_FOUND": 404,
    "WEBHOOK_LIMIT": 409,
    "REQUEST_ALREADY_ANSWERED": 409,
    "STALE_REQUEST": 409,
    "REQUEST_CLOSED": 409,
    "REQUEST_EXPIRED": 409,
    "RUN_ENDED": 409,
    "NOT_PAUSABLE": 409,
    "NOT_RESUMABLE": 409,
    "LEASE_HELD": 409,
    "CONCURRENT_UPDATE": 409,
    "ACTION_DIGEST_MISMATCH": 409,
    "IDEMPOTENCY_KEY_REUSED": 409,
    "RUN_EXISTS": 409,
    "WRONG_ANSWER_KIND": 422,
    "UNKNOWN_OPTION": 422,
    "ANSWERER_REQUIRED": 422,
    "INVALID_AGENT_PARAMS": 422,
    "MODEL_NOT_SUPPORTED": 422,
    "PARAM_NOT_ALLOWED": 422,
    "ANSWER_TOO_LARGE": 413,
    "PAYLOAD_TOO_LARGE": 413,
    "BODY_TOO_LARGE": 413,
    "STREAM_LIMIT": 429,
    "STREAM_LIMIT_PER_KEY": 429,
    "STORE_BUSY": 503,
    "STORE_UNAVAILABLE": 503,
    "AGENT_UNAVAILABLE": 503,
    "AGENT_VERSION_UNAVAILABLE": 409,
    "AGENT_MIGRATION_NOT_REGISTERED": 409,
    "MIGRATION_NOT_NEEDED": 409,
    "RUN_NOT_MIGRATABLE": 409,
    "FORK_POINT_UNAVAILABLE": 409,
}


def status_of(exc: StatewardError) -> int:
    """The HTTP status of a named error: by code, else 422 for bad input, 503 for the store, 409 for the rest."""
    found = STATUS_BY_CODE.get(exc.code)
    if found is not None:
        return found
    if isinstance(exc, UserError):
        return 422
    if isinstance(exc, StoreError):
        return 503
    return 409


def error_body(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}
