"""Exceptions a tool handler raises to say *how* it failed; the gateway turns each into a stable code.

Handlers raise these instead of returning error values so that the retry policy, the circuit breaker
and the side-effect journal can all decide from one classification. Any other exception is an
EXECUTION_ERROR.
"""

from __future__ import annotations

from stateward.core.errors import ErrorCode, ToolCallError


class ToolFailure(ToolCallError):
    """Base of the classified handler failures; ``code`` is one of ToolErrorCode's members."""

    default_code = ErrorCode.EXECUTION_ERROR


class ToolTimeout(ToolFailure):
    """The remote side did not answer in time; whether it acted is unknown."""

    default_code = ErrorCode.TIMEOUT


class ToolOutcomeUnknown(ToolFailure):
    """The request reached the remote side, which then went away (a server died mid-call): whether it
    acted is unknown. Treated like a timeout: a side effect is reconciled, never repeated blindly."""

    default_code = ErrorCode.UNKNOWN_OUTCOME


class RateLimited(ToolFailure):
    """The remote side refused for now; ``retry_after_s`` is its Retry-After, if it sent one."""

    default_code = ErrorCode.RATE_LIMITED

    def __init__(self, message: str = "rate limited", *, retry_after_s: float | None = None):
        super().__init__(message, details={"retry_after_s": retry_after_s})
        self.retry_after_s = retry_after_s


class ServiceUnavailable(ToolFailure):
    """The remote side refused the request without acting on it (e.g. HTTP 503)."""

    default_code = ErrorCode.SERVICE_UNAVAILABLE


class ToolPermissionDenied(ToolFailure):
    """The remote side refused the caller; retrying cannot help."""

    default_code = ErrorCode.PERMISSION_DENIED


class ToolInvalidArgument(ToolFailure):
    """The remote side rejected these arguments; retrying with the same ones cannot help."""

    default_code = ErrorCode.INVALID_ARGUMENT
