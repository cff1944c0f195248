"""Routes to manage a tenant's webhook subscriptions (admin role) and to see their deliveries."""

from __future__ import annotations

import secrets
import time
from typing import Annotated

from fastapi import APIRouter, Query, Response
from pydantic import BaseModel, ConfigDict, Field, field_validator

from stateward.api.caller import Caller
from stateward.api.identity import Role, require
from stateward.core.errors import ErrorCode, RunError, UserError
from stateward.runtime.runtime import Runtime
from stateward.store.outbox import Delivery, DeliveryStatus, NoticeKind, WebhookStore, WebhookSubscription

MAX_URL_CHARS = 2048


class NewWebhook(BaseModel):
    """A subscription: where to POST, and which kinds of notice (all three unless narrowed)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(min_length=8, max_length=MAX_URL_CHARS)
    kinds: tuple[NoticeKind, ...] = tuple(NoticeKind)

    @field_validator("url")
    @classmethod
    def _http_only(cls, value: str) -> str:
        if not value.startswith(("https://", "http://")):
            raise ValueError("a webhook URL must be http:// or https://")
        return value

    @field_validator("kinds")
    @classmethod
    def _some(cls, value: tuple[NoticeKind, ...]) -> tuple[NoticeKind, ...]:
        if not value:
            raise ValueError("name at least one kind")
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
    last_error: str | None


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
    return DeliveryView.model_validate(d.model_dump(include=set(DeliveryView.model_fields)))


def webhook_routes(v1: APIRouter, runtime: Runtime) -> None:
    """``/v1/webhooks``: create (the secret is returned once), list, delete; ``/v1/webhooks/deliveries``."""
    store = webhook_store(runtime)

    @v1.post("/webhooks", response_model=CreatedWebhook, status_code=201, tags=["webhooks"])
    def create_webhook(body: NewWebhook, who: Caller) -> CreatedWebhook:
        """Subscribe a URL to the tenant's notices; sign-check bodies with the returned secret."""
        require(who, Role.ADMIN)
        made = WebhookSubscription(
            subscription_id=f"wh_{secrets.token_hex(8)}",
            tenant=who.tenant,
            url=body.url,
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
