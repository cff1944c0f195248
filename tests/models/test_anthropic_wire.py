"""The Anthropic provider over the official ``anthropic`` SDK's real HTTP path.

Responses come from a local stdlib HTTP stub (see conftest.py) and are shaped like the examples in
Anthropic's Messages API documentation (tool_use blocks, thinking blocks, stop_reason values, error
bodies), so the SDK's own parsing runs; only the bodies are canned.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from stateward.core.decision import DecisionType, parse_decision
from stateward.models.anthropic import AnthropicModel
from stateward.models.base import ModelRequest
from stateward.models.errors import ModelCallError

SECRET = "sk-ant-test-DO-NOT-LEAK-77c1"


def message(content: list[dict[str, Any]], stop_reason: str = "end_turn") -> dict[str, Any]:
    return {
        "id": "msg_01Aq9w938a90dw8q",
        "type": "message",
        "role": "assistant",
        "model": "claude-test-model",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 472, "output_tokens": 91, "cache_read_input_tokens": 28},
    }


def tool_use(name: str, payload: dict[str, Any], block_id: str = "toolu_01A09q90qw90lq917835lq9") -> dict[str, Any]:
    return {"type": "tool_use", "id": block_id, "name": name, "input": payload}


def model(stub: Any, **kw: Any) -> AnthropicModel:
    return AnthropicModel("claude-test-model", api_key=SECRET, base_url=stub.url, **kw)


def test_one_tool_use_block_is_one_decision(stub: Any, decide_request: ModelRequest) -> None:
    content = [
        {"type": "text", "text": "I'll read the first material."},
        tool_use("read_material", {"material_id": "m1"}),
    ]
    stub.queue(message(content, "tool_use"), headers={"request-id": "req_018EeWyXxfu5pfWkrYcMdjWG"})
    reply = model(stub, prices={"claude-test-model": (3.0, 15.0)}).complete(decide_request)

    decision = parse_decision(reply.text)
    assert (decision.type, decision.action, decision.args) == (
        DecisionType.EXECUTE_TOOL,
        "read_material",
        {"material_id": "m1"},
    )
    assert reply.commentary == "I'll read the first material."  # kept for the record, never parsed
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (500, 91)
    assert reply.usage.provider_request_id == "req_018EeWyXxfu5pfWkrYcMdjWG"
    assert reply.usage.cost_usd == pytest.approx(500 * 3 / 1e6 + 91 * 15 / 1e6)

    sent = stub.last_body
    assert stub.requests[-1]["path"] == "/v1/messages"
    assert [t["name"] for t in sent["tools"]] == ["read_material", "list_materials", "request_user_input", "finish"]
    assert sent["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}
    headers = stub.requests[-1]["headers"]  # SDK versions send the key as x-api-key or as a bearer token
    assert SECRET in (headers.get("x-api-key"), headers.get("authorization", "").removeprefix("Bearer "))


def test_request_user_input_tool_is_a_wait_decision(stub: Any, decide_request: ModelRequest) -> None:
    stub.queue(message([tool_use("request_user_input", {"question": "Write the draft?"})], "tool_use"))
    decision = parse_decision(model(stub).complete(decide_request).text)
    assert (decision.type, decision.question) == (DecisionType.REQUEST_USER_INPUT, "Write the draft?")


@pytest.mark.parametrize(
    ("content", "stop", "code"),
    [
        (
            [
                tool_use("read_material", {"material_id": "m1"}, "toolu_1"),
                tool_use("finish", {"reason": "x"}, "toolu_2"),
            ],
            "tool_use",
            "MULTIPLE_TOOL_CALLS",
        ),
        ([tool_use("get_weather", {"location": "San Francisco, CA"})], "tool_use", "UNKNOWN_TOOL"),
        ([tool_use("read_material", {"material": "m1"})], "tool_use", "INVALID_TOOL_ARGUMENTS"),
        (
            [{"type": "thinking", "thinking": "Let me analyze this...", "signature": "WaUjzkyp..."}],
            "end_turn",
            "THINKING_ONLY",
        ),
        ([{"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a..."}], "end_turn", "THINKING_ONLY"),
        ([], "end_turn", "EMPTY_REPLY"),
        ([{"type": "text", "text": '{"type": "FINISH", "rea'}], "max_tokens", "REPLY_TRUNCATED"),
        ([{"type": "text", "text": ""}], "refusal", "MODEL_REFUSED"),
    ],
)
def test_replies_that_are_not_one_decision_are_named(
    stub: Any, decide_request: ModelRequest, content: list[dict[str, Any]], stop: str, code: str
) -> None:
    stub.queue(message(content, stop))
    reply = model(stub).complete(decide_request)
    assert reply.rejection_code == code and reply.stop_reason == stop


def test_json_mode_sends_no_tools_and_leaves_text_to_the_parser(stub: Any, decide_request: ModelRequest) -> None:
    prose = 'Here is my answer: {"type": "FINISH", "reason": "done"}'
    stub.queue(message([{"type": "text", "text": prose}]))
    reply = model(stub, mode="json").complete(decide_request)
    assert reply.text == prose and reply.rejection_code is None  # the Runtime names it NOT_JSON
    assert "tools" not in stub.last_body and "output_config" not in stub.last_body


def test_json_schema_mode_sends_output_config(stub: Any, decide_request: ModelRequest) -> None:
    stub.queue(message([{"type": "text", "text": '{"type": "FINISH", "reason": "done"}'}]))
    model(stub, mode="json_schema").complete(decide_request.model_copy(update={"correction": "NOT_JSON: prose"}))
    sent = stub.last_body
    assert sent["output_config"]["format"]["type"] == "json_schema"
    assert "anyOf" in sent["output_config"]["format"]["schema"]
    assert "NOT_JSON" in sent["messages"][0]["content"][-1]["text"]


@pytest.mark.parametrize(
    ("status", "error_type", "text", "headers", "code"),
    [
        (
            429,
            "rate_limit_error",
            "Number of requests has exceeded your rate limit",
            {"retry-after": "3"},
            "RATE_LIMITED",
        ),
        (529, "overloaded_error", "Overloaded", {}, "SERVICE_UNAVAILABLE"),
        (500, "api_error", "Internal server error", {}, "SERVICE_UNAVAILABLE"),
        (401, "authentication_error", f"invalid x-api-key {SECRET}", {}, "AUTH_FAILED"),
        (403, "permission_error", "Your API key does not have permission", {}, "AUTH_FAILED"),
        (
            400,
            "invalid_request_error",
            "prompt is too long: 210000 tokens > 200000 maximum",
            {},
            "CONTEXT_LENGTH_EXCEEDED",
        ),
        (404, "not_found_error", "model: claude-nonexistent", {}, "PROVIDER_ERROR"),
    ],
)
def test_provider_errors_are_classified_and_never_carry_the_key(
    stub: Any, decide_request: ModelRequest, status: int, error_type: str, text: str, headers: dict[str, str], code: str
) -> None:
    stub.queue({"type": "error", "error": {"type": error_type, "message": text}}, status=status, headers=headers)
    with pytest.raises(ModelCallError) as err:
        model(stub).complete(decide_request)
    assert (err.value.code, err.value.status_code) == (code, status)
    assert SECRET not in str(err.value) and SECRET not in json.dumps(err.value.to_dict())
    if status == 429:
        assert err.value.retry_after_s == 3.0
    assert len(stub.requests) == 1


def test_a_server_that_is_down_is_service_unavailable(decide_request: ModelRequest) -> None:
    down = AnthropicModel("m", api_key=SECRET, base_url="http://127.0.0.1:9", timeout_s=2)
    with pytest.raises(ModelCallError) as err:
        down.complete(decide_request)
    assert err.value.code == "SERVICE_UNAVAILABLE" and SECRET not in str(err.value)


def _raw_tool_use(input_json: str) -> str:
    """A Messages API body whose tool_use input is written out by hand (JSON no dict can express)."""
    body = json.dumps(message([tool_use("read_material", {"material_id": "PLACEHOLDER"})], "tool_use"))
    return body.replace('{"material_id": "PLACEHOLDER"}', input_json)


@pytest.mark.parametrize(
    ("input_json", "code"),
    [
        ('{"material_id": "m2", "material_id": "m1"}', "DUPLICATE_KEY"),  # the SDK alone would keep "m1"
        ('{"material_id": "m1", "n": NaN}', "NON_FINITE_NUMBER"),
    ],
)
def test_tool_input_is_read_strictly_from_the_body(
    stub: Any, decide_request: ModelRequest, input_json: str, code: str
) -> None:
    stub.queue(_raw_tool_use(input_json))
    reply = model(stub).complete(decide_request)
    assert reply.rejection_code == code


def test_a_reply_over_the_size_limit_is_refused(stub: Any, decide_request: ModelRequest) -> None:
    stub.queue(message([tool_use("read_material", {"material_id": "m" * 5_000})], "tool_use"))
    reply = model(stub, max_reply_bytes=4_096).complete(decide_request)
    assert reply.rejection_code == "REPLY_TOO_LARGE"
    assert len(reply.text) < 2_000
