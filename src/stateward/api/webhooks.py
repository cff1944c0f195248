"""Delivering the webhook outbox: signed POSTs with retries and exponential backoff.

The loop runs inside ``stateward serve`` (one thread per service process). Each round claims at most
``batch`` due deliveries (the bounded queue: nothing else is held in memory) and sends them one by one
with a timeout; several service processes share one outbox safely (a claim pushes a row's due time
ahead, PostgreSQL claims skip locked rows). A crash between sending and recording the result sends
that notification again later: delivery is at least once, and receivers deduplicate by the
``Stateward-Event-Id`` header (also the body's ``id``), which every retry repeats.

Where a delivery may go is :mod:`stateward.api.webhook_targets`' to say: the URL is checked again before
each send (DNS resolved now) and the request goes to the checked address, the name kept as Host and as
the TLS server name. Redirects are not followed. Failures are recorded as ``<CODE>: <message>`` with a
stable code (``WEBHOOK_CONNECT_FAILED``, ``WEBHOOK_TIMEOUT``, ...) and no address or port; one delivery's
failure, whatever it is, never stops the round.

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
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import httpx

from stateward.api.webhook_targets import TargetPolicy, WebhookTargetError, check_target
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


class DeliveryFailure(Exception):
    """Why one delivery failed, as a stable code and a message without addresses or ports (what the tenant
    sees in ``last_error``); ``final`` ones are not retried; ``detail`` is for the operator's log only."""

    def __init__(self, code: ErrorCode, message: str, *, final: bool = False, detail: str = ""):
        super().__init__(message)
        self.code = code
        self.message = message
        self.final = final
        self.detail = detail

    @property
    def reported(self) -> str:
        return f"{self.code.value}: {self.message}"


def _transport_failure(exc: httpx.HTTPError) -> DeliveryFailure:
    detail = f"{type(exc).__name__}: {exc!r}"
    if isinstance(exc, httpx.TimeoutException):
        return DeliveryFailure(ErrorCode.WEBHOOK_TIMEOUT, "the receiver did not answer in time", detail=detail)
    if isinstance(exc, httpx.ConnectError) and _is_tls(exc):
        return DeliveryFailure(ErrorCode.WEBHOOK_TLS_FAILED, "the TLS handshake failed", detail=detail)
    if isinstance(exc, httpx.ConnectError):
        return DeliveryFailure(ErrorCode.WEBHOOK_CONNECT_FAILED, "the receiver could not be reached", detail=detail)
    return DeliveryFailure(
        ErrorCode.WEBHOOK_CONNECT_FAILED, "the connection to the receiver failed mid-request", detail=detail
    )


def _is_tls(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLError) or "SSL" in type(seen).__name__ or "CERTIFICATE" in str(seen).upper():
            return True
        seen = seen.__cause__ or seen.__context__
    return False


class WebhookDispatcher:
    """Claims due deliveries from the store's outbox and sends them; :meth:`run` loops until stopped.

    Each delivery's URL is checked again (``targets``: the same rules as at subscription, DNS resolved
    now) and the request goes to the address that was checked, with the URL's host as Host header and
    TLS name; redirects are not followed, and the environment's proxies are not used. A delivery that
    fails in any way is recorded as failed with its reason and the round goes on with the next one.
    """

    def __init__(
        self,
        store: WebhookStore,
        policy: DeliveryPolicy | None = None,
        *,
        targets: TargetPolicy | None = None,
        client: httpx.Client | None = None,
        clock: Callable[[], float] = time.time,
        jitter: Callable[[], float] = random.random,
    ):
        self.store = store
        self.policy = policy or DeliveryPolicy()
        self.targets = targets or TargetPolicy()
        self.client = client or httpx.Client(timeout=self.policy.timeout_s, follow_redirects=False, trust_env=False)
        self.clock = clock
        self.jitter = jitter
        self.stop = threading.Event()

    def deliver_due(self) -> int:
        """One round: claim up to ``batch`` due deliveries and send each; how many succeeded. No delivery's
        failure stops the round: it is recorded against that delivery alone."""
        claimed = self.store.claim_deliveries(self.clock(), self.policy.batch, self.policy.claim_lease_s)
        return sum(self._one(d) for d in claimed)

    def _one(self, delivery: Delivery) -> bool:
        try:
            self._send(delivery)
        except DeliveryFailure as failure:
            self._failed(delivery, failure)
            return False
        except Exception as exc:  # a row this code did not foresee: fail it, never the round
            self._failed(
                delivery,
                DeliveryFailure(
                    ErrorCode.WEBHOOK_DELIVERY_ERROR, "the delivery could not be made", final=True, detail=repr(exc)
                ),
            )
            return False
        try:
            self.store.delivery_succeeded(delivery.delivery_id, self.clock())
        except Exception:
            log.exception("recording webhook delivery %r as delivered failed", delivery.delivery_id)
            return False
        return True

    def _send(self, delivery: Delivery) -> None:
        try:
            target = check_target(delivery.url, self.targets)
        except WebhookTargetError as exc:
            final = exc.code is not ErrorCode.WEBHOOK_DNS_FAILED
            raise DeliveryFailure(exc.code, exc.message, final=final) from None
        timestamp = int(self.clock())
        headers = {
            "Host": target.host_header,
            "Content-Type": "application/json",
            "User-Agent": "stateward-webhooks/1",
            EVENT_ID_HEADER: delivery.event_id,
            EVENT_TYPE_HEADER: delivery.kind.value,
            TIMESTAMP_HEADER: str(timestamp),
            SIGNATURE_HEADER: sign(delivery.secret, timestamp, delivery.body),
        }
        # The connection goes to the checked address; Host and SNI (and so the certificate check) keep the name.
        pinned = httpx.URL(target.url).copy_with(host=str(target.address))
        extensions = {"sni_hostname": target.host} if target.scheme == "https" and target.is_name else {}
        try:
            response = self.client.post(pinned, content=delivery.body.encode(), headers=headers, extensions=extensions)
        except httpx.HTTPError as exc:
            raise _transport_failure(exc) from None
        status = response.status_code
        if 300 <= status < 400:
            raise DeliveryFailure(ErrorCode.WEBHOOK_REDIRECT_REFUSED, f"the receiver redirected (HTTP {status})")
        if not 200 <= status < 300:
            raise DeliveryFailure(ErrorCode.WEBHOOK_HTTP_STATUS, f"the receiver answered HTTP {status}")

    def _failed(self, delivery: Delivery, failure: DeliveryFailure) -> None:
        attempts = delivery.attempts + 1
        retry_at = (
            None
            if failure.final or attempts >= self.policy.max_attempts
            else self.clock() + self.policy.backoff(attempts, self.jitter())
        )
        log.warning(
            "webhook delivery %r (subscription %r) failed (attempt %d%s): %s %s",
            delivery.delivery_id,
            delivery.subscription_id,
            attempts,
            "" if retry_at is not None else ", given up",
            failure.code.value,
            failure.detail,
        )
        try:
            self.store.delivery_failed(delivery.delivery_id, failure.reported, retry_at)
        except Exception:  # the store refused even the failure: the lease lapses and it is tried again
            log.exception("recording webhook delivery %r as failed failed", delivery.delivery_id)

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
