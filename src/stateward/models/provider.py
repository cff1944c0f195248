"""What both SDK-backed providers share: usage and cost, turning SDK exceptions into named errors, and
their async clients (one per event loop)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping
from types import ModuleType
from typing import Any, Generic, Protocol, TypeVar

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


class _AsyncClient(Protocol):
    def close(self) -> Awaitable[None]: ...


C = TypeVar("C", bound=_AsyncClient)


class PerLoopClient(Generic[C]):
    """An SDK's async client, made on first use for the running event loop.

    An async client's pooled connections belong to the loop they were opened on, so a call on another
    loop (a second ``asyncio.run``) gets a fresh client; the previous one is left to the SDK's own
    finalizer.
    """

    def __init__(self, make: Callable[[], C]):
        self._make = make
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: C | None = None

    def get(self) -> C:
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._client is None or self._loop is not loop:
                self._client, self._loop = self._make(), loop
            return self._client

    async def aclose(self) -> None:
        """Close the client of the running loop, if one was made."""
        loop = asyncio.get_running_loop()
        with self._lock:
            client = self._client if self._loop is loop else None
            if client is not None:
                self._client, self._loop = None, None
        if client is not None:
            await client.close()
