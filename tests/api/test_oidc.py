"""OIDC bearer tokens verified against a JWKS the test serves itself; the token's principal is recorded."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from fastapi.testclient import TestClient
from jwt.algorithms import RSAAlgorithm
from tests.api.agents_for_api import agents

from stateward.api import ApiSettings, create_app
from stateward.api.oidc import OidcSettings
from stateward.core.events import EventType
from stateward.runtime.runtime import Runtime
from stateward.store.sqlite import SQLiteStore

ISSUER = "https://id.example"
AUDIENCE = "stateward"


class Jwks:
    """An issuer's signing key, its JWKS served over HTTP, and tokens signed with it."""

    def __init__(self) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        public = json.loads(RSAAlgorithm.to_jwk(self.key.public_key()))
        document = json.dumps({"keys": [public | {"kid": "k1", "use": "sig", "alg": "RS256"}]}).encode()
        self.fetches = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner.fetches += 1
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(document)))
                self.end_headers()
                self.wfile.write(document)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/jwks.json"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def token(self, *, key: Any = None, kid: str = "k1", alg: str = "RS256", **claims: Any) -> str:
        now = int(time.time())
        body = {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice@example.com", "tenant": "acme", "roles": ["approver"]}
        body |= {"iat": now, "exp": now + 300} | claims
        return jwt.encode(
            {k: v for k, v in body.items() if v is not None}, key or self.key, algorithm=alg, headers={"kid": kid}
        )

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def jwks() -> Iterator[Jwks]:
    served = Jwks()
    yield served
    served.close()


@pytest.fixture
def client(tmp_path: Path, jwks: Jwks) -> Iterator[tuple[TestClient, Runtime]]:
    runtime = Runtime(SQLiteStore(tmp_path / "oidc.db"), agents=agents)
    settings = ApiSettings(oidc=OidcSettings(issuer=ISSUER, audience=AUDIENCE, jwks_url=jwks.url))
    with TestClient(create_app(runtime, settings)) as c:
        yield c, runtime
    runtime.close()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_a_valid_token_is_a_principal_and_its_answer_records_it(client: tuple[TestClient, Runtime], jwks: Jwks) -> None:
    c, runtime = client
    admin = bearer(jwks.token(sub="root", roles=["admin"]))
    started = c.post("/v1/runs", json={"agent": "payer", "goal": "pay", "drive": True}, headers=admin)
    assert started.status_code == 201, started.text
    run = started.json()["run_id"]
    approver = bearer(jwks.token(roles=["approver", "finance"]))
    approved = c.post(f"/v1/runs/{run}/requests/approval_001/approve", json={"comment": "ok"}, headers=approver)
    assert approved.status_code == 200, approved.text
    assert approved.json()["by"] == "alice@example.com [oidc]"
    [answer] = [e.payload for e in runtime.events(run) if e.type is EventType.REQUEST_ANSWERED]
    assert (answer["by"], answer["roles"]) == ("alice@example.com [oidc]", ["approver", "finance"])
    # Another tenant's token sees the run as unknown.
    theirs = bearer(jwks.token(tenant="globex", roles=["admin"]))
    assert c.get(f"/v1/runs/{run}", headers=theirs).status_code == 404
    assert jwks.fetches == 1  # the JWKS is cached


def test_every_bad_token_is_unauthenticated_alike(client: tuple[TestClient, Runtime], jwks: Jwks) -> None:
    c, runtime = client
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    now = int(time.time())
    bad = {
        "expired": jwks.token(exp=now - 3600, iat=now - 7200),
        "wrong audience": jwks.token(aud="someone-else"),
        "wrong issuer": jwks.token(iss="https://evil.example"),
        "unknown signing key": jwks.token(key=stranger),
        "unknown key id": jwks.token(kid="k9"),
        "no tenant": jwks.token(tenant=None),
        "hostile tenant": jwks.token(tenant="acme\u202e"),
        "no expiry": jwks.token(exp=None),
        "hmac with the public key": jwt.encode(
            {"sub": "x", "tenant": "acme"}, "s" * 40, algorithm="HS256", headers={"kid": "k1"}
        ),
        "unsigned": jwt.encode({"sub": "x", "tenant": "acme"}, None, algorithm="none", headers={"kid": "k1"}),
        "garbage": "not.a.jwt",
    }
    for what, token in bad.items():
        response = c.get("/v1/runs", headers=bearer(token))
        assert response.status_code == 401, what
        assert response.json()["error"]["code"] == "UNAUTHENTICATED", what
    assert c.get("/v1/runs", headers=bearer(jwks.token())).status_code == 200
    assert runtime.list_runs().items == []


def test_each_oidc_user_has_their_own_idempotency_keys(client: tuple[TestClient, Runtime], jwks: Jwks) -> None:
    c, runtime = client
    admin = bearer(jwks.token(sub="root", roles=["admin"]))
    runs = [c.post("/v1/runs", json={"agent": "payer", "goal": "pay", "drive": True}, headers=admin).json()["run_id"]
            for _ in range(2)]  # fmt: skip
    alice = bearer(jwks.token(sub="alice@example.com")) | {"Idempotency-Key": "k-1"}
    bob = bearer(jwks.token(sub="bob@example.com")) | {"Idempotency-Key": "k-1"}
    url = "/v1/runs/{}/requests/approval_001/approve"
    first = c.post(url.format(runs[0]), json={}, headers=alice)
    assert first.status_code == 200 and first.json()["by"] == "alice@example.com [oidc]"
    # Bob, the same key on another run: recorded as his, not refused as a reuse of Alice's key.
    other = c.post(url.format(runs[1]), json={}, headers=bob)
    assert other.status_code == 200, other.text
    [answer] = [e.payload for e in runtime.events(runs[1]) if e.type is EventType.REQUEST_ANSWERED]
    assert answer["by"] == "bob@example.com [oidc]"
    # Carol, Alice's key and body: her own outcome (the request is already answered), not Alice's response.
    carol = bearer(jwks.token(sub="carol@example.com")) | {"Idempotency-Key": "k-1"}
    same = c.post(url.format(runs[0]), json={}, headers=carol)
    assert same.status_code == 200, same.text
    assert same.json()["already_answered"] is True and first.json()["already_answered"] is False
    # Alice's replay still returns her first outcome.
    assert c.post(url.format(runs[0]), json={}, headers=alice).json() == first.json()
