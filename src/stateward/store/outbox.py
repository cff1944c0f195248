"""Webhooks in the store: per-tenant subscriptions and a durable outbox of deliveries (schema 5).

A step that makes a run wait, end or need reconciliation writes one delivery row per matching
subscription of the run's tenant *in the same transaction as the step* (see :func:`enqueue`, called
by both stores' ``commit_step``): if the step is committed, so are its notifications; if a process dies
after the commit, the rows are still there for the next delivery loop. Each notification has a stable
``event_id`` (``<run_id>:<seq>`` of the event that caused it) that every retry repeats, so a receiver
deduplicates at-least-once delivery by it.

The SQL here is shared by both stores (``?`` placeholders, rewritten for psycopg); times are epoch
seconds (float) in both, so due-ness compares alike.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from stateward.core.errors import ErrorCode, StoreError
from stateward.core.events import EventType, NewEvent
from stateward.core.state import RequestKind, RunState
from stateward.core.status import RunStatus

MAX_WEBHOOKS_PER_TENANT = 20
MAX_ERROR_CHARS = 300


class NoticeKind(StrEnum):
    """What a subscription is told about."""

    WAITING = "run.waiting"  # the run waits for a person (an approval, an input, a handoff)
    ENDED = "run.ended"  # the run reached a terminal status
    NEEDS_RECONCILIATION = "run.needs_reconciliation"  # a side effect's outcome is unknown: a person must say


class DeliveryStatus(StrEnum):
    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"  # its attempts are spent
    CANCELLED = "cancelled"  # its subscription was removed


class WebhookSubscription(BaseModel):
    """Where a tenant's notifications go and the secret their signatures are made with."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    subscription_id: str
    tenant: str
    url: str
    secret: str = Field(repr=False)
    kinds: tuple[NoticeKind, ...]
    created_at: float


class Delivery(BaseModel):
    """One notification to one subscription, with its retry state; ``url`` and ``secret`` are the
    subscription's, joined in when the delivery loop claims it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    delivery_id: str
    subscription_id: str
    event_id: str
    tenant: str
    run_id: str
    kind: NoticeKind
    body: str
    status: DeliveryStatus
    attempts: int
    next_attempt_at: float
    delivered_at: float | None = None
    last_error: str | None = None
    url: str = ""
    secret: str = Field(default="", repr=False)


class Notice(BaseModel):
    """A notification a step causes, before it is fanned out to subscriptions."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    event_id: str
    kind: NoticeKind
    body: str


def notices_of(state: RunState, expected_seq: int, events: Sequence[NewEvent]) -> list[Notice]:
    """The notifications a step's events cause: a wait recorded, a terminal transition."""
    found: list[Notice] = []
    for offset, event in enumerate(events, start=1):
        if event.type is EventType.PENDING_RECORDED:
            kind = (
                NoticeKind.NEEDS_RECONCILIATION
                if event.payload.get("kind") == RequestKind.RECONCILIATION.value
                else NoticeKind.WAITING
            )
            extra: dict[str, Any] = {"request_id": event.payload.get("pending_request_id")}
            asked = state.pending
            if asked is not None and asked.request_id == extra["request_id"]:
                # Who may answer, and until when: a receiver routes the request to that role.
                extra["approver_role"] = asked.approver_role
                extra["expires_at"] = None if asked.expires_at is None else asked.expires_at.isoformat()
        elif event.type is EventType.STATE_TRANSITION and RunStatus(event.payload["state_after"]).is_terminal:
            kind, extra = NoticeKind.ENDED, {"terminal_reason": event.payload.get("reason")}
        else:
            continue
        seq = expected_seq + offset
        event_id = f"{state.run_id}:{seq}"
        body = {
            "id": event_id,
            "type": kind.value,
            "run_id": state.run_id,
            "tenant": state.tenant,
            "agent": state.agent.name,
            "seq": seq,
            "status": state.status.value,
            **extra,
        }
        found.append(Notice(event_id=event_id, kind=kind, body=json.dumps(body, separators=(",", ":"))))
    return found


