"""Routes to manage a tenant's webhook subscriptions (admin role) and to see their deliveries."""

from __future__ import annotations

import secrets
import time
from typing import Annotated

from fastapi import APIRouter, Query, Response
from pydantic import BaseModel, ConfigDict, Field, field_validator

from stateward.api.backend import RunBackend
from stateward.api.caller import Caller
from stateward.api.identity import Role, require
from stateward.api.webhook_targets import MAX_URL_CHARS, TargetPolicy, check_target
from stateward.core.errors import ErrorCode, RunError, UserError
from stateward.store.base import Store
from stateward.store.outbox import Delivery, DeliveryStatus, NoticeKind, WebhookStore, WebhookSubscription

# The form the target rules accept, as strict as they are: a scheme, then a host name (labels, the last
# starting with a letter), a dotted-quad IPv4 address or a bracketed IPv6 one, a port, and a path of
# printable ASCII. The rules then refuse by name what a well-formed URL names (WEBHOOK_TARGET_FORBIDDEN).
_H = "[0-9A-Fa-f]{1,4}"
_OCTET = "(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
_IPV4 = rf"({_OCTET}\.){{3}}{_OCTET}"
_IPV6 = (
    rf"(({_H}:){{7}}{_H}|({_H}:){{1,7}}:|({_H}:){{1,6}}:{_H}|({_H}:){{1,5}}(:{_H}){{1,2}}|({_H}:){{1,4}}(:{_H}){{1,3}}"
    rf"|({_H}:){{1,3}}(:{_H}){{1,4}}|({_H}:){{1,2}}(:{_H}){{1,5}}|{_H}:(:{_H}){{1,6}}|:((:{_H}){{1,7}}|:)"
    rf"|::([Ff]{{4}}(:0{{1,4}})?:)?{_IPV4}|({_H}:){{1,4}}:{_IPV4})"
)
_NAME = r"([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*[A-Za-z]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.?"
_PORT = "([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
URL_PATTERN = rf"^[Hh][Tt][Tt][Pp][Ss]?://({_NAME}|{_IPV4}|\[{_IPV6}\])(:{_PORT})?([/?#][\x21-\x5b\x5d-\x7e]*)?$"


class NewWebhook(BaseModel):
    """A subscription: where to POST, and which kinds of notice (all three unless narrowed)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(
        min_length=8,
        max_length=MAX_URL_CHARS,
        pattern=URL_PATTERN,
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


def webhook_store(source: RunBackend | Store) -> WebhookStore:
    """The webhooks and outbox of ``source``: a store, or a runtime on one."""
    store: object = source if isinstance(source, WebhookStore) else getattr(source, "store", None)
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


def webhook_routes(v1: APIRouter, store: WebhookStore, targets: TargetPolicy) -> None:
    """``/v1/webhooks``: create (the secret is returned once), list, delete; ``/v1/webhooks/deliveries``.
    A new subscription's URL is normalised and checked against ``targets`` (422 by name when refused)."""

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
