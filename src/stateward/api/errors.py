"""Every refusal as ``{"error": {"code", "message"}}`` with an HTTP status chosen by its code.

Unknown ids and another tenant's ids are the same 404 with the same code and message shape: nothing
tells a caller that a run exists in a tenant it cannot see.
"""

from __future__ import annotations

from typing import Any

from stateward.core.errors import ErrorCode, StatewardError, StoreError, UserError

STATUS_BY_CODE: dict[ErrorCode, int] = {
    ErrorCode.UNAUTHENTICATED: 401,
    ErrorCode.FORBIDDEN: 403,
    ErrorCode.ROLE_NOT_ALLOWED: 403,
    ErrorCode.RESUME_NOT_ALLOWED: 403,
    ErrorCode.CSRF_REJECTED: 403,
    ErrorCode.RUN_NOT_FOUND: 404,
    ErrorCode.UNKNOWN_REQUEST: 404,
    ErrorCode.ARTIFACT_NOT_FOUND: 404,
    ErrorCode.AGENT_NOT_REGISTERED: 404,
    ErrorCode.WEBHOOK_NOT_FOUND: 404,
    ErrorCode.WEBHOOK_LIMIT: 409,
    ErrorCode.REQUEST_ALREADY_ANSWERED: 409,
    ErrorCode.STALE_REQUEST: 409,
    ErrorCode.REQUEST_CLOSED: 409,
    ErrorCode.REQUEST_EXPIRED: 409,
    ErrorCode.RUN_ENDED: 409,
    ErrorCode.NOT_PAUSABLE: 409,
    ErrorCode.NOT_RESUMABLE: 409,
    ErrorCode.LEASE_HELD: 409,
    ErrorCode.CONCURRENT_UPDATE: 409,
    ErrorCode.ACTION_DIGEST_MISMATCH: 409,
    ErrorCode.IDEMPOTENCY_KEY_REUSED: 409,
    ErrorCode.RUN_EXISTS: 409,
    ErrorCode.WRONG_ANSWER_KIND: 422,
    ErrorCode.UNKNOWN_OPTION: 422,
    ErrorCode.ANSWERER_REQUIRED: 422,
    ErrorCode.INVALID_AGENT_PARAMS: 422,
    ErrorCode.MODEL_NOT_SUPPORTED: 422,
    ErrorCode.PARAM_NOT_ALLOWED: 422,
    ErrorCode.ANSWER_TOO_LARGE: 413,
    ErrorCode.PAYLOAD_TOO_LARGE: 413,
    ErrorCode.BODY_TOO_LARGE: 413,
    ErrorCode.STREAM_LIMIT: 429,
    ErrorCode.STREAM_LIMIT_PER_KEY: 429,
    ErrorCode.STORE_BUSY: 503,
    ErrorCode.STORE_UNAVAILABLE: 503,
    ErrorCode.AGENT_UNAVAILABLE: 503,
    ErrorCode.AGENT_VERSION_UNAVAILABLE: 409,
    ErrorCode.AGENT_MIGRATION_NOT_REGISTERED: 409,
    ErrorCode.MIGRATION_NOT_NEEDED: 409,
    ErrorCode.RUN_NOT_MIGRATABLE: 409,
    ErrorCode.FORK_POINT_UNAVAILABLE: 409,
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