@runtime_checkable
class WebhookStore(Protocol):
    """The outbox side of a store (schema 5); both stores implement it, held to one conformance suite."""

    def add_webhook(self, subscription: WebhookSubscription) -> None:
        """Insert; WEBHOOK_LIMIT past ``MAX_WEBHOOKS_PER_TENANT`` for the tenant."""
        ...

    def list_webhooks(self, tenant: str) -> list[WebhookSubscription]: ...

    def remove_webhook(self, tenant: str, subscription_id: str) -> bool:
        """Remove the tenant's subscription (its pending deliveries are cancelled); False if there is none."""
        ...

    def claim_deliveries(self, now: float, limit: int, lease_s: float) -> list[Delivery]:
        """Up to ``limit`` pending deliveries due by ``now``, oldest due first, each pushed ``lease_s`` into the
        future so that another loop does not take it while this one sends it."""
        ...

    def record_notices(self, state: RunState, notices: list[Notice], now: float) -> int:
        """The deliveries ``notices`` cause, in a transaction of their own, for a backend whose steps are not this
        store's (Temporal): a notice recorded before is not recorded again. The number of deliveries it wrote."""
        ...

    def delivery_succeeded(self, delivery_id: str, at: float) -> None: ...

    def delivery_failed(self, delivery_id: str, error: str, retry_at: float | None) -> None:
        """Count the attempt; retry at ``retry_at``, or mark it FAILED when None."""
        ...

    def list_deliveries(self, tenant: str, limit: int = 100) -> list[Delivery]:
        """The tenant's deliveries, newest first (for operators and tests)."""
        ...


# -- SQL shared by both stores ---------------------------------------------------------------------
SUBSCRIPTION_COLUMNS = "subscription_id, tenant, url, secret, kinds, created_at"
DELIVERY_COLUMNS = (
    "d.delivery_id, d.subscription_id, d.event_id, d.tenant, d.run_id, d.kind, d.body, d.status, d.attempts,"
    " d.next_attempt_at, d.delivered_at, d.last_error"
)
SELECT_SUBSCRIBERS = "SELECT subscription_id, kinds FROM webhooks WHERE tenant=?"
INSERT_DELIVERY = (
    "INSERT INTO webhook_deliveries(delivery_id, subscription_id, event_id, tenant, run_id, kind, body, status,"
    " attempts, next_attempt_at, created_at) VALUES (?,?,?,?,?,?,?,'pending',0,?,?)"
)


class Cursor(Protocol):
    def execute(self, sql: Any, params: Any = ...) -> Any: ...


def sql_for(placeholder: str, sql: str) -> str:
    return sql if placeholder == "?" else sql.replace("?", placeholder)


def enqueue(
    cur: Cursor, placeholder: str, state: RunState, notices: list[Notice], now: float, *, again: bool = False
) -> int:
    """Write one delivery per (notice, subscription that wants its kind) inside the caller's transaction.

    ``again``: the notices may have been written before (a retried write from outside the step's transaction):
    a delivery already there, under the same id, is left as it is, never doubled."""
    rows = cur.execute(sql_for(placeholder, SELECT_SUBSCRIBERS), (state.tenant,)).fetchall()
    if not rows:
        return 0
    insert = sql_for(placeholder, INSERT_DELIVERY + (" ON CONFLICT (delivery_id) DO NOTHING" if again else ""))
    written = 0
    for subscription_id, kinds in rows:
        wanted = set(json.loads(kinds))
        for notice in notices:
            if notice.kind.value in wanted:
                delivery_id = f"{notice.event_id}:{subscription_id}"
                done = cur.execute(
                    insert,
                    (
                        delivery_id,
                        subscription_id,
                        notice.event_id,
                        state.tenant,
                        state.run_id,
                        notice.kind.value,
                        notice.body,
                        now,
                        now,
                    ),
                )
                written += done.rowcount if again else 1  # a row already there is not counted again
    return written


def subscription_row(s: WebhookSubscription) -> tuple[Any, ...]:
    return (s.subscription_id, s.tenant, s.url, s.secret, json.dumps([k.value for k in s.kinds]), s.created_at)


def subscription_of(row: Sequence[Any]) -> WebhookSubscription:
    sid, tenant, url, secret, kinds, created = row
    return WebhookSubscription(
        subscription_id=sid, tenant=tenant, url=url, secret=secret, kinds=tuple(json.loads(kinds)), created_at=created
    )


def delivery_of(row: Sequence[Any]) -> Delivery:
    return Delivery.model_validate(dict(zip(_DELIVERY_FIELDS, row, strict=False)))


_DELIVERY_FIELDS = (
    *("delivery_id", "subscription_id", "event_id", "tenant", "run_id", "kind", "body", "status", "attempts"),
    *("next_attempt_at", "delivered_at", "last_error", "url", "secret"),
)


