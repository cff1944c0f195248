"""Routes to manage a tenant's webhook subscriptions (admin role) and to see their deliveries."""

from __future__ import annotations

import secrets
import time
from typing import Annotated

from fastapi import APIRouter, Query, Response
from pydantic import BaseModel, ConfigDict, Field, field_validator

from stateward.api.caller import Caller
from stateward.api.identity import Role, require
from stateward.api.webhook_targets import MAX_URL_CHARS, TargetPolicy, check_target
from stateward.core.errors import ErrorCode, RunError, UserError
from stateward.runtime.runtime import Runtime
from stateward.store.outbox import Delivery, DeliveryStatus, NoticeKind, WebhookStore, WebhookSubscription


class NewWebhook(BaseModel):
    """A subscription: where to POST, and which kinds of notice (all three unless narrowed)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(
        min_length=8,
        max_length=MAX_URL_CHARS,
        pattern=r"^[Hh][Tt][Tt][Pp][Ss]?://[^\x00-\x20\x7f@\\]+$",
        description="https (http where the operator allows it); checked against the service's target rules",
    )
    kinds: tuple[NoticeKind, ...] = Field(default=tuple(NoticeKind), min_length=1)

    @field_validator("kinds")
    @classmethod
    def _once_each(cls, value: tuple[NoticeKind, ...]) -> tuple[NoticeKind, ...]:
        return tuple(dict.fromkeys(value))


class WebhookView(BaseModel):
    """A subscription as listed: never its secret."""

    subscription_id: str
    url: str
    kinds: tuple[NoticeKind, ...]
    created_at: float


class CreatedWebhook(WebhookView):
    """The new subscription and its signing secret, shown this once."""

    secret: str


class WebhookList(BaseModel):
    webhooks: list[WebhookView]


class DeliveryView(BaseModel):
    delivery_id: str
    subscription_id: str
    event_id: str
    run_id: str
    kind: NoticeKind
    status: DeliveryStatus
    attempts: int
    next_attempt_at: float
    delivered_at: float | None
    last_error: str | None = Field(description="``<CODE>: <message>``; names no address or port")
    error_code: str | None = Field(default=None, description="the stable code of ``last_error``")


class DeliveryList(BaseModel):
    deliveries: list[DeliveryView]


def webhook_store(runtime: Runtime) -> WebhookStore:
    store = runtime.store
    if not isinstance(store, WebhookStore):
        raise UserError(f"{type(store).__name__} keeps no webhooks", code=ErrorCode.STORE_UNSUPPORTED)
    return store


def _view(s: WebhookSubscription) -> WebhookView:
    return WebhookView(subscription_id=s.subscription_id, url=s.url, kinds=s.kinds, created_at=s.created_at)


def _delivery(d: Delivery) -> DeliveryView:
    view = d.model_dump(include=set(DeliveryView.model_fields))
    code, sep, _ = (d.last_error or "").partition(": ")
    view["error_code"] = code if sep and ErrorCode.parse(code) is not None else None
    return DeliveryView.model_validate(view)


def webhook_routes(v1: APIRouter, runtime: Runtime, targets: TargetPolicy) -> None:
    """``/v1/webhooks``: create (the secret is returned once), list, delete; ``/v1/webhooks/deliveries``.
    A new subscription's URL is normalised and checked against ``targets`` (422 by name when refused)."""
    store = webhook_store(runtime)

    @v1.post("/webhooks", response_model=CreatedWebhook, status_code=201, tags=["webhooks"])
    def create_webhook(body: NewWebhook, who: Caller) -> CreatedWebhook:
        """Subscribe a URL to the tenant's notices; sign-check bodies with the returned secret. The URL is
        refused by name (422) unless https (http where allowed) and public (see the deployment guide)."""
        require(who, Role.ADMIN)
        target = check_target(body.url, targets)
        made = WebhookSubscription(
            subscription_id=f"wh_{secrets.token_hex(8)}",
            tenant=who.tenant,
            url=target.url,
            secret=f"whsec_{secrets.token_urlsafe(32)}",
            kinds=body.kinds,
            created_at=time.time(),
        )
        store.add_webhook(made)
        return CreatedWebhook(**_view(made).model_dump(), secret=made.secret)

    @v1.get("/webhooks", response_model=WebhookList, tags=["webhooks"])
    def list_webhooks(who: Caller) -> WebhookList:
        """The tenant's subscriptions, without secrets."""
        require(who, Role.ADMIN)
        return WebhookList(webhooks=[_view(s) for s in store.list_webhooks(who.tenant)])

    @v1.delete("/webhooks/{subscription_id}", status_code=204, tags=["webhooks"])
    def delete_webhook(subscription_id: str, who: Caller) -> Response:
        """Unsubscribe; deliveries not yet made are cancelled. Another tenant's id is unknown."""
        require(who, Role.ADMIN)
        if not store.remove_webhook(who.tenant, subscription_id):
            raise RunError(f"no webhook {subscription_id!r}", code=ErrorCode.WEBHOOK_NOT_FOUND)
        return Response(status_code=204)

    @v1.get("/webhooks/deliveries", response_model=DeliveryList, tags=["webhooks"])
    def deliveries(who: Caller, limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> DeliveryList:
        """The tenant's latest deliveries and how they went."""
        require(who, Role.ADMIN)
        return DeliveryList(deliveries=[_delivery(d) for d in store.list_deliveries(who.tenant, limit)])


__all__ = ["webhook_routes", "webhook_store"]
