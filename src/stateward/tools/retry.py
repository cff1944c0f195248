"""Error classification and the retry policy: which failure may be tried again, and after how long.

Kept free of I/O: the gateway injects ``sleep`` so tests record waits instead of sleeping.
"""

from __future__ import annotations

from concurrent.futures import TimeoutError as FuturesTimeout

from pydantic import BaseModel, ConfigDict, Field

from .errors import RateLimited, ToolFailure
from .types import ToolErrorCode

# Failure classes that count towards opening a circuit (the service looks unhealthy).
BREAKER_FAILURES = frozenset(
    {
        ToolErrorCode.SERVICE_UNAVAILABLE,
        ToolErrorCode.TIMEOUT,
        ToolErrorCode.EXECUTION_ERROR,
        ToolErrorCode.UNKNOWN_OUTCOME,
    }
)
# The handler may have acted but did not say: a side effect goes to reconciliation, never to a retry.
OUTCOME_UNKNOWN = frozenset({ToolErrorCode.TIMEOUT, ToolErrorCode.UNKNOWN_OUTCOME})


class RetryPolicy(BaseModel):
    """Bounds on retrying one call. ``max_attempts`` includes the first attempt."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_attempts: int = Field(default=3, ge=1)
    backoff_base_s: float = Field(default=0.2, ge=0)
    backoff_cap_s: float = Field(default=5.0, ge=0)
    honour_retry_after: bool = True
    max_retry_after_s: float = Field(default=60.0, ge=0)  # a longer Retry-After ends the call instead


def classify(exc: BaseException) -> ToolErrorCode:
    """Map an exception raised by a handler to its failure class."""
    if isinstance(exc, ToolFailure):
        try:
            return ToolErrorCode(exc.code)
        except ValueError:
            return ToolErrorCode.EXECUTION_ERROR
    if isinstance(exc, TimeoutError | FuturesTimeout):
        return ToolErrorCode.TIMEOUT
    return ToolErrorCode.EXECUTION_ERROR


def is_retryable(code: ToolErrorCode, *, side_effect: bool) -> bool:
    """RATE_LIMITED and SERVICE_UNAVAILABLE are refusals without action: safe to repeat.

    A TIMEOUT (or an UNKNOWN_OUTCOME) is repeated only for side-effect-free tools; a side-effecting one goes to
    reconciliation instead. Everything else is final (PERMISSION_DENIED, INVALID_ARGUMENT,
    SCHEMA_MISMATCH, EXECUTION_ERROR, ...).
    """
    if code in (ToolErrorCode.RATE_LIMITED, ToolErrorCode.SERVICE_UNAVAILABLE):
        return True
    return code in OUTCOME_UNKNOWN and not side_effect


def backoff_delay(policy: RetryPolicy, retry_number: int, exc: BaseException | None = None) -> float | None:
    """Seconds to wait before retry ``retry_number`` (1-based), or None if the wait is too long.

    Exponential (base * 2**(n-1), capped); a Retry-After from the server wins when it is longer.
    """
    delay = min(policy.backoff_cap_s, policy.backoff_base_s * 2.0 ** (retry_number - 1))
    if policy.honour_retry_after and isinstance(exc, RateLimited) and exc.retry_after_s is not None:
        if exc.retry_after_s > policy.max_retry_after_s:
            return None
        delay = max(delay, exc.retry_after_s)
    return delay
