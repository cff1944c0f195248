"""Named outcomes for everything that can go wrong with a model.

Two kinds are kept apart. A *provider failure* (the call itself failed: rate limit, outage, timeout,
bad key, prompt too long) raises a ``ModelCallError`` with a stable code; the Runtime fails the run by
that code, and ``RetryingModel`` retries only the retryable ones. A *rejected reply* (the call worked
but what came back is not exactly one decision) is not an exception: it is a ``ModelReply`` carrying a
``RejectionCode``, refused by the Runtime like any other malformed signal.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import Any, ClassVar

from stateward.core.errors import ErrorCode, RunError


class RejectionCode(StrEnum):
    """Why a provider reply that arrived intact is still not one decision."""

    MULTIPLE_TOOL_CALLS = ErrorCode.MULTIPLE_TOOL_CALLS.value
    UNKNOWN_TOOL = ErrorCode.UNKNOWN_TOOL.value
    INVALID_TOOL_ARGUMENTS = ErrorCode.INVALID_TOOL_ARGUMENTS.value
    EMPTY_REPLY = ErrorCode.EMPTY_REPLY.value
    THINKING_ONLY = ErrorCode.THINKING_ONLY.value
    REPLY_TRUNCATED = ErrorCode.REPLY_TRUNCATED.value  # the provider cut the reply at max_tokens
    MODEL_REFUSED = ErrorCode.MODEL_REFUSED.value
    REPLY_TOO_LARGE = ErrorCode.REPLY_TOO_LARGE.value  # over the provider's max_reply_bytes; refused unread
    DUPLICATE_KEY = ErrorCode.DUPLICATE_KEY.value  # tool-call arguments repeat a key (as the strict parser refuses it)
    NON_FINITE_NUMBER = ErrorCode.NON_FINITE_NUMBER.value  # NaN or an infinity in tool-call arguments


class ModelCallError(RunError):
    """A model call failed before producing a reply. ``retryable`` says whether trying again can help."""

    default_code: ClassVar[ErrorCode] = ErrorCode.PROVIDER_ERROR
    retryable: ClassVar[bool] = False

    def __init__(
        self,
        message: str,
        *,
        provider: str = "unknown",
        status_code: int | None = None,
        retry_after_s: float | None = None,
        code: ErrorCode | None = None,
        details: dict[str, Any] | None = None,
    ):
        extra = {"provider": provider, "status_code": status_code, "retry_after_s": retry_after_s}
        super().__init__(
            message, code=code, details={**{k: v for k, v in extra.items() if v is not None}, **(details or {})}
        )
        self.provider = provider
        self.status_code = status_code
        self.retry_after_s = retry_after_s


class RateLimitedError(ModelCallError):
    default_code = ErrorCode.RATE_LIMITED
    retryable = True


class ServiceUnavailableError(ModelCallError):
    """5xx, overload, refused or dropped connections: the provider may be back in a moment."""

    default_code = ErrorCode.SERVICE_UNAVAILABLE
    retryable = True


class ModelTimeoutError(ModelCallError):
    default_code = ErrorCode.TIMEOUT
    retryable = True


class AuthFailedError(ModelCallError):
    """401/403: retrying with the same key cannot help."""

    default_code = ErrorCode.AUTH_FAILED


class ContextLengthExceededError(ModelCallError):
    """The prompt does not fit the model's context window; the same request will never fit."""

    default_code = ErrorCode.CONTEXT_LENGTH_EXCEEDED


class ProviderError(ModelCallError):
    """Any other refusal by the provider (bad request, unknown model, ...)."""

    default_code = ErrorCode.PROVIDER_ERROR


class ReplayMissError(ModelCallError):
    """A ReplayModel was asked a request its recording does not contain: offline runs never guess."""

    default_code = ErrorCode.REPLAY_MISS


_CONTEXT_MARKERS = (
    "context_length_exceeded",
    "maximum context length",
    "context length",
    "context window",
    "exceed_context_size",
    "exceeds the available context",
    "prompt is too long",
    "too many tokens",
)


def looks_like_context_overflow(text: str) -> bool:
    low = text.lower()
    return any(marker in low for marker in _CONTEXT_MARKERS)


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds form); HTTP dates and junk give None."""
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def error_for_status(status: int, message: str, *, provider: str, retry_after_s: float | None = None) -> ModelCallError:
    """The named error for an HTTP status the provider answered with."""
    cls: type[ModelCallError]
    if status == 429:
        cls = RateLimitedError
    elif status in (401, 403):
        cls = AuthFailedError
    elif status == 408:
        cls = ModelTimeoutError
    elif status >= 500:
        cls = ServiceUnavailableError
    elif looks_like_context_overflow(message):
        cls = ContextLengthExceededError
    else:
        cls = ProviderError
    return cls(
        f"{provider} answered HTTP {status}: {message}",
        provider=provider,
        status_code=status,
        retry_after_s=retry_after_s,
    )


def scrub(text: str, secrets: Iterable[str | None]) -> str:
    """Remove secrets (API keys) from text that may end up in an event, a log or an error message."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "[redacted]")
    return text
