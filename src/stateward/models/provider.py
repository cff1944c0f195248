"""What both SDK-backed providers share: usage and cost, and turning SDK exceptions into named errors."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import ModuleType
from typing import Any

from stateward.models.base import Usage
from stateward.models.errors import (
    ModelCallError,
    ModelTimeoutError,
    ProviderError,
    ServiceUnavailableError,
    error_for_status,
    parse_retry_after,
    scrub,
)

# model name -> (USD per million input tokens, USD per million output tokens)
Prices = Mapping[str, tuple[float, float]]


def make_usage(
    *,
    model: str,
    input_tokens: int,
    output_tokens: int,
    latency_ms: float,
    request_id: str | None,
    prices: Prices | None,
) -> Usage:
    cost = None
    if prices is not None and model in prices:
        per_in, per_out = prices[model]
        cost = round(input_tokens * per_in / 1e6 + output_tokens * per_out / 1e6, 10)
    return Usage(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        latency_ms=round(latency_ms, 3),
        provider_request_id=request_id,
        cost_usd=cost,
    )


def _retry_after(headers: Any) -> float | None:
    if headers is None:
        return None
    seconds = parse_retry_after(headers.get("retry-after"))
    if seconds is None:
        millis = parse_retry_after(headers.get("retry-after-ms"))
        seconds = None if millis is None else millis / 1000
    return seconds


def classify_sdk_error(
    exc: Exception, sdk: ModuleType, *, provider: str, secrets: Iterable[str | None]
) -> ModelCallError:
    """The named ModelCallError for an exception of the ``openai`` or ``anthropic`` SDK (same hierarchy).

    Every message is scrubbed of the API key: providers sometimes echo what they were sent.
    """
    secrets = tuple(secrets)
    if isinstance(exc, sdk.APITimeoutError):
        return ModelTimeoutError(f"{provider} did not answer in time", provider=provider)
    if isinstance(exc, sdk.APIConnectionError):
        cause = exc.__cause__ or exc.__context__
        detail = f": {type(cause).__name__}" if cause is not None else ""
        return ServiceUnavailableError(f"cannot reach {provider}{detail}", provider=provider)
    if isinstance(exc, sdk.APIStatusError):
        body = getattr(exc, "body", None)
        message = scrub(f"{getattr(exc, 'message', '')} {body if body is not None else ''}".strip(), secrets)
        response = getattr(exc, "response", None)
        err = error_for_status(
            int(exc.status_code),
            message[:1000],
            provider=provider,
            retry_after_s=_retry_after(getattr(response, "headers", None)),
        )
        request_id = getattr(exc, "request_id", None)
        if isinstance(request_id, str):
            err.details["provider_request_id"] = request_id
        return err
    return ProviderError(
        scrub(f"{provider} call failed: {type(exc).__name__}: {exc}", secrets)[:1000], provider=provider
    )
