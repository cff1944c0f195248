"""The OpenAI-compatible provider over the official ``openai`` SDK's real HTTP path.

Responses come from a local stdlib HTTP stub (see conftest.py) and are shaped like the examples in
OpenAI's Chat Completions documentation (function calling, parallel tool calls, refusals, error
bodies), so the SDK's own parsing runs; only the bodies are canned.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from stateward.core.decision import parse_decision
from stateward.models.base import ModelRequest
from stateward.models.errors import ModelCallError
from stateward.models.openai_compat import OpenAICompatibleModel

SECRET = "sk-test-DO-NOT-LEAK-4f9a2c"


def completion(message: dict[str, Any], finish_reason: str = "stop") -> dict[str, Any]:
    return {
        "id": "chatcmpl-abc123",
        "object": "chat.completion",
        "created": 1699896916,
        "model": "gpt-4o-mini",
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 82, "completion_tokens": 17, "total_tokens": 99},
    }


def tool_call(name: str, arguments: str, call_id: str = "call_abc123") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def model(stub: Any, **kw: Any) -> OpenAICompatibleModel:
    return OpenAICompatibleModel("gpt-4o-mini", api_key=SECRET, base_url=f"{stub.url}/v1", **kw)


def test_one_tool_call_is_one_decision_with_usage(stub: Any, decide_request: ModelRequest) -> None:
    msg = {
        "role": "assistant",
        "content": None,
        "tool_calls": [tool_call("read_material", '{\n"material_id": "m1"\n}')],
    }
    stub.queue(completion(msg, "tool_calls"), headers={"x-request-id": "req_123"})
    reply = model(stub, prices={"gpt-4o-mini": (0.15, 0.60)}).complete(decide_request)

    decision = parse_decision(reply.text)
    assert (decision.action, decision.args) == ("read_material", {"material_id": "m1"})
    assert reply.rejection_code is None and reply.stop_reason == "tool_calls"
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (82, 17)
    assert reply.usage.provider_request_id == "req_123"
    assert reply.usage.cost_usd == pytest.approx(82 * 0.15 / 1e6 + 17 * 0.60 / 1e6)
    assert reply.usage.latency_ms > 0

    sent = stub.last_body
    assert [t["function"]["name"] for t in sent["tools"]] == [
        "read_material",
        "list_materials",
        "request_user_input",
        "finish",
    ]
    assert (sent["tool_choice"], sent["parallel_tool_calls"]) == ("required", False)
    assert stub.requests[-1]["headers"]["authorization"] == f"Bearer {SECRET}"


@pytest.mark.parametrize(
    ("message", "finish", "code"),
    [
        (
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    tool_call("read_material", '{"material_id": "m1"}', "call_1"),
                    tool_call("read_material", '{"material_id": "m2"}', "call_2"),
                ],
            },
            "tool_calls",
            "MULTIPLE_TOOL_CALLS",
        ),
        ({"role": "assistant", "tool_calls": [tool_call("get_weather", "{}")]}, "tool_calls", "UNKNOWN_TOOL"),
        (
            {"role": "assistant", "tool_calls": [tool_call("read_material", '{"id": 1}')]},
            "tool_calls",
            "INVALID_TOOL_ARGUMENTS",
        ),
        ({"role": "assistant", "content": ""}, "stop", "EMPTY_REPLY"),
        ({"role": "assistant", "content": "", "reasoning_content": "Let me think..."}, "stop", "THINKING_ONLY"),
        ({"role": "assistant", "content": None, "refusal": "I can't help with that."}, "stop", "MODEL_REFUSED"),
        ({"role": "assistant", "content": '{"type": "FINISH", "reas'}, "length", "REPLY_TRUNCATED"),
    ],
)
def test_replies_that_are_not_one_decision_are_named(
    stub: Any, decide_request: ModelRequest, message: dict[str, Any], finish: str, code: str
) -> None:
    stub.queue(completion(message, finish))
    reply = model(stub).complete(decide_request)
    assert reply.rejection_code == code
    assert reply.rejection_message


def test_text_answers_are_left_to_the_strict_parser(stub: Any, decide_request: ModelRequest) -> None:
    wrapped = '{"type": "json_object", "content": {"type": "FINISH", "reason": "done"}}'
    stub.queue(completion({"role": "assistant", "content": wrapped}))
    reply = model(stub).complete(decide_request)
    assert reply.rejection_code is None and reply.text == wrapped  # the Runtime names it WRAPPED_DECISION


def test_json_schema_mode_sends_a_bounded_schema_and_no_tools(stub: Any, decide_request: ModelRequest) -> None:
    stub.queue(completion({"role": "assistant", "content": '{"type":"FINISH","reason":"done"}'}))
    reply = model(stub, mode="json_schema").complete(decide_request)
    assert parse_decision(reply.text).reason == "done"
    sent = stub.last_body
    assert "tools" not in sent
    assert sent["response_format"]["type"] == "json_schema"
    assert sent["response_format"]["json_schema"]["name"] == "control_decision"
    assert '"maxLength"' in json.dumps(sent["response_format"])
    assert "actions" in json.loads(sent["messages"][1]["content"])  # schemas travel in the prompt instead


def test_plan_requests_use_json_schema_even_in_tools_mode(stub: Any, decide_request: ModelRequest) -> None:
    stub.queue(completion({"role": "assistant", "content": '{"steps": [{"kind": "finish", "reason": "x"}]}'}))
    reply = model(stub).complete(decide_request.model_copy(update={"purpose": "plan"}))
    assert json.loads(reply.text)["steps"][0]["kind"] == "finish"
    assert stub.last_body["response_format"]["json_schema"]["name"] == "step_plan"
    assert "tools" not in stub.last_body


def test_a_correction_is_appended_as_a_user_message(stub: Any, decide_request: ModelRequest) -> None:
    stub.queue(completion({"role": "assistant", "content": "{}"}))
    model(stub).complete(decide_request.model_copy(update={"correction": "MULTIPLE_TOOL_CALLS: 2 tool calls"}))
    last = stub.last_body["messages"][-1]
    assert last["role"] == "user" and "MULTIPLE_TOOL_CALLS" in last["content"]


@pytest.mark.parametrize(
    ("status", "body", "headers", "code", "retryable"),
    [
        (
            429,
            {"error": {"message": "Rate limit reached", "type": "requests"}},
            {"retry-after": "7"},
            "RATE_LIMITED",
            True,
        ),
        (500, {"error": {"message": "The server had an error"}}, {}, "SERVICE_UNAVAILABLE", True),
        (503, {"error": {"message": "overloaded"}}, {}, "SERVICE_UNAVAILABLE", True),
        (
            401,
            {"error": {"message": f"Incorrect API key provided: {SECRET}.", "code": "invalid_api_key"}},
            {},
            "AUTH_FAILED",
            False,
        ),
        (403, {"error": {"message": "forbidden"}}, {}, "AUTH_FAILED", False),
        (
            400,
            {
                "error": {
                    "message": "This model's maximum context length is 128000 tokens.",
                    "type": "invalid_request_error",
                    "param": "messages",
                    "code": "context_length_exceeded",
                }
            },
            {},
            "CONTEXT_LENGTH_EXCEEDED",
            False,
        ),
        (
            404,
            {"error": {"message": "The model `gpt-9` does not exist", "code": "model_not_found"}},
            {},
            "PROVIDER_ERROR",
            False,
        ),
    ],
)
def test_provider_errors_are_classified_and_never_carry_the_key(
    stub: Any, decide_request: ModelRequest, status: int, body: Any, headers: dict[str, str], code: str, retryable: bool
) -> None:
    stub.queue(body, status=status, headers=headers)
    with pytest.raises(ModelCallError) as err:
        model(stub).complete(decide_request)
    exc = err.value
    assert (exc.code, exc.retryable, exc.status_code) == (code, retryable, status)
    assert SECRET not in str(exc) and SECRET not in json.dumps(exc.to_dict())
    if status == 429:
        assert exc.retry_after_s == 7.0
    assert len(stub.requests) == 1  # the SDK's own retries are off


def test_a_server_that_is_down_is_service_unavailable(decide_request: ModelRequest) -> None:
    down = OpenAICompatibleModel("m", api_key=SECRET, base_url="http://127.0.0.1:9/v1", timeout_s=2)
    with pytest.raises(ModelCallError) as err:
        down.complete(decide_request)
    assert err.value.code == "SERVICE_UNAVAILABLE" and err.value.retryable
    assert SECRET not in str(err.value)


def test_a_slow_server_is_a_timeout(stub: Any, decide_request: ModelRequest) -> None:
    stub.queue(completion({"role": "assistant", "content": "{}"}), delay_s=1.0)
    with pytest.raises(ModelCallError) as err:
        model(stub, timeout_s=0.2).complete(decide_request)
    assert err.value.code == "TIMEOUT" and err.value.retryable
    assert "sk-" not in repr(model(stub))


@pytest.mark.parametrize(
    ("arguments", "code"),
    [
        ('{"material_id": "m2", "material_id": "m1"}', "DUPLICATE_KEY"),
        ('{"material_id": "m1", "n": NaN}', "NON_FINITE_NUMBER"),
        ('{"material_id": "m1", "n": 1e400}', "NON_FINITE_NUMBER"),
    ],
)
def test_tool_arguments_are_read_strictly(stub: Any, decide_request: ModelRequest, arguments: str, code: str) -> None:
    calls = [tool_call("read_material", arguments)]
    stub.queue(completion({"role": "assistant", "content": None, "tool_calls": calls}))
    assert model(stub).complete(decide_request).rejection_code == code


def test_a_reply_over_the_default_size_limit_is_refused_unread(stub: Any, decide_request: ModelRequest) -> None:
    text = json.dumps({"type": "FINISH", "reason": "x" * 70_000})
    stub.queue(completion({"role": "assistant", "content": text}))
    reply = model(stub).complete(decide_request)
    assert reply.rejection_code == "REPLY_TOO_LARGE"
    assert len(reply.text) < 2_000
    stub.queue(completion({"role": "assistant", "content": text}))
    assert model(stub, max_reply_bytes=None).complete(decide_request).rejection_code is None
