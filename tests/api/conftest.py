"""An app on a temporary SQLite store, keys minted through the library, runs started through the API."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from ipaddress import ip_network
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from tests.api.agents_for_api import agents

from stateward.api import ApiSettings, create_app, mint_key
from stateward.api.app import key_store
from stateward.api.stream import StreamLimits
from stateward.api.webhook_targets import TargetPolicy
from stateward.runtime.runtime import Runtime
from stateward.store.sqlite import SQLiteStore

# The operator's switches on, for loopback only: the tests' receivers listen on 127.0.0.1 over http.
LOOPBACK_ALLOWED = TargetPolicy(allow_http=True, allow_networks=(ip_network("127.0.0.0/8"), ip_network("::1/128")))


class Service:
    """The app under test and the runtime behind it."""

    def __init__(self, runtime: Runtime, client: TestClient):
        self.runtime = runtime
        self.client = client

    def key(self, tenant: str, *roles: str, name: str = "alice") -> dict[str, str]:
        """Auth headers of a new key."""
        _, token = mint_key(key_store(self.runtime), tenant=tenant, name=name, roles=roles, now=datetime.now(UTC))
        return {"Authorization": f"Bearer {token}"}

    def waiting_run(self, headers: dict[str, str], **params: Any) -> str:
        """A payer run of the key's tenant, driven in the service until it waits for an approval."""
        response = self.client.post(
            "/v1/runs", json={"agent": "payer", "goal": "pay", "params": params, "drive": True}, headers=headers
        )
        assert response.status_code == 201, response.text
        assert response.json()["status"] == "WAITING_FOR_USER"
        return str(response.json()["run_id"])


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    runtime = Runtime(SQLiteStore(tmp_path / "api.db"), agents=agents)
    settings = ApiSettings(
        max_body_bytes=16 * 1024, stream=StreamLimits(idle_timeout_s=0.3, poll_s=0.05), webhook_targets=LOOPBACK_ALLOWED
    )
    with TestClient(create_app(runtime, settings)) as client:
        yield Service(runtime, client)
    runtime.close()
