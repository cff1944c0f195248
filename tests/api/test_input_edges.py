"""Every input edge is a named 4xx, over real HTTP (uvicorn in a thread) on SQLite and on PostgreSQL: lone
surrogates and NULs in texts, ids, queries and headers; integers out of range; bodies over the limit sent
chunked; bodies that are not UTF-8; 405s with ``Allow``; no store detail in any answer."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from tests.api.agents_for_api import agents
from tests.api.test_concurrent_answers import served

from stateward.api import ApiSettings, mint_key
from stateward.api.app import key_store
from stateward.runtime.runtime import Runtime
from stateward.store.backends import open_store

LIMIT = ApiSettings().max_body_bytes  # the service's default limit


class Live:
    """The service on a real port, an admin key of tenant acme, and a run of it waiting for an approval."""

    def __init__(self, runtime: Runtime, client: httpx.Client, run_id: str):
        self.runtime, self.client, self.run_id = runtime, client, run_id


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def live(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Live]:
    url = str(tmp_path / "edges.db") if request.param == "sqlite" else str(request.getfixturevalue("pg_url"))
    runtime = Runtime(open_store(url), agents=agents)
    _, token = mint_key(key_store(runtime), tenant="acme", name="root", roles=["admin"], now=datetime.now(UTC))
    auth = {"Authorization": f"Bearer {token}"}
    try:
        for base in served(runtime):
            with httpx.Client(base_url=base, headers=auth, timeout=30) as client:
                made = client.post("/v1/runs", json={"agent": "payer", "goal": "pay", "drive": True})
                assert made.status_code == 201, made.text
                yield Live(runtime, client, made.json()["run_id"])
    finally:
        runtime.close()


def refused(response: httpx.Response, status: int, code: str) -> None:
    assert (response.status_code, response.json()["error"]["code"]) == (status, code), response.text


def raw_json(text: str) -> dict[str, str]:
    return {"content": text.encode(), "headers": {"Content-Type": "application/json"}}  # type: ignore[dict-item]


@pytest.mark.parametrize("bad", ["\\ud800", "\\udfff", "a\\u0000b", "\\ud83d"])
def test_a_lone_surrogate_or_a_nul_in_any_body_text_is_a_named_422(live: Live, bad: str) -> None:
    approve = f"/v1/runs/{live.run_id}/requests/approval_001"
    for path, text in [
        (f"{approve}/approve", f'{{"comment": "{bad}"}}'),
        (f"{approve}/reject", f'{{"comment": "{bad}"}}'),
        (f"{approve}/reply", f'{{"text": "{bad}"}}'),
        ("/v1/runs", f'{{"agent": "payer", "goal": "pay", "params": {{"invoice": "{bad}"}}}}'),
        ("/v1/runs", f'{{"agent": "payer", "goal": "pay", "params": {{"{bad}": 1}}}}'),
        ("/v1/runs", f'{{"agent": "payer", "goal": "{bad}"}}'),
    ]:
        refused(live.client.post(path, **raw_json(text)), 422, "INVALID_TEXT")  # type: ignore[arg-type]
    assert live.client.get(f"/v1/runs/{live.run_id}").json()["status"] == "WAITING_FOR_USER"


@pytest.mark.parametrize(
    "path",
    [
        "/v1/runs/run%00x",
        "/v1/runs/run%00x/events",
        "/v1/runs/run%00x/events/stream",
        "/v1/runs/{run}/requests/approval%00/approve",
        "/v1/runs?agent=pay%00er",
        "/v1/runs?cursor=%00",
        "/v1/runs?status=%00",
        "/v1/runs?agent=%ED%A0%80",
    ],
)
def test_a_nul_in_a_path_id_or_a_query_value_is_a_named_4xx_naming_no_store(live: Live, path: str) -> None:
    url = path.replace("{run}", live.run_id)
    response = live.client.post(url, json={}) if url.endswith("approve") else live.client.get(url)
    assert response.status_code in (400, 422), response.text
    assert response.json()["error"]["code"] in ("INVALID_TEXT", "INVALID_ENCODING")
    for detail in ("127.0.0.1", "host", "port", "dbname", "postgres", "sqlite"):
        assert detail not in response.text.lower()


@pytest.mark.parametrize("after", [str(2**63), str(2**64 + 5), "99999999999999999999999", "-1", "-9223372036854775809"])
def test_an_event_number_out_of_range_is_a_named_422(live: Live, after: str) -> None:
    for route in ("events", "events/stream"):
        response = live.client.get(f"/v1/runs/{live.run_id}/{route}", params={"after": after})
        assert response.status_code == 422, response.text
        assert response.json()["error"]["code"] in ("INVALID_REQUEST",)
    ok = live.client.get(f"/v1/runs/{live.run_id}/events", params={"after": str(2**63 - 1)})
    assert ok.status_code == 200 and ok.json()["events"] == []


def test_a_text_query_parameter_that_looks_like_a_huge_integer_is_text(live: Live) -> None:
    huge = "9" * 30  # past 2^63: refused for an integer parameter, plain text for a text one
    listed = live.client.get("/v1/inbox", params={"agent": huge, "limit": 5})
    assert listed.status_code == 200, listed.text
    assert listed.json()["items"] == []


@pytest.mark.parametrize("value", ["²", "٣", "-1", "9223372036854775808", "1e3", "0x10"])
def test_a_last_event_id_that_is_no_event_number_is_a_named_422(live: Live, value: str) -> None:
    response = live.client.get(f"/v1/runs/{live.run_id}/events/stream", headers={"Last-Event-ID": value.encode()})
    refused(response, 422, "INVALID_CURSOR")


def test_a_chunked_body_over_the_limit_is_413(live: Live) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"comment": "'
        for _ in range(LIMIT // 1024 + 4):
            yield b"x" * 1024
        yield b'"}'

    response = live.client.post(
        f"/v1/runs/{live.run_id}/requests/approval_001/approve",
        content=chunks(),
        headers={"Content-Type": "application/json"},
    )
    assert "content-length" not in response.request.headers  # it was sent chunked
    refused(response, 413, "BODY_TOO_LARGE")


@pytest.mark.parametrize("body", [b'{"comment": "\xff\xfe"}', b'{"comment": "\xed\xa0\x80"}', b"\xc3("])
def test_a_body_that_is_not_utf8_is_a_documented_400(live: Live, body: bytes) -> None:
    response = live.client.post(
        f"/v1/runs/{live.run_id}/requests/approval_001/approve",
        content=body,
        headers={"Content-Type": "application/json"},
    )
    refused(response, 400, "INVALID_ENCODING")
    documented = live.client.get("/openapi.json").json()["paths"]["/v1/runs/{run_id}/requests/{request_id}/approve"]
    assert "400" in documented["post"]["responses"]


def test_a_405_names_the_methods_allowed(live: Live) -> None:
    for method, path, allowed in [
        ("TRACE", "/v1/runs", {"GET", "POST"}),
        ("PUT", "/v1/runs", {"GET", "POST"}),
        ("DELETE", f"/v1/runs/{live.run_id}", {"GET"}),
        ("TRACE", "/v1/webhooks/wh_1", {"DELETE"}),
    ]:
        response = live.client.request(method, path)
        assert response.status_code == 405, (method, path)
        assert response.json()["error"]["code"] == "METHOD_NOT_ALLOWED"
        assert {m.strip() for m in response.headers["allow"].split(",")} - {"HEAD"} == allowed


def test_a_form_with_a_nul_is_refused_by_name(live: Live) -> None:
    response = live.client.post("/inbox/login", content=b"api_key=%00&csrf_token=x", headers={
        "Content-Type": "application/x-www-form-urlencoded"
    })  # fmt: skip
    refused(response, 422, "INVALID_TEXT")
