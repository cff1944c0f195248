"""Schemathesis fuzzes every documented operation with an admin key, valid and invalid requests alike: no
input makes the service fail (5xx), every answer has a documented status and matches its schema, a request
valid per the schema is not refused as malformed (the schema is as strict as the validators), bodies that are
not UTF-8 are a documented 400, and a method no route of a path answers is a 405 naming the ones that do.

The webhook target rules refuse some well-formed URLs for what they are (a private address, a name that
does not resolve): those are policy, not form, so their named 422s are accepted. Names resolve through a
stub (every name to one public address) and no delivery is made: nothing leaves the process.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    positive_data_acceptance,
    response_schema_conformance,
    status_code_conformance,
)
from tests.api.agents_for_api import agents

from stateward.api import ApiSettings, create_app, mint_key
from stateward.api.app import key_store
from stateward.api.stream import StreamLimits
from stateward.api.webhook_targets import TargetPolicy
from stateward.runtime.runtime import Runtime
from stateward.store.sqlite import SQLiteStore

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
# Refusals for what a well-formed value names, not for its form: the schema cannot say which names resolve.
# INVALID_TEXT is the service's one rule for every string (no NUL, no lone surrogate), stated in the API's
# description: JSON Schema has no way to say it of the free-form ``params``.
POLICY_CODES = {
    "WEBHOOK_TARGET_FORBIDDEN",
    "WEBHOOK_DNS_FAILED",
    "WEBHOOK_LIMIT",
    "INVALID_AGENT_PARAMS",
    "INVALID_TEXT",
    "INVALID_CURSOR",  # a well-formed token this service did not issue, as an unknown id is a 404
}
EXAMPLES = 60
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "TRACE")


def accepted_unless_policy(ctx: Any, response: Any, case: Any) -> bool | None:
    """positive_data_acceptance, except for the named policy refusals above."""
    if response.status_code == 422:
        try:
            if response.json()["error"]["code"] in POLICY_CODES:
                return None
        except (ValueError, KeyError, TypeError):
            pass
    return positive_data_acceptance(ctx, response, case)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, dict[str, str], str]]:
    path: Path = tmp_path_factory.mktemp("fuzz") / "fuzz.db"
    runtime = Runtime(SQLiteStore(path), agents=agents)
    _, token = mint_key(key_store(runtime), tenant="acme", name="fuzz", roles=["admin"], now=datetime.now(UTC))
    state = runtime.submit(runtime.agents.create("payer", {}), "pay", tenant="acme")
    runtime.drive(state.run_id)
    targets = TargetPolicy(resolver=lambda host, port: ["93.184.216.34"])
    app = create_app(
        runtime,
        ApiSettings(stream=StreamLimits(idle_timeout_s=0.05, poll_s=0.01, max_duration_s=0.5), webhook_targets=targets),
    )
    yield schemathesis.openapi.from_asgi("/openapi.json", app), {"Authorization": f"Bearer {token}"}, state.run_id
    runtime.close()


def _operations(api: Any) -> list[Any]:
    operations = [result.ok() for result in api.get_all_operations()]
    documented = {(method.upper(), p) for p, item in api.raw_schema["paths"].items() for method in item}
    assert {(op.method.upper(), op.path) for op in operations} == documented  # every operation, none skipped
    assert len(operations) >= 18
    return operations


@pytest.mark.slow
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_input_makes_an_operation_fail_answer_off_its_schema_or_refuse_valid_data(
    fuzzed: tuple[Any, dict[str, str], str], mode: GenerationMode
) -> None:
    api, auth, _ = fuzzed
    checks = [*CHECKS, accepted_unless_policy] if mode is GenerationMode.POSITIVE else CHECKS
    for operation in _operations(api):

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def fuzz(case: Any) -> None:
            case.call_and_validate(headers=auth, checks=checks)

        try:
            fuzz()
        except Unsatisfiable:  # nothing of this operation can be made invalid (no parameters, no body)
            assert mode is GenerationMode.NEGATIVE and not operation.body, operation.label


def _concrete(path: str, run_id: str) -> str:
    return re.sub(r"\{[^}]+\}", lambda m: run_id if m.group(0) == "{run_id}" else "x1", path)


@pytest.mark.slow
def test_a_body_that_is_not_utf8_is_a_documented_400_on_every_operation_with_a_body(
    fuzzed: tuple[Any, dict[str, str], str],
) -> None:
    api, auth, run_id = fuzzed
    with_body = [op for op in _operations(api) if op.body]
    assert with_body
    with TestClient(api.app) as http:
        for operation in with_body:
            response = http.request(
                operation.method.upper(),
                _concrete(operation.path, run_id),
                content=b'{"comment": "\xff\xfe"}',
                headers=auth | {"Content-Type": "application/json"},
            )
            assert (response.status_code, response.json()["error"]["code"]) == (400, "INVALID_ENCODING"), (
                operation.label
            )
            assert "400" in operation.definition.raw["responses"], operation.label


@pytest.mark.slow
def test_every_method_a_path_does_not_answer_is_a_405_naming_the_ones_it_does(
    fuzzed: tuple[Any, dict[str, str], str],
) -> None:
    api, auth, run_id = fuzzed
    paths = api.raw_schema["paths"]
    with TestClient(api.app) as http:
        for path in paths:
            concrete = _concrete(path, run_id)
            # Every documented method of every path template this one matches (/v1/webhooks/deliveries is
            # also /v1/webhooks/{subscription_id}, whose DELETE answers it).
            documented = {
                m.upper()
                for other, item in paths.items()
                if re.fullmatch(re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(other)), concrete)
                for m in item
            }
            for method in set(METHODS) - documented:
                response = http.request(method, concrete, headers=auth)
                assert response.status_code == 405, (method, path, response.status_code)
                allowed = {m.strip() for m in response.headers.get("allow", "").split(",") if m.strip()}
                assert allowed - {"HEAD"} == documented, (method, path, allowed)
