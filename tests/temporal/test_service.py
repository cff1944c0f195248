"""The HTTP service, the inbox and the run console on a Temporal backend: the same routes and JSON as on a store,
keys, sessions and webhooks in the service store (``--service-db``), every answer through the workflow's Update.

Listings read Temporal's visibility, which catches up a moment after a step: the tests wait for it as an inbox
would. The last test runs ``stateward serve`` for real (uvicorn in a process of its own)."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from tests.api.conftest import LOOPBACK_ALLOWED
from tests.api.receiver import Receiver
from tests.temporal.conftest import DEADLINE_S, cli, cli_env, hosted_worker, wait_for

from stateward.api import ApiSettings, create_app, mint_key
from stateward.api.app import key_store
from stateward.api.webhook_routes import webhook_store
from stateward.api.webhooks import WebhookDispatcher
from stateward.core.events import EventType
from stateward.store.backends import open_store
from stateward.store.base import Store
from stateward.temporal.client import TemporalRuntime

pytestmark = [pytest.mark.temporal, pytest.mark.slow]


class Service:
    """The app over a TemporalRuntime, its keys in a SQLite service store."""

    def __init__(self, runtime: TemporalRuntime, service: Store, ledger: Path, settings: ApiSettings | None = None):
        self.runtime = runtime
        self.service = service
        self.ledger = ledger
        self.app = create_app(runtime, settings or ApiSettings(), service_store=service)
        self.client = TestClient(self.app, base_url="https://testserver")

    def key(self, tenant: str, *roles: str, name: str = "alice") -> dict[str, str]:
        _, token = mint_key(key_store(self.service), tenant=tenant, name=name, roles=roles, now=datetime.now(UTC))
        return {"Authorization": f"Bearer {token}"}

    def waiting_run(self, headers: dict[str, str]) -> str:
        started = self.client.post(
            "/v1/runs",
            json={"agent": "refunds", "goal": "refund A-1", "params": {"ledger": str(self.ledger)}, "drive": True},
            headers=headers,
        )
        assert started.status_code == 201, started.text
        assert (started.json()["status"], started.json()["pending"]["request_id"]) == (
            "WAITING_FOR_USER",
            "approval_001",
        )
        return str(started.json()["run_id"])

    def inbox_ids(self, headers: dict[str, str]) -> list[str]:
        listed = self.client.get("/v1/inbox", headers=headers)
        assert listed.status_code == 200, listed.text
        return [item["run_id"] for item in listed.json()["items"]]


@pytest.fixture
def service(runtime: TemporalRuntime, worker: None, tmp_path: Path) -> Iterator[Service]:
    store = open_store(str(tmp_path / "service.db"), create=True)
    yield Service(runtime, store, tmp_path / "ledger")
    store.close()


def test_start_list_approve_and_replay_through_the_json_routes(service: Service) -> None:
    acme = service.key("acme", "submitter", "approver", "viewer")
    run_id = service.waiting_run(acme)
    wait_for(lambda: run_id in service.inbox_ids(acme), "the inbox to list the request")
    [item] = [i for i in service.client.get("/v1/inbox", headers=acme).json()["items"] if i["run_id"] == run_id]
    action = item["request"]["guarded_action"]
    assert (action["tool"], action["args"]) == ("refund_order", {"order_id": "A-1", "amount_cents": 1250})
    assert item["tenant"] == "acme" and item["chain"] == []

    url = f"/v1/runs/{run_id}/requests/approval_001/approve"
    wrong = service.client.post(url, json={"digest": "0" * 64}, headers=acme)
    assert (wrong.status_code, wrong.json()["error"]["code"]) == (409, "ACTION_DIGEST_MISMATCH")
    keyed = {**acme, "Idempotency-Key": "k-1"}
    first = service.client.post(url, json={"digest": action["digest"], "comment": "ok"}, headers=keyed)
    assert first.status_code == 200, first.text
    assert (first.json()["verdict"], first.json()["already_answered"]) == ("approved", False)
    assert first.json()["by"].startswith("alice [")
    again = service.client.post(url, json={"digest": action["digest"], "comment": "ok"}, headers=keyed)
    assert again.content == first.content  # the kept response, byte for byte
    reused = service.client.post(url, json={"comment": "other"}, headers=keyed)
    assert reused.json()["error"]["code"] == "IDEMPOTENCY_KEY_REUSED"

    wait_for(lambda: service.runtime.get(run_id).status.value == "COMPLETED", "the worker to finish the run")
    shown = service.client.get(f"/v1/runs/{run_id}", headers=acme).json()
    assert (shown["status"], shown["terminal_reason"]) == ("COMPLETED", "completed")
    events = service.client.get(f"/v1/runs/{run_id}/events", params={"limit": 1000}, headers=acme).json()["events"]
    answered = [e for e in events if e["type"] == EventType.REQUEST_ANSWERED.value]
    assert [e["payload"]["verdict"] for e in answered] == ["approved"]  # one answer, however often it was sent
    assert service.ledger.read_text().count("\n") == 1
    wait_for(lambda: run_id not in service.inbox_ids(acme), "the inbox to drop the answered request")
    listed = service.client.get("/v1/runs", params={"status": "COMPLETED"}, headers=acme).json()["runs"]
    assert run_id in [r["run_id"] for r in listed]
    late = service.client.post(url, json={"comment": "late"}, headers=acme)
    assert (late.status_code, late.json()["error"]["code"]) == (409, "REQUEST_ALREADY_ANSWERED")


def test_another_tenant_sees_nothing_and_fork_is_refused_by_name(service: Service) -> None:
    acme = service.key("acme", "submitter", "approver", "operator")
    other = service.key("globex", "admin", name="mallory")
    run_id = service.waiting_run(acme)
    for response in (
        service.client.get("/v1/runs/run_nope", headers=other),
        service.client.get(f"/v1/runs/{run_id}", headers=other),
        service.client.post(f"/v1/runs/{run_id}/requests/approval_001/approve", json={}, headers=other),
        service.client.post(f"/v1/runs/{run_id}/cancel", headers=other),
        service.client.get(f"/v1/runs/{run_id}/events", headers=other),
    ):
        assert (response.status_code, response.json()["error"]["code"]) == (404, "RUN_NOT_FOUND"), response.text
    assert run_id not in service.inbox_ids(other)
    forked = service.client.post(f"/v1/runs/{run_id}/fork", json={"at": 2}, headers=acme)
    assert forked.json()["error"]["code"] == "STORE_UNSUPPORTED" and forked.status_code >= 400
    assert service.client.get("/readyz").status_code == 200

    cancelled = service.client.post(f"/v1/runs/{run_id}/cancel", headers=acme)
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "CANCELLED"
    assert not service.ledger.exists()  # the refund never ran


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert found is not None, html[:500]
    return found.group(1)


def test_the_inbox_page_answers_and_the_console_shows_the_run(service: Service) -> None:
    headers = service.key("acme", "submitter", "approver", "viewer")
    run_id = service.waiting_run(headers)
    token = headers["Authorization"].removeprefix("Bearer ")
    browser = TestClient(service.app, base_url="https://testserver", follow_redirects=True)
    form = browser.get("/inbox/login")
    page = browser.post("/inbox/login", data={"api_key": token, "csrf_token": _csrf(form.text), "next": "/inbox"})
    assert page.status_code == 200, page.text
    wait_for(lambda: run_id in browser.get("/inbox").text, "the inbox page to list the run")
    request_page = browser.get(f"/inbox/runs/{run_id}/requests/approval_001")
    assert request_page.status_code == 200 and "refund_order" in request_page.text
    digest = service.runtime.get(run_id).pending.guarded_action.digest  # type: ignore[union-attr]
    done = browser.post(
        f"/inbox/runs/{run_id}/requests/approval_001/answer",
        data={"verdict": "approve", "csrf_token": _csrf(request_page.text), "digest": digest},
    )
    assert done.status_code == 200 and 'data-testid="confirmation"' in done.text
    wait_for(lambda: service.runtime.get(run_id).status.value == "COMPLETED", "the worker to finish the run")
    console = browser.get(f"/runs/{run_id}")
    assert console.status_code == 200 and run_id in console.text and "COMPLETED" in console.text
    listing = browser.get("/runs")
    assert listing.status_code == 200 and run_id in listing.text


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_stateward_serve_on_temporal_needs_a_service_db_then_serves(
    worker: None, temporal_url: str, tmp_path: Path
) -> None:
    refused = cli("serve", "--db", temporal_url, "--port", "0")
    assert refused.returncode != 0 and "SERVICE_STORE_REQUIRED" in refused.stdout + refused.stderr
    service_db = tmp_path / "service.db"
    made = cli(
        "keys",
        "create",
        "--tenant",
        "acme",
        "--role",
        "admin",
        "--name",
        "ops",
        "--db",
        str(service_db),
        "--new-store",
        "--json",
    )
    assert made.returncode == 0, made.stderr
    token = json.loads(made.stdout)["key"]
    port = _free_port()
    log = (tmp_path / "serve.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "stateward.cli.main", "serve", "--db", temporal_url, "--service-db", str(service_db),
         "--port", str(port)],
        env=cli_env(), stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: _answers(f"{base}/healthz"), "the service to listen")
        auth = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=base, headers=auth, timeout=DEADLINE_S) as http:
            started = http.post(
                "/v1/runs",
                json={"agent": "refunds", "goal": "refund", "params": {"ledger": str(tmp_path / "l")}, "drive": True},
            )
            assert started.status_code == 201, started.text
            body: dict[str, Any] = started.json()
            assert body["status"] == "WAITING_FOR_USER"
            assert http.get("/readyz").status_code == 200
            shown = http.get(f"/v1/runs/{body['run_id']}").json()
            assert (shown["run_id"], shown["pending"]["request_id"]) == (body["run_id"], "approval_001")
    finally:
        server.terminate()
        server.wait(DEADLINE_S)
        log.close()


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


def test_a_wait_and_an_end_reach_the_service_outbox_once_and_are_delivered(
    runtime: TemporalRuntime, temporal_url: str, tmp_path: Path
) -> None:
    store = open_store(str(tmp_path / "service.db"), create=True)
    receiver = Receiver()
    try:
        with hosted_worker(temporal_url, outbox=webhook_store(store)):
            service = Service(runtime, store, tmp_path / "ledger", ApiSettings(webhook_targets=LOOPBACK_ALLOWED))
            admin = service.key("acme", "admin")
            made = service.client.post("/v1/webhooks", json={"url": receiver.url}, headers=admin)
            assert made.status_code == 201, made.text
            outbox = webhook_store(store)
            run_id = service.waiting_run(admin)
            wait_for(lambda: len(outbox.list_deliveries("acme")) == 1, "the wait's notice in the outbox")
            dispatcher = WebhookDispatcher(outbox, targets=LOOPBACK_ALLOWED)
            assert dispatcher.deliver_due() == 1
            digest = runtime.get(run_id).pending.guarded_action.digest  # type: ignore[union-attr]
            url = f"/v1/runs/{run_id}/requests/approval_001/approve"
            assert service.client.post(url, json={"digest": digest}, headers=admin).status_code == 200
            wait_for(lambda: len(outbox.list_deliveries("acme")) == 2, "the end's notice in the outbox")
            assert dispatcher.deliver_due() == 1
            assert dispatcher.deliver_due() == 0
        waiting, ended = receiver.bodies()
        assert (waiting["type"], waiting["run_id"], waiting["request_id"]) == ("run.waiting", run_id, "approval_001")
        assert (ended["type"], ended["status"]) == ("run.ended", "COMPLETED")
        events = runtime.events(run_id, limit=1000)
        waited = next(e.seq for e in events if e.type is EventType.PENDING_RECORDED)
        assert waiting["id"] == f"{run_id}:{waited}"  # the event's own number, as on a store
        assert [d.status for d in outbox.list_deliveries("acme")] == ["delivered", "delivered"]
    finally:
        receiver.close()
        store.close()


def test_service_db_is_refused_where_it_means_nothing(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    open_store(str(db), create=True).close()
    for command in (["serve"], ["worker", "--json"]):
        done = cli(*command, "--db", str(db), "--service-db", str(tmp_path / "other.db"))
        assert done.returncode != 0 and "SERVICE_STORE_UNEXPECTED" in done.stdout + done.stderr, command
