"""Every route authenticates; roles gate what a key may do; another tenant's ids are unknown ids."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

import pytest
from tests.api.conftest import Service

from stateward.api.app import key_store

ALL_ROLES = ("viewer", "submitter", "approver", "operator")

# (method, path template, body, the role it needs)
ROUTES = [
    ("GET", "/v1/runs", None, "viewer"),
    ("GET", "/v1/runs/{run}", None, "viewer"),
    ("GET", "/v1/runs/{run}/events", None, "viewer"),
    ("GET", "/v1/runs/{run}/events/stream", None, "viewer"),
    ("GET", "/v1/inbox", None, "approver"),
    ("POST", "/v1/runs", {"agent": "payer", "goal": "pay"}, "submitter"),
    ("POST", "/v1/runs/{run}/fork", {"at": 1}, "submitter"),
    ("POST", "/v1/runs/{run}/requests/approval_001/approve", {}, "approver"),
    ("POST", "/v1/runs/{run}/requests/approval_001/reject", {"comment": "no"}, "approver"),
    ("POST", "/v1/runs/{run}/requests/approval_001/reply", {"text": "x"}, "approver"),
    ("POST", "/v1/runs/{run}/pause", None, "operator"),
    ("POST", "/v1/runs/{run}/resume", None, "operator"),
    ("POST", "/v1/runs/{run}/cancel", None, "operator"),
    ("GET", "/v1/webhooks", None, "admin"),
    ("POST", "/v1/webhooks", {"url": "https://hooks.example/x"}, "admin"),
    ("DELETE", "/v1/webhooks/wh_0000000000000000", None, "admin"),
    ("GET", "/v1/webhooks/deliveries", None, "admin"),
]
RUN_ROUTES = [r for r in ROUTES if "{run}" in r[1]]


def key_id_of(headers: dict[str, str]) -> str:
    return headers["Authorization"].split("_", 1)[1].split(".")[0]


def call(service: Service, method: str, path: str, body: object, headers: dict[str, str], run: str = "run_x") -> object:
    return service.client.request(method, path.format(run=run), json=body, headers=headers)


@pytest.mark.parametrize(("method", "path", "body", "role"), ROUTES)
def test_no_missing_malformed_wrong_or_revoked_key_gets_in(
    service: Service, method: str, path: str, body: object, role: str
) -> None:
    good = service.key("acme", "admin")
    key_id = key_id_of(good)
    wrong_secret = {"Authorization": good["Authorization"][:-4] + "AAAA"}
    revoked = service.key("acme", "admin", name="bob")
    key_store(service.runtime).revoke_api_key(
        revoked["Authorization"].split("_", 1)[1].split(".")[0], datetime.now(UTC)
    )
    for headers in (
        {},
        {"Authorization": "Bearer"},
        {"Authorization": "Basic dXNlcjpwYXNz"},
        {"Authorization": "Bearer not-a-key"},
        {"Authorization": f"Bearer swk_{key_id}"},
        wrong_secret,
        revoked,
    ):
        response = service.client.request(method, path.format(run="run_x"), json=body, headers=headers)
        assert response.status_code == 401, (headers, response.text)
        assert response.json() == {
            "error": {"code": "UNAUTHENTICATED", "message": "missing, malformed, unknown or revoked API key"}
        }
        assert response.headers["www-authenticate"] == "Bearer"


def test_health_needs_no_key_and_readiness_reads_the_store(service: Service) -> None:
    assert service.client.get("/healthz").json() == {"status": "ok"}
    assert service.client.get("/readyz").json() == {"status": "ready"}
    service.runtime.store.close()
    broken = service.client.get("/readyz")
    assert broken.status_code == 503
    assert broken.json()["error"]["code"] == "STORE_UNAVAILABLE"


@pytest.mark.parametrize(("method", "path", "body", "role"), ROUTES)
def test_every_route_refuses_a_key_without_its_role(
    service: Service, method: str, path: str, body: object, role: str
) -> None:
    admin = service.key("acme", "admin")
    run = service.waiting_run(admin)
    # Every service role implies viewer: a key lacking viewer holds only a domain role.
    lacking = [] if role == "viewer" else [r for r in ALL_ROLES if r != role]
    others = service.key("acme", *lacking, "finance", name="carol")
    response = call(service, method, path, body, others, run)
    assert response.status_code == 403, response.text
    assert response.json()["error"]["code"] == "FORBIDDEN"
    assert service.runtime.get(run).status.value == "WAITING_FOR_USER"
    assert len(service.runtime.list_runs().items) == 1


@pytest.mark.parametrize(("method", "path", "body", "role"), RUN_ROUTES)
def test_another_tenants_run_is_answered_exactly_as_an_unknown_one(
    service: Service, method: str, path: str, body: object, role: str
) -> None:
    theirs = service.waiting_run(service.key("globex", "admin", name="gus"))
    before = [e.seq for e in service.runtime.events(theirs)]
    mine = service.key("acme", "admin")
    foreign = call(service, method, path, body, mine, theirs)
    unknown = call(service, method, path, body, mine, "run_doesnotexist00")
    assert foreign.status_code == unknown.status_code == 404
    assert foreign.json()["error"]["code"] == "RUN_NOT_FOUND"
    assert json.loads(foreign.text.replace(theirs, "ID")) == json.loads(
        unknown.text.replace("run_doesnotexist00", "ID")
    )
    # Nothing of theirs changed: no answer, pause or cancel went through.
    assert [e.seq for e in service.runtime.events(theirs)] == before
    assert service.runtime.get(theirs).status.value == "WAITING_FOR_USER"


def test_listings_show_only_the_callers_tenant(service: Service) -> None:
    acme, globex = service.key("acme", "admin"), service.key("globex", "admin", name="gus")
    mine = service.waiting_run(acme)
    service.waiting_run(globex)
    runs = service.client.get("/v1/runs", headers=acme).json()
    assert [r["run_id"] for r in runs["runs"]] == [mine]
    inbox = service.client.get("/v1/inbox", headers=acme).json()
    assert [i["run_id"] for i in inbox["items"]] == [mine]


def test_a_body_cannot_say_who_the_caller_is(service: Service) -> None:
    admin = service.key("acme", "admin")
    start = service.client.post("/v1/runs", json={"agent": "payer", "goal": "pay", "tenant": "globex"}, headers=admin)
    assert start.status_code == 422
    assert start.json()["error"]["code"] == "INVALID_REQUEST"
    run = service.waiting_run(admin)
    for forged in ({"by": "mallory"}, {"tenant": "acme"}, {"roles": ["finance"]}, {"role": "admin"}):
        response = service.client.post(f"/v1/runs/{run}/requests/approval_001/approve", json=forged, headers=admin)
        assert response.status_code == 422, forged
    assert service.runtime.get(run).status.value == "WAITING_FOR_USER"


def test_the_openapi_document_is_served_and_has_no_identity_fields_in_bodies(service: Service) -> None:
    doc = service.client.get("/openapi.json").json()
    assert {"/v1/runs", "/v1/inbox", "/v1/runs/{run_id}/requests/{request_id}/approve", "/healthz"} <= set(doc["paths"])
    for name in ("StartRun", "ApproveOrReject", "Reply"):
        assert not {"by", "tenant", "roles", "role"} & set(doc["components"]["schemas"][name]["properties"])
    assert "HTTPBearer" in doc["components"]["securitySchemes"]


def test_the_matrix_covers_every_route_the_service_documents(service: Service) -> None:
    """A /v1 route added to the service but not to ROUTES would escape every check above."""
    doc = service.client.get("/openapi.json").json()
    documented = {
        (method.upper(), path)
        for path, operations in doc["paths"].items()
        if path.startswith("/v1/")
        for method in operations
    }
    covered = {(m, p.format(run="run_x")) for m, p, _, _ in ROUTES}

    def in_matrix(method: str, template: str) -> bool:
        pattern = re.compile("^" + re.sub(r"\{[^}]+\}", "[^/]+", template) + "$")
        return any(m == method and pattern.match(p) for m, p in covered)

    missing = sorted(f"{m} {t}" for m, t in documented if not in_matrix(m, t))
    assert missing == []
    assert len(documented) >= len(ROUTES) - 1  # the matrix is not padded with routes that do not exist
