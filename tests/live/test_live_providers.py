"""Both providers' wire protocols against a real model server (llama-server + SmolLM2-135M, local).

This model tests plumbing and honesty, not judgement: whatever it says must arrive as exactly one
decision or as a named outcome, with real usage numbers; failures of the server must be named errors.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stateward.controllers.plan_execute import PLAN_INSTRUCTIONS, parse_step_plan
from stateward.controllers.react import DECIDE_INSTRUCTIONS
from stateward.core.decision import parse_decision
from stateward.core.errors import DecisionParseError
from stateward.models.anthropic import AnthropicModel
from stateward.models.base import ActionSpec, ModelReply, ModelRequest
from stateward.models.config import model_from_spec
from stateward.models.errors import ModelCallError, RejectionCode
from stateward.models.local_server import LocalServer, free_port
from stateward.models.openai_compat import OpenAICompatibleModel
from stateward.models.recording import RecordingModel, ReplayModel
from stateward_demos import blog, blog_fixtures

pytestmark = [pytest.mark.live_model, pytest.mark.slow]

MAX_STRING = 80
MAX_TOKENS = 320


def blog_request(purpose: str = "decide", instructions: str = DECIDE_INSTRUCTIONS) -> ModelRequest:
    tools = blog.make_tools(blog_fixtures.MATERIAL_SETS["default"])
    actions = []
    for name in tools.names():
        spec = tools.get(name)
        assert spec is not None
        actions.append(ActionSpec(name=name, description=spec.description, input_schema=spec.input_schema()))
    return ModelRequest(
        purpose=purpose,
        goal=blog_fixtures.GOAL,
        inventory=list(blog_fixtures.MATERIAL_SETS["default"]),
        visible_actions=actions,
        instructions=instructions,
    )


def openai_model(server: LocalServer, **kw: object) -> OpenAICompatibleModel:
    # A CPU-bound local model on a shared 2-core machine: the timeout bounds a hang, not the speed.
    options: dict[str, object] = {
        "mode": "json_schema",
        "max_string": MAX_STRING,
        "max_tokens": MAX_TOKENS,
        "timeout_s": 240.0,
    }
    options.update(kw)
    return OpenAICompatibleModel("smollm2", api_key="unused", base_url=server.openai_url, temperature=0, **options)  # type: ignore[arg-type]


def assert_named_outcome(reply: ModelReply) -> str:
    """Exactly one decision, or a name for why not: the provider's rejection or the strict parser's code."""
    if reply.rejection_code is not None:
        assert reply.rejection_code in set(RejectionCode)
        return reply.rejection_code
    try:
        return parse_decision(reply.text).type.value
    except DecisionParseError as exc:
        return exc.code


def assert_real_usage(reply: ModelReply) -> None:
    usage = reply.usage
    assert usage.input_tokens > 0 and usage.output_tokens > 0
    assert usage.latency_ms > 0 and usage.provider_request_id


def test_openai_json_schema_mode_yields_schema_valid_decisions(local_model: LocalServer) -> None:
    model = openai_model(local_model)
    outcomes = []
    for _ in range(3):
        reply = model.complete(blog_request())
        assert_real_usage(reply)
        outcomes.append(assert_named_outcome(reply))
    # The server enforces the schema, so the strict parser accepts what comes back (or it was cut off).
    assert set(outcomes) <= {"EXECUTE_TOOL", "REQUEST_USER_INPUT", "FINISH", "FAIL", "REPLY_TRUNCATED"}
    assert any(o != "REPLY_TRUNCATED" for o in outcomes)


def test_openai_plan_and_content_requests_return_schema_shaped_json(local_model: LocalServer) -> None:
    model = openai_model(local_model)
    plan = model.complete(blog_request("plan", PLAN_INSTRUCTIONS))
    assert_real_usage(plan)
    if plan.rejection_code is None:
        parsed = parse_step_plan(plan.text, {"list_materials", "read_material", "create_brief", "write_draft"})
        assert not hasattr(parsed, "code"), parsed  # schema-constrained: a valid plan over known actions
    else:
        assert plan.rejection_code == RejectionCode.REPLY_TRUNCATED
    content_request = blog_request("content", "Write the brief's title, outline and sources as JSON arguments.")
    content_request = content_request.model_copy(
        update={"visible_actions": [a for a in content_request.visible_actions if a.name == "create_brief"]}
    )
    content = model.complete(content_request)
    if content.rejection_code is None:
        assert set(json.loads(content.text)) == {"title", "outline", "sources"}


def test_the_document_contracts_schemas_are_taken_by_a_real_grammar(local_model: LocalServer) -> None:
    """llama-server turns each document contract's strict schema into a grammar (an unsupported schema
    would be an HTTP 400): a check's judgement comes back as one the Runtime parses, a plan document
    starts as one and, at a few tokens, is cut as REPLY_TRUNCATED - never a parse error."""
    from stateward.controllers.replies import document_request
    from stateward.core.model_io import ReplyContract
    from stateward.verify.checks import ModelJudgement

    def ask(contract: ReplyContract, limit: int) -> ModelReply:
        request = document_request(contract, purpose="content", goal="check the report", facts={"artifact": "ok"})
        return openai_model(local_model, max_tokens=None, max_tokens_by_contract={contract: limit}).complete(request)

    judgement = ask(ReplyContract.CHECK_JUDGEMENT, 96)
    if judgement.rejection_code is None:
        assert ModelJudgement.model_validate_json(judgement.text).verdict
    else:
        assert judgement.rejection_code == RejectionCode.REPLY_TRUNCATED
    plan = ask(ReplyContract.PLAN_DOCUMENT, 24)
    assert plan.rejection_code == RejectionCode.REPLY_TRUNCATED, plan
    assert plan.text.startswith("{") and '"plan_id"' in plan.text[:16], plan.text  # the grammar's first key


def test_openai_tools_mode_reaches_the_server_and_stays_honest(local_model: LocalServer) -> None:
    """This model does not call tools natively; whatever it does instead must still be a named outcome."""
    reply = openai_model(local_model, mode="tools", max_tokens=64).complete(blog_request())
    assert_real_usage(reply)
    assert assert_named_outcome(reply)


@pytest.mark.parametrize("mode", ["json", "tools"])
def test_anthropic_messages_api_round_trip(local_model: LocalServer, mode: str) -> None:
    model = AnthropicModel("smollm2", api_key="unused", base_url=local_model.url, mode=mode, max_tokens=64)  # type: ignore[arg-type]
    reply = model.complete(blog_request())
    assert_real_usage(reply)
    assert reply.stop_reason in {"end_turn", "max_tokens", "tool_use"}
    if reply.stop_reason == "max_tokens":
        assert reply.rejection_code == RejectionCode.REPLY_TRUNCATED
    assert assert_named_outcome(reply)


def test_a_prompt_beyond_the_context_is_named_by_both_providers(local_model: LocalServer) -> None:
    huge = blog_request().model_copy(update={"observations": [{"content": "retry storm " * 8000}]})
    anthropic = AnthropicModel("smollm2", api_key="unused", base_url=local_model.url, mode="json", max_tokens=16)
    for model in (openai_model(local_model), anthropic):
        with pytest.raises(ModelCallError) as err:
            model.complete(huge)
        assert err.value.code == "CONTEXT_LENGTH_EXCEEDED" and not err.value.retryable


def test_a_server_that_is_down_or_too_slow_is_named(local_model: LocalServer) -> None:
    down = OpenAICompatibleModel("smollm2", api_key="unused", base_url=f"http://127.0.0.1:{free_port()}/v1")
    with pytest.raises(ModelCallError) as err:
        down.complete(blog_request())
    assert err.value.code == "SERVICE_UNAVAILABLE"
    with pytest.raises(ModelCallError) as err:
        openai_model(local_model, timeout_s=0.001).complete(blog_request())
    assert err.value.code == "TIMEOUT"


def test_a_real_exchange_replays_offline(live_env: LocalServer, tmp_path: Path) -> None:
    path = tmp_path / "live.jsonl"
    recorder = RecordingModel(model_from_spec("openai+json:smollm2"), path)
    reply = recorder.complete(blog_request())
    assert_real_usage(reply)
    replay = ReplayModel(path)  # reads only the file: no client, no URL, no key
    assert replay.complete(blog_request()) == reply
    with pytest.raises(ModelCallError) as err:
        replay.complete(blog_request().model_copy(update={"goal": "something else"}))
    assert err.value.code == "REPLAY_MISS"
