"""Exceptions a tool handler raises to say *how* it failed; the gateway turns each into a stable code.

Handlers raise these instead of returning error values so that the retry policy, the circuit breaker
and the side-effect journal can all decide from one classification. Any other exception is an
EXECUTION_ERROR.
"""

from __future__ import annotations

from stateward.core.errors import ToolCallError

from .types import ToolErrorCode


class ToolFailure(ToolCallError):
    """Base of the classified handler failures; ``code`` is a ToolErrorCode value."""

    default_code = ToolErrorCode.EXECUTION_ERROR.value


class ToolTimeout(ToolFailure):
    """The remote side did not answer in time; whether it acted is unknown."""

    default_code = ToolErrorCode.TIMEOUT.value


class ToolOutcomeUnknown(ToolFailure):
    """The request reached the remote side, which then went away (a server died mid-call): whether it
    acted is unknown. Treated like a timeout: a side effect is reconciled, never repeated blindly."""

    default_code = ToolErrorCode.UNKNOWN_OUTCOME.value


class RateLimited(ToolFailure):
    """The remote side refused for now; ``retry_after_s`` is its Retry-After, if it sent one."""

    default_code = ToolErrorCode.RATE_LIMITED.value

    def __init__(self, message: str = "rate limited", *, retry_after_s: float | None = None):
        super().__init__(message, details={"retry_after_s": retry_after_s})
        self.retry_after_s = retry_after_s


class ServiceUnavailable(ToolFailure):
    """The remote side refused the request without acting on it (e.g. HTTP 503)."""

    default_code = ToolErrorCode.SERVICE_UNAVAILABLE.value


class ToolPermissionDenied(ToolFailure):
    """The remote side refused the caller; retrying cannot help."""

    default_code = ToolErrorCode.PERMISSION_DENIED.value


class ToolInvalidArgument(ToolFailure):
    """The remote side rejected these arguments; retrying with the same ones cannot help."""

    default_code = ToolErrorCode.INVALID_ARGUMENT.value
