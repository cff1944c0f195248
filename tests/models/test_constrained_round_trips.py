"""Every reply contract's round trip through the official SDKs against a server that enforces schemas.

The constrained server (constrained_server.py) answers only with documents valid under the schema it is
sent, as llama.cpp grammars, vLLM guided decoding and OpenAI strict mode do, and cuts at ``max_tokens``.
So a provider that sends the wrong schema for a purpose gets back a document the Runtime refuses.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.models.constrained_server import ConstrainedServer, constrained_server
from tests.models.test_reply_contracts import PARSERS, accepted_examples, request_for
from typer.testing import CliRunner

from stateward import RunStatus, Runtime
from stateward.core.errors import ErrorCode
from stateward.core.events import EventType
from stateward.core.model_io import ReplyContract
from stateward.models.anthropic import AnthropicModel
from stateward.models.config import model_from_spec
from stateward.models.contracts import DEFAULT_MAX_TOKENS
from stateward.models.errors import ProviderError, RejectionCode
from stateward.models.openai_compat import OpenAICompatibleModel
from stateward_demos import blog_fixtures as fx
from stateward_demos.blog import build_agent
from stateward_demos.eval_cmd import app

Provider = Callable[..., Any]
PROVIDERS: dict[str, Provider] = {
    "openai:tools": lambda s, **kw: OpenAICompatibleModel("c", api_key="k", base_url=s.openai_url, mode="tools", **kw),
    "openai:json_schema": lambda s, **kw: OpenAICompatibleModel(
        "c", api_key="k", base_url=s.openai_url, mode="json_schema", **kw
    ),
    "anthropic:tools": lambda s, **kw: AnthropicModel("c", api_key="k", base_url=s.url, mode="tools", **kw),
    "anthropic:json": lambda s, **kw: AnthropicModel("c", api_key="k", base_url=s.url, mode="json", **kw),
    "anthropic:json_schema": lambda s, **kw: AnthropicModel("c", api_key="k", base_url=s.url, mode="json_schema", **kw),
}


@pytest.fixture
def server() -> Iterator[ConstrainedServer]:
    with constrained_server() as running:
        yield running


@pytest.mark.parametrize("contract", list(ReplyContract))
@pytest.mark.parametrize("provider", list(PROVIDERS))
def test_every_contract_round_trips_to_a_document_the_runtime_accepts(
    server: ConstrainedServer, provider: str, contract: ReplyContract
) -> None:
    reply = PROVIDERS[provider](server).complete(request_for(contract))
    assert reply.rejection_code is None, reply.rejection_message
    PARSERS[contract](reply.text)
    assert server.last["body"]["max_tokens"] == DEFAULT_MAX_TOKENS[contract]  # sized to the document


@pytest.mark.parametrize("contract", list(ReplyContract))
@pytest.mark.parametrize("provider", list(PROVIDERS))
def test_a_document_the_runtime_accepts_passes_the_server_unchanged(
    server: ConstrainedServer, provider: str, contract: ReplyContract
) -> None:
    """The payment case's own plan (and each contract's accepted documents) pass the enforced schema."""
    if provider.endswith(":tools") and contract is ReplyContract.DECISION:
        pytest.skip("a native tool call carries arguments, not a decision document (covered below)")
    for doc in accepted_examples(contract):
        server.script(doc)
        reply = PROVIDERS[provider](server).complete(request_for(contract))
        assert reply.rejection_code is None and json.loads(reply.text) == doc
        PARSERS[contract](reply.text)


@pytest.mark.parametrize("provider", ["openai:tools", "anthropic:tools"])
def test_a_native_tool_call_round_trips_as_a_decision(server: ConstrainedServer, provider: str) -> None:
    server.script({"name": "read_material", "arguments": {"material_id": "m2"}})
    reply = PROVIDERS[provider](server).complete(request_for(ReplyContract.DECISION))
    assert json.loads(reply.text) == {"type": "EXECUTE_TOOL", "action": "read_material", "args": {"material_id": "m2"}}


@pytest.mark.parametrize("provider", [p for p in PROVIDERS if p != "anthropic:json"])
def test_the_server_refuses_a_step_plan_for_a_plan_document(server: ConstrainedServer, provider: str) -> None:
    """What the plan-run planner was sent before (the step plan's schema) is not the plan document's."""
    server.script(accepted_examples(ReplyContract.STEP_PLAN)[0])
    with pytest.raises(ProviderError) as caught:
        PROVIDERS[provider](server).complete(request_for(ReplyContract.PLAN_DOCUMENT))
    assert caught.value.status_code == 400


@pytest.mark.parametrize("contract", list(ReplyContract))
@pytest.mark.parametrize("provider", list(PROVIDERS))
def test_a_reply_cut_at_max_tokens_is_reply_truncated(
    server: ConstrainedServer, provider: str, contract: ReplyContract
) -> None:
    model = PROVIDERS[provider](server, max_tokens_by_contract={contract: 3})
    reply = model.complete(request_for(contract))
    assert reply.rejection_code == RejectionCode.REPLY_TRUNCATED == "REPLY_TRUNCATED"
    assert reply.rejection_message == "cut off at max_tokens=3"
    assert server.last["body"]["max_tokens"] == 3


def test_per_contract_limits_come_from_the_environment(server: ConstrainedServer) -> None:
    env = {
        "STATEWARD_OPENAI_BASE_URL": server.openai_url,
        "STATEWARD_MODEL_MAX_TOKENS": "700",
        "STATEWARD_MODEL_MAX_TOKENS_PLAN_DOCUMENT": "9000",
    }
    model = model_from_spec("openai+json:c", env=env, max_attempts=1)
    model.complete(request_for(ReplyContract.PLAN_DOCUMENT))
    assert server.last["body"]["max_tokens"] == 9000  # its own limit wins
    model.complete(request_for(ReplyContract.DECISION))
    assert server.last["body"]["max_tokens"] == 700  # the flat one for the rest
    defaults = model_from_spec("openai+json:c", env={"STATEWARD_OPENAI_BASE_URL": server.openai_url})
    defaults.complete(request_for(ReplyContract.PLAN_DOCUMENT))
    assert server.last["body"]["max_tokens"] == 6000


@pytest.mark.parametrize("bad", ["0", "-5", "lots"])
def test_a_bad_per_contract_limit_is_a_named_config_error(bad: str) -> None:
    env = {"STATEWARD_OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "STATEWARD_MODEL_MAX_TOKENS_DECISION": bad}
    with pytest.raises(Exception) as caught:
        model_from_spec("openai:c", env=env)
    assert getattr(caught.value, "code", None) is ErrorCode.INVALID_MODEL_CONFIG


def test_a_truncated_reply_is_refused_counted_and_recorded(server: ConstrainedServer, tmp_path: Path) -> None:
    """In a run, a cut reply is a refused signal like any other: counted, recorded by name, never parsed."""
    model = PROVIDERS["openai:json_schema"](server, max_tokens_by_contract={ReplyContract.DECISION: 2})
    runtime = Runtime.open(str(tmp_path / "runs.db"))
    try:
        state = runtime.start(build_agent("react", model=model), fx.GOAL)
        assert state.status is RunStatus.FAILED and state.terminal_reason == "rejected_signal"
        assert state.usage.rejected_signals == 1 and state.usage.tool_attempts == 0
        refused = [
            e.payload
            for e in runtime.store.read_events(state.run_id)
            if e.type is EventType.RUNTIME_VALIDATED and e.payload["runtime_decision"] == "rejected"
        ]
        assert [p.get("error_code") or p.get("code") for p in refused] == ["REPLY_TRUNCATED"], refused
    finally:
        runtime.close()


def test_correct_once_asks_again_after_a_truncated_reply(server: ConstrainedServer, tmp_path: Path) -> None:
    model = PROVIDERS["openai:json_schema"](server, max_tokens_by_contract={ReplyContract.DECISION: 2})
    agent = dataclasses.replace(build_agent("react", model=model), on_rejected_signal="correct_once")
    runtime = Runtime.open(str(tmp_path / "runs.db"))
    try:
        state = runtime.start(agent, fx.GOAL)
        assert state.usage.rejected_signals == 2 and state.status is RunStatus.FAILED
        asked = [r["body"]["messages"] for r in server.requests]
        assert "REPLY_TRUNCATED" in asked[1][-1]["content"]
    finally:
        runtime.close()


@pytest.mark.parametrize("spec", ["openai+json:constrained", "openai:constrained", "anthropic+json_schema:c"])
def test_the_payment_planner_gets_a_plan_the_validator_judges(
    server: ConstrainedServer, spec: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``stateward eval payment-migration`` against an enforcing server: the plan is judged, not refused as
    INVALID_PLAN_DOCUMENT (as it was while the planner was sent the step plan's schema)."""
    monkeypatch.setenv("STATEWARD_OPENAI_BASE_URL", server.openai_url)
    monkeypatch.setenv("STATEWARD_ANTHROPIC_BASE_URL", server.url)
    monkeypatch.setenv("STATEWARD_MODEL_MAX_ATTEMPTS", "1")
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "STATEWARD_MODEL_RECORD", "STATEWARD_OPENAI_MODE"):
        monkeypatch.delenv(name, raising=False)
    args = ["payment-migration", "--model", spec, "--runs", "1", "--max-steps", "12", "--json"]
    result = CliRunner().invoke(app, [*args, "--db", str(tmp_path / "eval.db")])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    (row,) = report["rows"]
    plans = [r["body"] for r in server.requests if "plan_document" in json.dumps(r["body"])]
    assert plans and all(p["max_tokens"] == 6000 for p in plans), "the planner was never asked for a plan document"
    assert row["plan_verdict"] in ("ACCEPT", "REVISE", "REJECT"), row  # judged by the validator, not unread
    assert "INVALID_PLAN_DOCUMENT" not in json.dumps(row)


