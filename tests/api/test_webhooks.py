"""Webhooks over the API: admins subscribe; waits and ends are delivered signed, retried with backoff."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.api.conftest import LOOPBACK_ALLOWED, Service
from tests.api.receiver import Receiver

from stateward.api.webhook_routes import webhook_store
from stateward.api.webhooks import (
    EVENT_ID_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    DeliveryPolicy,
    WebhookDispatcher,
    sign,
    verify,
)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


class Clock:
    def __init__(self) -> None:
        self.now = 2_000_000_000.0

    def __call__(self) -> float:
        return self.now


def subscribe(service: Service, url: str, **extra: object) -> dict[str, object]:
    made = service.client.post("/v1/webhooks", json={"url": url, **extra}, headers=service.key("acme", "admin"))
    assert made.status_code == 201, made.text
    return dict(made.json())


def test_a_wait_and_an_end_are_delivered_signed_with_a_stable_event_id(service: Service, receiver: Receiver) -> None:
    made = subscribe(service, receiver.url)
    secret = str(made["secret"])
    assert secret.startswith("whsec_")
    listed = service.client.get("/v1/webhooks", headers=service.key("acme", "admin")).json()
    assert [w["subscription_id"] for w in listed["webhooks"]] == [made["subscription_id"]]
    assert "secret" not in listed["webhooks"][0]
    clock = Clock()
    dispatcher = WebhookDispatcher(webhook_store(service.runtime), clock=clock, targets=LOOPBACK_ALLOWED)
    admin = service.key("acme", "admin")
    run = service.waiting_run(admin)
    assert dispatcher.deliver_due() == 1
    service.client.post(f"/v1/runs/{run}/requests/approval_001/approve", json={}, headers=admin)
    service.runtime.drive(run)
    assert dispatcher.deliver_due() == 1
    assert dispatcher.deliver_due() == 0  # nothing is sent twice once delivered
    waiting, ended = receiver.bodies()
    assert (waiting["type"], waiting["run_id"], waiting["request_id"], waiting["tenant"]) == (
        "run.waiting",
        run,
        "approval_001",
        "acme",
    )
    assert (ended["type"], ended["status"]) == ("run.ended", "COMPLETED")
    for headers, body in receiver.received:
        assert headers[EVENT_ID_HEADER.lower()] == next(b["id"] for b in receiver.bodies() if b["id"] in body)
        assert verify(secret, headers[TIMESTAMP_HEADER.lower()], headers[SIGNATURE_HEADER.lower()], body, now=clock.now)
        assert not verify("whsec_wrong", headers[TIMESTAMP_HEADER.lower()], headers[SIGNATURE_HEADER.lower()], body,
                          now=clock.now)  # fmt: skip
        assert not verify(secret, headers[TIMESTAMP_HEADER.lower()], headers[SIGNATURE_HEADER.lower()], body + " ",
                          now=clock.now)  # fmt: skip
    stale = str(int(clock.now) - 3600)
    assert not verify(secret, stale, sign(secret, int(stale), "{}"), "{}", now=clock.now)


def test_a_failing_receiver_is_retried_with_exponential_backoff_then_given_up(
    service: Service, receiver: Receiver
) -> None:
    subscribe(service, receiver.url, kinds=["run.waiting"])
    receiver.status = 503
    clock = Clock()
    policy = DeliveryPolicy(base_backoff_s=10, max_backoff_s=25, max_attempts=4)
    dispatcher = WebhookDispatcher(
        webhook_store(service.runtime), policy, clock=clock, jitter=lambda: 0.5, targets=LOOPBACK_ALLOWED
    )
    service.waiting_run(service.key("acme", "admin"))
    waits = []
    for _ in range(4):
        assert dispatcher.deliver_due() == 0
        [delivery] = webhook_store(service.runtime).list_deliveries("acme")
        waits.append(delivery.next_attempt_at - clock.now)
        assert dispatcher.deliver_due() == 0  # not due yet: nothing sent
        clock.now = delivery.next_attempt_at
    assert waits[:3] == [10, 20, 25]  # doubling, capped
    [delivery] = webhook_store(service.runtime).list_deliveries("acme")
    assert (delivery.status, delivery.attempts) == ("failed", 4)
    assert delivery.last_error == "WEBHOOK_HTTP_STATUS: the receiver answered HTTP 503"
    assert len(receiver.received) == 4
    ids = {h[EVENT_ID_HEADER.lower()] for h, _ in receiver.received}
    assert len(ids) == 1  # every retry repeats the event id a receiver deduplicates by


def test_only_admins_manage_webhooks_and_another_tenants_id_is_unknown(service: Service, receiver: Receiver) -> None:
    made = subscribe(service, receiver.url)
    for role in ("viewer", "approver", "operator", "submitter"):
        key = service.key("acme", role)
        assert service.client.get("/v1/webhooks", headers=key).status_code == 403
        assert service.client.post("/v1/webhooks", json={"url": receiver.url}, headers=key).status_code == 403
    theirs = service.key("globex", "admin")
    gone = service.client.delete(f"/v1/webhooks/{made['subscription_id']}", headers=theirs)
    assert (gone.status_code, gone.json()["error"]["code"]) == (404, "WEBHOOK_NOT_FOUND")
    bad = service.client.post("/v1/webhooks", json={"url": "file:///etc/passwd"}, headers=theirs)
    assert bad.status_code == 422
    mine = service.key("acme", "admin")
    assert service.client.delete(f"/v1/webhooks/{made['subscription_id']}", headers=mine).status_code == 204
    assert service.client.get("/v1/webhooks", headers=mine).json() == {"webhooks": []}
