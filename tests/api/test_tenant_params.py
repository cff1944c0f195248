"""#31 item 1 through HTTP: a tenant's params are data for the agent's domain, never a route to the machine."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import BaseModel, ConfigDict, Field

from stateward import Agent, AgentRegistry, ReActController, ToolRegistry
from stateward.api import ApiSettings, create_app, mint_key
from stateward.api.app import key_store
from stateward.runtime.agent_registry import process_agents
from stateward.runtime.runtime import Runtime
from stateward.store.sqlite import SQLiteStore
from stateward.testing import ScriptedModel


class RefundParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    amount_cents: int = Field(ge=1, le=100_000)
    reason: str = Field(default="", max_length=200)


def _finisher(**params: Any) -> Agent:
    model = ScriptedModel(lambda request: {"type": "FINISH", "reason": "done"}, name=params.get("model_spec") or "s")
    return Agent(name="x", controller=ReActController(model), tools=ToolRegistry([]))


def _registry() -> AgentRegistry:
    registry = process_agents(env={}, use_entry_points=False)  # what `stateward serve` registers by itself
    registry.register("refund", lambda amount_cents, reason="": _finisher(), params_schema=RefundParams)
    registry.register("modelled", lambda model_spec=None: _finisher(model_spec=model_spec))
    return registry


@pytest.fixture
def client(tmp_path: Path) -> Iterator[tuple[TestClient, dict[str, str], Runtime]]:
    runtime = Runtime(SQLiteStore(tmp_path / "api.db"), agents=_registry())
    _, token = mint_key(key_store(runtime), tenant="acme", name="sub", roles=("submitter",), now=datetime.now(UTC))
    with TestClient(create_app(runtime, ApiSettings())) as test_client:
        yield test_client, {"Authorization": f"Bearer {token}"}, runtime
    runtime.close()


def _start(client: TestClient, headers: dict[str, str], agent: str, params: dict[str, Any]) -> Any:
    return client.post("/v1/runs", json={"agent": agent, "goal": "g", "params": params}, headers=headers)


def test_the_chaos_ledger_is_not_registered_in_a_serving_process(client: Any, tmp_path: Path) -> None:
    test_client, headers, runtime = client
    target = tmp_path / "chosen-by-tenant.db"
    response = _start(test_client, headers, "chaos-ledger", {"db": str(target), "seed": 1, "index": 0})
    assert response.status_code >= 400 and response.json()["error"]["code"] == "AGENT_NOT_REGISTERED"
    assert not target.exists()  # the worker never created, opened or connected to what a tenant named
    assert runtime.list_runs().items == []
    assert "chaos-ledger" not in process_agents(env={})  # entry points included


def test_the_operator_opts_in_to_the_test_agents_and_their_params_are_checked(tmp_path: Path) -> None:
    opted = process_agents(env={"STATEWARD_TEST_AGENTS": "1"}, use_entry_points=False)
    assert "chaos-ledger" in opted
    spec = process_agents(env={"STATEWARD_AGENTS": "stateward.chaos.agent:registry"}, use_entry_points=False)
    assert "chaos-ledger" in spec
    for bad in ({"db": 5, "seed": 1, "index": 0}, {"db": "x.db", "seed": 1, "index": 0, "host": "h"}):
        with pytest.raises(Exception) as refused:
            opted.create("chaos-ledger", bad)
        assert getattr(refused.value, "code", None) == "INVALID_AGENT_PARAMS"


def test_a_model_spec_from_a_tenant_is_a_named_422(client: Any, tmp_path: Path) -> None:
    test_client, headers, runtime = client
    for spec in ("replay:/etc/passwd", f"replay:{tmp_path / 'api.db'}", "openai:gpt-4o"):
        response = _start(test_client, headers, "modelled", {"model_spec": spec})
        assert response.status_code == 422, response.text
        assert response.json()["error"]["code"] == "PARAM_NOT_ALLOWED"
    assert runtime.list_runs().items == []
    assert _start(test_client, headers, "modelled", {}).status_code == 201  # the operator's default model


@pytest.mark.parametrize(
    "params",
    [
        {"amount_cents": "100"},  # a string where the schema says int (a JSON string is not coerced)
        {"amount_cents": 0},
        {"amount_cents": 10**9},
        {"amount_cents": 5, "db": "/tmp/x.db"},  # not declared: refused, never passed to the factory
        {"amount_cents": 5, "reason": "x" * 201},
        {},
    ],
)
def test_params_are_validated_against_the_agents_schema(client: Any, params: dict[str, Any]) -> None:
    test_client, headers, runtime = client
    response = _start(test_client, headers, "refund", params)
    assert response.status_code == 422, response.text
    body = response.json()["error"]
    assert body["code"] == "INVALID_AGENT_PARAMS"
    assert runtime.list_runs().items == []


def test_params_within_the_schema_start_a_run(client: Any) -> None:
    test_client, headers, _ = client
    response = _start(test_client, headers, "refund", {"amount_cents": 250, "reason": "damaged"})
    assert response.status_code == 201, response.text
    assert response.json()["agent"] == "refund"
