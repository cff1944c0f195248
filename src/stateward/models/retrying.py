"""Retrying a model call, only when trying again can help, and never silently.

A failed call may still have reached the provider (and cost money), so ``on_attempt`` hears about every
failed attempt *before* the next one is made; the Runtime can record it in the same run.

Over a model with ``acomplete`` the wrapper has one too: the same retry loop, run in a bridge
(``stateward.core.bridge``) so the inner call is awaited natively and the backoff is ``asyncio.sleep``.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, ConfigDict

from stateward.core import bridge
from stateward.models.base import AnyModel, AsyncModel, ModelReply, ModelRequest, complete, model_attempt_sink
from stateward.models.errors import ModelCallError


class AttemptRecord(BaseModel):
    """One failed attempt: what failed, and what happens next (``will_retry``, after ``sleep_s``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    attempt: int
    max_attempts: int
    code: str
    message: str
    retryable: bool
    will_retry: bool
    retry_after_s: float | None = None
    sleep_s: float = 0.0


class RetryingModel:
    """Wraps a Model; retries RATE_LIMITED / SERVICE_UNAVAILABLE / TIMEOUT with backoff, honours Retry-After.

    ``sleep`` waits out a backoff; the default, ``stateward.core.bridge.sleep``, is ``time.sleep``
    outside a bridge and ``asyncio.sleep`` inside one. Over an inner model with ``acomplete`` the
    wrapper is an AsyncModel too, whose ``acomplete`` runs the same retry loop on the caller's loop.
    """

    def __init__(
        self,
        inner: AnyModel,
        max_attempts: int = 3,
        *,
        sleep: Callable[[float], None] = bridge.sleep,
        on_attempt: Callable[[AttemptRecord], None] | None = None,
        base_delay_s: float = 1.0,
        max_delay_s: float = 30.0,
    ):
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self.inner = inner
        self.name = inner.name
        self.max_attempts = max_attempts
        self._sleep = sleep
        self._on_attempt = on_attempt
        self.base_delay_s = base_delay_s
        self.max_delay_s = max_delay_s
        if isinstance(inner, AsyncModel):  # only then: an AsyncModel is what has an ``acomplete``
            self.acomplete = self._acomplete

    async def _acomplete(self, request: ModelRequest) -> ModelReply:
        """``complete``'s loop in a bridge: the inner ``acomplete`` and the backoff are awaited here."""
        return await bridge.run_bridged(self.complete, request)

    def delay_for(self, attempt: int, error: ModelCallError) -> float:
        """Exponential backoff, but never shorter than the provider's Retry-After."""
        backoff = min(self.max_delay_s, self.base_delay_s * 2 ** (attempt - 1))
        return float(max(backoff, error.retry_after_s or 0.0))

    def complete(self, request: ModelRequest) -> ModelReply:
        """Call the inner model, retrying retryable failures with backoff up to ``max_attempts``."""
        attempt = 1
        while True:
            try:
                return complete(self.inner, request)
            except ModelCallError as exc:
                will_retry = exc.retryable and attempt < self.max_attempts
                delay = self.delay_for(attempt, exc) if will_retry else 0.0
                record = AttemptRecord(
                    model=self.name,
                    attempt=attempt,
                    max_attempts=self.max_attempts,
                    code=exc.code,
                    message=exc.message,
                    retryable=exc.retryable,
                    will_retry=will_retry,
                    retry_after_s=exc.retry_after_s,
                    sleep_s=delay,
                )
                if self._on_attempt is not None:
                    self._on_attempt(record)
                sink = model_attempt_sink.get()
                if sink is not None:
                    sink(record.model_dump(mode="json"))
                if not will_retry:
                    exc.details["attempts"] = attempt
                    raise
                self._sleep(delay)
                attempt += 1
