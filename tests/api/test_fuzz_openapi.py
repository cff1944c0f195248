"""Schemathesis fuzzes every documented route with an admin key: no input makes the service fail (5xx),
and every answer has a documented status and matches its schema."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)
from tests.api.agents_for_api import agents

from stateward.api import ApiSettings, create_app, mint_key
from stateward.api.app import key_store
from stateward.api.stream import StreamLimits
from stateward.runtime.runtime import Runtime
from stateward.store.sqlite import SQLiteStore

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, dict[str, str]]]:
    path: Path = tmp_path_factory.mktemp("fuzz") / "fuzz.db"
    runtime = Runtime(SQLiteStore(path), agents=agents)
    _, token = mint_key(key_store(runtime), tenant="acme", name="fuzz", roles=["admin"], now=datetime.now(UTC))
    state = runtime.submit(runtime.agents.create("payer", {}), "pay", tenant="acme")
    runtime.drive(state.run_id)
    app = create_app(runtime, ApiSettings(stream=StreamLimits(idle_timeout_s=0.05, poll_s=0.01, max_duration_s=0.5)))
    yield schemathesis.openapi.from_asgi("/openapi.json", app), {"Authorization": f"Bearer {token}"}
    runtime.close()


@pytest.mark.slow
def test_no_input_makes_a_route_fail_or_answer_off_its_schema(fuzzed: tuple[Any, dict[str, str]]) -> None:
    api, auth = fuzzed
    operations = [result.ok() for result in api.get_all_operations()]
    assert {op.path for op in operations} >= {"/v1/runs", "/v1/inbox", "/v1/webhooks"}
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def fuzz(case: Any) -> None:
            case.call_and_validate(headers=auth, checks=CHECKS)

        fuzz()