def test_a_text_mode_is_told_the_schema_and_an_enforcing_server_only_its_name(server: ConstrainedServer) -> None:
    request = request_for(ReplyContract.PLAN_DOCUMENT)
    PROVIDERS["anthropic:json"](server).complete(request)
    told = str(server.last["body"]["system"])
    assert "valid under this JSON Schema" in told and '"work_items"' in told
    PROVIDERS["openai:json_schema"](server).complete(request)
    system = server.last["body"]["messages"][0]["content"]
    assert "(plan_document)" in system and '"work_items"' not in system  # the schema travels once
    assert server.last["body"]["response_format"]["json_schema"]["name"] == "plan_document"


def test_max_items_bounds_a_plan_documents_arrays(server: ConstrainedServer) -> None:
    env = {"STATEWARD_OPENAI_BASE_URL": server.openai_url, "STATEWARD_MODEL_MAX_ITEMS": "4"}
    model_from_spec("openai+json:c", env=env).complete(request_for(ReplyContract.PLAN_DOCUMENT))
    schema = server.last["body"]["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["work_items"]["maxItems"] == 4 and schema["properties"]["milestones"]["maxItems"] == 4
    model_from_spec("openai+json:c", env={"STATEWARD_OPENAI_BASE_URL": server.openai_url}).complete(
        request_for(ReplyContract.PLAN_DOCUMENT)
    )
    assert server.last["body"]["response_format"]["json_schema"]["schema"]["properties"]["work_items"]["maxItems"] == 32
