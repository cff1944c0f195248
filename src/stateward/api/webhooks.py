"""Delivering the webhook outbox: signed POSTs with retries and exponential backoff.

The loop runs inside ``stateward serve`` (one thread per service process). Each round claims at most
``batch`` due deliveries (the bounded queue: nothing else is held in memory) and sends them one by one
with a timeout; several service processes share one outbox safely (a claim pushes a row's due time
ahead, PostgreSQL claims skip locked rows). A crash between sending and recording the result sends
that notification again later: delivery is at least once, and receivers deduplicate by the
``Stateward-Event-Id`` header (also the body's ``id``), which every retry repeats.

Every request carries ``Stateward-Timestamp`` (epoch seconds) and ``Stateward-Signature: v1=<hex>``,
the HMAC-SHA256 of ``"<timestamp>.<body>"`` under the subscription's secret; :func:`verify` is the
check a receiver makes (and refuses timestamps older than its tolerance, against replays).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import httpx

from stateward.core.errors import ErrorCode, UserError
from stateward.store.outbox import Delivery, WebhookStore

log = logging.getLogger("stateward.webhooks")

SIGNATURE_HEADER = "Stateward-Signature"
TIMESTAMP_HEADER = "Stateward-Timestamp"
EVENT_ID_HEADER = "Stateward-Event-Id"
EVENT_TYPE_HEADER = "Stateward-Event-Type"


@dataclass(frozen=True)
class DeliveryPolicy:
    """How the loop sends: batch size (the queue's bound), timeouts, backoff and when to give up."""

    batch: int = 50
    timeout_s: float = 5.0
    poll_s: float = 1.0
    claim_lease_s: float = 60.0
    base_backoff_s: float = 2.0
    max_backoff_s: float = 3600.0
    max_attempts: int = 15  # about a day of retries with the defaults

    def __post_init__(self) -> None:
        if self.batch < 1 or self.max_attempts < 1:
            raise UserError("batch and max_attempts must be at least 1", code=ErrorCode.CONFIGURATION_ERROR)
        if min(self.timeout_s, self.poll_s, self.claim_lease_s, self.base_backoff_s) <= 0:
            raise UserError("webhook delivery times must be positive", code=ErrorCode.CONFIGURATION_ERROR)
        if self.claim_lease_s <= self.timeout_s:
            raise UserError("the claim lease must outlast one request's timeout", code=ErrorCode.CONFIGURATION_ERROR)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> DeliveryPolicy:
        """``STATEWARD_WEBHOOK_POLL_S``, ``STATEWARD_WEBHOOK_BACKOFF_S`` and ``STATEWARD_WEBHOOK_MAX_ATTEMPTS``
        over the defaults."""
        env = os.environ if env is None else env
        fields: dict[str, float | int] = {}
        try:
            for name, field_name, kind in _ENV_FIELDS:
                raw = env.get(name, "").strip()
                if raw:
                    fields[field_name] = kind(raw)
        except ValueError:
            raise UserError(f"{name} must be a number", code=ErrorCode.CONFIGURATION_ERROR) from None
        return cls(**fields)  # type: ignore[arg-type]

    def backoff(self, attempts: int, jitter: float) -> float:
        """Seconds before attempt ``attempts + 1``: doubling from ``base_backoff_s``, capped, jittered ±20%."""
        delay = min(self.max_backoff_s, self.base_backoff_s * 2.0 ** max(0, attempts - 1))
        return delay * (0.8 + 0.4 * jitter)


_ENV_FIELDS: tuple[tuple[str, str, type[float] | type[int]], ...] = (
    ("STATEWARD_WEBHOOK_POLL_S", "poll_s", float),
    ("STATEWARD_WEBHOOK_BACKOFF_S", "base_backoff_s", float),
    ("STATEWARD_WEBHOOK_MAX_ATTEMPTS", "max_attempts", int),
)


def sign(secret: str, timestamp: int, body: str) -> str:
    """The signature header's value for ``body`` sent at ``timestamp``."""
    digest = hmac.new(secret.encode(), f"{timestamp}.{body}".encode(), hashlib.sha256).hexdigest()
    return f"v1={digest}"


def verify(secret: str, timestamp: str, signature: str, body: str, *, now: float, tolerance_s: float = 300) -> bool:
    """What a receiver checks: the signature matches and the timestamp is recent (constant-time compare)."""
    if not timestamp.isdigit() or abs(now - int(timestamp)) > tolerance_s:
        return False
    return hmac.compare_digest(sign(secret, int(timestamp), body), signature)


class WebhookDispatcher:
    """Claims due deliveries from the store's outbox and sends them; :meth:`run` loops until stopped."""

    def __init__(
        self,
        store: WebhookStore,
        policy: DeliveryPolicy | None = None,
        *,
        client: httpx.Client | None = None,
        clock: Callable[[], float] = time.time,
        jitter: Callable[[], float] = random.random,
    ):
        self.store = store
        self.policy = policy or DeliveryPolicy()
        self.client = client or httpx.Client(timeout=self.policy.timeout_s, follow_redirects=False)
        self.clock = clock
        self.jitter = jitter
        self.stop = threading.Event()

    def deliver_due(self) -> int:
        """One round: claim up to ``batch`` due deliveries and send each; how many succeeded."""
        claimed = self.store.claim_deliveries(self.clock(), self.policy.batch, self.policy.claim_lease_s)
        return sum(self._send(d) for d in claimed)

    def _send(self, delivery: Delivery) -> bool:
        timestamp = int(self.clock())
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "stateward-webhooks/1",
            EVENT_ID_HEADER: delivery.event_id,
            EVENT_TYPE_HEADER: delivery.kind.value,
            TIMESTAMP_HEADER: str(timestamp),
            SIGNATURE_HEADER: sign(delivery.secret, timestamp, delivery.body),
        }
        try:
            response = self.client.post(delivery.url, content=delivery.body.encode(), headers=headers)
            error = None if 200 <= response.status_code < 300 else f"HTTP {response.status_code}"
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}"
        if error is None:
            self.store.delivery_succeeded(delivery.delivery_id, self.clock())
            return True
        attempts = delivery.attempts + 1
        retry_at = (
            None
            if attempts >= self.policy.max_attempts
            else self.clock() + self.policy.backoff(attempts, self.jitter())
        )
        self.store.delivery_failed(delivery.delivery_id, error, retry_at)
        log.warning("webhook %s to %s failed (attempt %d): %s", delivery.event_id, delivery.url, attempts, error)
        return False

    def run(self) -> None:
        """Deliver until :attr:`stop` is set; an error of one round is logged, and the loop goes on."""
        while not self.stop.is_set():
            try:
                sent = self.deliver_due()
            except Exception:  # the loop must outlive a store hiccup; the rows stay in the outbox
                log.exception("webhook delivery round failed")
                sent = 0
            if sent < self.policy.batch:
                self.stop.wait(self.policy.poll_s)

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.run, name="stateward-webhooks", daemon=True)
        thread.start()
        return thread

    def close(self) -> None:
        self.stop.set()
        self.client.close()