class OutboxMethods:
    """:class:`WebhookStore` over a store's own transactions, for both stores (mixed into each).

    A store provides ``_tx()`` (one transaction, yielding something with ``execute``), its placeholder
    and the locking clause its claim needs (PostgreSQL skips rows another claimer holds).
    """

    _PLACEHOLDER = "?"
    _CLAIM_LOCK = ""

    def _tx(self) -> Any:  # provided by the store
        raise NotImplementedError

    def _sql(self, sql: str) -> str:
        return sql_for(self._PLACEHOLDER, sql)

    def add_webhook(self, subscription: WebhookSubscription) -> None:
        with self._tx() as db:
            (count,) = db.execute(
                self._sql("SELECT count(*) FROM webhooks WHERE tenant=?"), (subscription.tenant,)
            ).fetchone()
            if count >= MAX_WEBHOOKS_PER_TENANT:
                raise StoreError(
                    f"tenant {subscription.tenant!r} has {count} webhooks, the most a tenant may have",
                    code=ErrorCode.WEBHOOK_LIMIT,
                    details={"tenant": subscription.tenant, "limit": MAX_WEBHOOKS_PER_TENANT},
                )
            db.execute(
                self._sql(f"INSERT INTO webhooks({SUBSCRIPTION_COLUMNS}) VALUES (?,?,?,?,?,?)"),
                subscription_row(subscription),
            )

    def list_webhooks(self, tenant: str) -> list[WebhookSubscription]:
        with self._tx() as db:
            rows = db.execute(
                self._sql(f"SELECT {SUBSCRIPTION_COLUMNS} FROM webhooks WHERE tenant=? ORDER BY created_at, 1"),
                (tenant,),
            ).fetchall()
        return [subscription_of(r) for r in rows]

    def remove_webhook(self, tenant: str, subscription_id: str) -> bool:
        with self._tx() as db:
            gone = db.execute(
                self._sql("DELETE FROM webhooks WHERE tenant=? AND subscription_id=?"), (tenant, subscription_id)
            ).rowcount
            db.execute(
                self._sql(
                    "UPDATE webhook_deliveries SET status='cancelled' WHERE subscription_id=? AND status='pending'"
                ),
                (subscription_id,),
            )
        return bool(gone)

    def claim_deliveries(self, now: float, limit: int, lease_s: float) -> list[Delivery]:
        with self._tx() as db:
            rows = db.execute(
                self._sql(
                    f"SELECT {DELIVERY_COLUMNS}, w.url, w.secret FROM webhook_deliveries AS d"
                    " JOIN webhooks AS w ON w.subscription_id = d.subscription_id"
                    " WHERE d.status='pending' AND d.next_attempt_at <= ?"
                    f" ORDER BY d.next_attempt_at, d.delivery_id LIMIT ?{self._CLAIM_LOCK}"
                ),
                (now, limit),
            ).fetchall()
            for row in rows:
                db.execute(
                    self._sql("UPDATE webhook_deliveries SET next_attempt_at=? WHERE delivery_id=?"),
                    (now + lease_s, row[0]),
                )
        return [delivery_of(r) for r in rows]

    def record_notices(self, state: RunState, notices: list[Notice], now: float) -> int:
        with self._tx() as db:
            return enqueue(db, self._PLACEHOLDER, state, notices, now, again=True)

    def delivery_succeeded(self, delivery_id: str, at: float) -> None:
        with self._tx() as db:
            db.execute(
                self._sql(
                    "UPDATE webhook_deliveries SET status='delivered', delivered_at=?, attempts=attempts+1,"
                    " last_error=NULL WHERE delivery_id=? AND status='pending'"
                ),
                (at, delivery_id),
            )

    def delivery_failed(self, delivery_id: str, error: str, retry_at: float | None) -> None:
        status = "pending" if retry_at is not None else "failed"
        with self._tx() as db:
            db.execute(
                self._sql(
                    "UPDATE webhook_deliveries SET status=?, attempts=attempts+1, last_error=?,"
                    " next_attempt_at=coalesce(?, next_attempt_at) WHERE delivery_id=? AND status='pending'"
                ),
                (status, error[:MAX_ERROR_CHARS], retry_at, delivery_id),
            )

    def list_deliveries(self, tenant: str, limit: int = 100) -> list[Delivery]:
        with self._tx() as db:
            rows = db.execute(
                self._sql(
                    f"SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries AS d WHERE d.tenant=?"
                    " ORDER BY d.created_at DESC, d.delivery_id DESC LIMIT ?"
                ),
                (tenant, max(1, min(limit, 1000))),
            ).fetchall()
        return [delivery_of(r) for r in rows]
