"""The real providers' ``acomplete`` over ``AsyncOpenAI`` / ``AsyncAnthropic``, against the local stub.

The async path shares the sync one's request building, reply mapping, size limits, error
classification and usage code, so these tests check that the two send the same request and read the
same reply; that ``complete(model, request)`` picks ``acomplete`` inside a bridge and ``complete``
outside it; that RetryingModel / RecordingModel are async exactly when their inner model is; and that
a run under ``Runtime.astart`` over an OpenAI provider is native on the loop and records a failed
attempt before its retry.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from stateward import Agent, Budget, ReActController, RunStatus, Runtime, ToolRegistry, tool
from stateward.core.bridge import run_bridged
from stateward.core.decision import DecisionType, parse_decision
from stateward.core.events import EventType
from stateward.models.anthropic import AnthropicModel
from stateward.models.base import AsyncModel, ModelReply, ModelRequest, complete, model_attempt_sink
from stateward.models.config import model_from_spec
from stateward.models.errors import ModelCallError, ServiceUnavailableError
from stateward.models.openai_compat import OpenAICompatibleModel
from stateward.models.recording import RecordingModel
from stateward.models.retrying import RetryingModel
from stateward.models.scripted import AsyncScriptedModel, ScriptedModel
from stateward.store.sqlite import SQLiteStore

OPENAI_KEY = "sk-test-DO-NOT-LEAK-4f9a2c"
ANTHROPIC_KEY = "sk-ant-test-DO-NOT-LEAK-77c1"
T = TypeVar("T")

Closable = OpenAICompatibleModel | AnthropicModel


def run_async(model: Closable, call: Callable[[], Awaitable[T]]) -> T:
    """``await call()`` on a fresh loop, then close the async client made on that loop."""

    async def main() -> T:
        try:
            return await call()
        finally:
            await model.aclose()

    return asyncio.run(main())


# -- OpenAI-compatible --------------------------------------------------------------------------------
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


def tool_calls(*calls: dict[str, Any]) -> dict[str, Any]:
    return completion({"role": "assistant", "content": None, "tool_calls": list(calls)}, "tool_calls")


def openai_model(stub: Any, **kw: Any) -> OpenAICompatibleModel:
    return OpenAICompatibleModel("gpt-4o-mini", api_key=OPENAI_KEY, base_url=f"{stub.url}/v1", **kw)


def test_openai_tools_mode_async_round_trip(stub: Any, decide_request: ModelRequest) -> None:
    stub.queue(tool_calls(tool_call("read_material", '{"material_id": "m1"}')), headers={"x-request-id": "req_9"})
    model = openai_model(stub, prices={"gpt-4o-mini": (0.15, 0.60)})
    reply = run_async(model, lambda: model.acomplete(decide_request))

    decision = parse_decision(reply.text)
    assert (decision.action, decision.args) == ("read_material", {"material_id": "m1"})
    assert reply.rejection_code is None and reply.stop_reason == "tool_calls"
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (82, 17)
    assert reply.usage.provider_request_id == "req_9"
    assert reply.usage.cost_usd == pytest.approx(82 * 0.15 / 1e6 + 17 * 0.60 / 1e6)
    assert reply.usage.latency_ms > 0
    sent = stub.last_body
    assert [t["function"]["name"] for t in sent["tools"]][-2:] == ["request_user_input", "finish"]
    assert (sent["tool_choice"], sent["parallel_tool_calls"]) == ("required", False)
    assert stub.requests[-1]["headers"]["authorization"] == f"Bearer {OPENAI_KEY}"


def test_openai_json_schema_mode_async_round_trip(stub: Any, decide_request: ModelRequest) -> None:
    text = '{"type": "EXECUTE_TOOL", "action": "list_materials", "args": {}}'
    stub.queue(completion({"role": "assistant", "content": text}))
    model = openai_model(stub, mode="json_schema")
    reply = run_async(model, lambda: model.acomplete(decide_request))

    assert reply.text == text and reply.rejection_code is None
    assert parse_decision(reply.text).action == "list_materials"
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (82, 17)
    assert "tools" not in stub.last_body and stub.last_body["response_format"]["type"] == "json_schema"


def test_openai_async_rejected_reply_is_named(stub: Any, decide_request: ModelRequest) -> None:
    stub.queue(
        tool_calls(
            tool_call("read_material", '{"material_id": "m1"}', "call_1"),
            tool_call("read_material", '{"material_id": "m2"}', "call_2"),
        )
    )
    model = openai_model(stub)
    reply = run_async(model, lambda: model.acomplete(decide_request))
    assert reply.rejection_code == "MULTIPLE_TOOL_CALLS"
    assert reply.usage.input_tokens == 82  # a refused reply still cost its tokens


@pytest.mark.parametrize(
    ("status", "headers", "code", "retryable"),
    [
        (429, {"retry-after": "7"}, "RATE_LIMITED", True),
        (503, {}, "SERVICE_UNAVAILABLE", True),
        (401, {}, "AUTH_FAILED", False),
    ],
)
def test_openai_async_errors_are_classified(
    stub: Any, decide_request: ModelRequest, status: int, headers: dict[str, str], code: str, retryable: bool
) -> None:
    stub.queue({"error": {"message": f"no ({OPENAI_KEY})"}}, status=status, headers=headers)
    model = openai_model(stub)
    with pytest.raises(ModelCallError) as err:
        run_async(model, lambda: model.acomplete(decide_request))
    assert (err.value.code, err.value.retryable, err.value.status_code) == (code, retryable, status)
    assert OPENAI_KEY not in str(err.value) and OPENAI_KEY not in json.dumps(err.value.to_dict())
    if status == 429:
        assert err.value.retry_after_s == 7.0
    assert len(stub.requests) == 1  # the SDK's own retries are off on the async client too


# -- Anthropic ----------------------------------------------------------------------------------------
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


def anthropic_model(stub: Any, **kw: Any) -> AnthropicModel:
    return AnthropicModel("claude-test-model", api_key=ANTHROPIC_KEY, base_url=stub.url, **kw)


def test_anthropic_tools_mode_async_round_trip(stub: Any, decide_request: ModelRequest) -> None:
    content = [{"type": "text", "text": "Reading it."}, tool_use("read_material", {"material_id": "m1"})]
    stub.queue(message(content, "tool_use"), headers={"request-id": "req_018E"})
    model = anthropic_model(stub, prices={"claude-test-model": (3.0, 15.0)})
    reply = run_async(model, lambda: model.acomplete(decide_request))

    decision = parse_decision(reply.text)
    assert (decision.type, decision.action, decision.args) == (
        DecisionType.EXECUTE_TOOL,
        "read_material",
        {"material_id": "m1"},
    )
    assert reply.commentary == "Reading it." and reply.stop_reason == "tool_use"
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (500, 91)
    assert reply.usage.provider_request_id == "req_018E"
    assert reply.usage.cost_usd == pytest.approx(500 * 3 / 1e6 + 91 * 15 / 1e6)
    assert stub.requests[-1]["path"] == "/v1/messages"
    assert stub.last_body["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}


@pytest.mark.parametrize("mode", ["json", "json_schema"])
def test_anthropic_json_modes_async_round_trip(stub: Any, decide_request: ModelRequest, mode: str) -> None:
    text = '{"type": "FINISH", "reason": "done"}'
    stub.queue(message([{"type": "text", "text": text}]))
    model = anthropic_model(stub, mode=mode)
    reply = run_async(model, lambda: model.acomplete(decide_request))

    assert reply.text == text and reply.rejection_code is None
    assert parse_decision(reply.text).type is DecisionType.FINISH
    assert reply.usage.input_tokens == 500
    assert "tools" not in stub.last_body
    assert ("output_config" in stub.last_body) is (mode == "json_schema")


def test_anthropic_async_rejected_replies_are_named(stub: Any, decide_request: ModelRequest) -> None:
    body = json.dumps(message([tool_use("read_material", {"material_id": "PLACEHOLDER"})], "tool_use"))
    stub.queue(body.replace('{"material_id": "PLACEHOLDER"}', '{"material_id": "m2", "material_id": "m1"}'))
    stub.queue(message([{"type": "thinking", "thinking": "hmm", "signature": "sig"}]))
    model = anthropic_model(stub)

    async def both() -> list[ModelReply]:
        return [await model.acomplete(decide_request), await model.acomplete(decide_request)]

    duplicate, thinking = run_async(model, both)
    assert duplicate.rejection_code == "DUPLICATE_KEY"  # the raw body is read strictly on the async path too
    assert thinking.rejection_code == "THINKING_ONLY"


@pytest.mark.parametrize(
    ("status", "error_type", "code", "retryable"),
    [
        (429, "rate_limit_error", "RATE_LIMITED", True),
        (529, "overloaded_error", "SERVICE_UNAVAILABLE", True),
        (401, "authentication_error", "AUTH_FAILED", False),
    ],
)
def test_anthropic_async_errors_are_classified(
    stub: Any, decide_request: ModelRequest, status: int, error_type: str, code: str, retryable: bool
) -> None:
    headers = {"retry-after": "3"} if status == 429 else {}
    error = {"type": "error", "error": {"type": error_type, "message": f"no ({ANTHROPIC_KEY})"}}
    stub.queue(error, status=status, headers=headers)
    model = anthropic_model(stub)
    with pytest.raises(ModelCallError) as err:
        run_async(model, lambda: model.acomplete(decide_request))
    assert (err.value.code, err.value.retryable, err.value.status_code) == (code, retryable, status)
    assert ANTHROPIC_KEY not in str(err.value) and ANTHROPIC_KEY not in json.dumps(err.value.to_dict())
    if status == 429:
        assert err.value.retry_after_s == 3.0
    assert len(stub.requests) == 1


# -- one implementation, two clients ---------------------------------------------------------------
@pytest.mark.parametrize("provider", ["openai", "openai+json", "anthropic", "anthropic+json_schema"])
def test_sync_and_async_paths_send_the_same_request_and_read_the_same_reply(
    stub: Any, decide_request: ModelRequest, provider: str
) -> None:
    model: Closable
    if provider.startswith("openai"):
        answer = tool_calls(tool_call("read_material", '{"material_id": "m1"}'))
        model = openai_model(stub, mode="json_schema" if provider.endswith("json") else "tools")
    else:
        answer = message([tool_use("read_material", {"material_id": "m1"})], "tool_use")
        model = anthropic_model(stub, mode="json_schema" if provider.endswith("json_schema") else "tools")
    stub.queue(answer)
    stub.queue(answer)
    sync_reply = model.complete(decide_request)
    async_reply = run_async(model, lambda: model.acomplete(decide_request))

    assert stub.requests[0]["path"] == stub.requests[1]["path"]
    assert stub.requests[0]["body"] == stub.requests[1]["body"]
    latency = {"usage": {"latency_ms"}}
    assert sync_reply.model_dump(exclude=latency) == async_reply.model_dump(exclude=latency)
    model.close()


def test_each_event_loop_gets_its_own_async_client(stub: Any, decide_request: ModelRequest) -> None:
    finish = tool_calls(tool_call("finish", '{"reason": "done"}'))
    model = openai_model(stub)
    for _ in range(2):  # pooled connections of the first loop's client are useless on the second loop
        stub.queue(finish)
        assert run_async(model, lambda: model.acomplete(decide_request)).rejection_code is None


# -- which method complete(model, request) calls ------------------------------------------------------
class Both:
    """A model with both methods, saying which one ran."""

    name = "both"

    def __init__(self) -> None:
        self.used: list[str] = []

    def complete(self, request: ModelRequest) -> ModelReply:
        self.used.append("complete")
        return ModelReply(text='{"type": "FINISH", "reason": "sync"}')

    async def acomplete(self, request: ModelRequest) -> ModelReply:
        self.used.append("acomplete")
        return ModelReply(text='{"type": "FINISH", "reason": "async"}')


def test_under_the_sync_runtime_complete_prefers_the_sync_method(decide_request: ModelRequest) -> None:
    model = Both()
    assert isinstance(model, AsyncModel)
    assert "sync" in complete(model, decide_request).text
    assert model.used == ["complete"]


def test_inside_the_bridge_complete_prefers_the_async_method(decide_request: ModelRequest) -> None:
    model = Both()
    reply = asyncio.run(run_bridged(complete, model, decide_request))
    assert "async" in reply.text
    assert model.used == ["acomplete"]


# -- wrappers are async exactly when what they wrap is ---------------------------------------------------
def test_wrappers_have_acomplete_only_over_an_async_model(tmp_path: Path) -> None:
    sync_inner = ScriptedModel(lambda r: {"type": "FINISH", "reason": "x"})
    async_inner = AsyncScriptedModel(lambda r: {"type": "FINISH", "reason": "x"})
    assert not isinstance(RetryingModel(sync_inner), AsyncModel)
    assert not isinstance(RecordingModel(sync_inner, tmp_path / "r.jsonl"), AsyncModel)
    assert isinstance(RetryingModel(async_inner), AsyncModel)
    assert isinstance(RecordingModel(RetryingModel(async_inner), tmp_path / "r.jsonl"), AsyncModel)


class AsyncFlaky:
    """An async-only model failing with 503 ``failures`` times, then finishing; logs what happens."""

    name = "async-flaky"

    def __init__(self, failures: int, log: list[str]):
        self.failures = failures
        self.log = log

    async def acomplete(self, request: ModelRequest) -> ModelReply:
        self.log.append("call")
        if self.failures > 0:
            self.failures -= 1
            raise ServiceUnavailableError("upstream 503", provider="stub")
        return ModelReply(text='{"type": "FINISH", "reason": "ok"}')


def test_async_retrying_records_each_failed_attempt_before_retrying(
    tmp_path: Path, decide_request: ModelRequest
) -> None:
    log: list[str] = []
    recording = tmp_path / "exchanges.jsonl"
    model = RecordingModel(RetryingModel(AsyncFlaky(2, log), 3, base_delay_s=0.01), recording)

    async def main() -> ModelReply:
        token = model_attempt_sink.set(lambda attempt: log.append(f"failed {attempt['attempt']}"))
        try:
            return await model.acomplete(decide_request)
        finally:
            model_attempt_sink.reset(token)

    reply = asyncio.run(main())
    assert reply.rejection_code is None
    assert log == ["call", "failed 1", "call", "failed 2", "call"]
    [entry] = [json.loads(line) for line in recording.read_text().splitlines()]
    assert entry["reply"]["text"] == reply.text


def test_async_retry_backoff_does_not_block_the_loop(decide_request: ModelRequest) -> None:
    log: list[str] = []
    model = RetryingModel(AsyncFlaky(1, log), 2, base_delay_s=0.2)

    async def ticker() -> int:
        ticks = 0
        while "call" not in log[1:]:
            ticks += 1
            await asyncio.sleep(0.01)
        return ticks

    async def main() -> tuple[ModelReply, int]:
        return await asyncio.gather(model.acomplete(decide_request), ticker())

    reply, ticks = asyncio.run(main())
    assert reply.rejection_code is None and log == ["call", "call"]
    assert ticks >= 5  # the loop kept turning during the 0.2 s backoff


# -- a run under the async Runtime over the stub -----------------------------------------------------
def test_astart_drives_a_run_over_an_openai_provider_natively(
    tmp_path: Path, stub: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    notes: list[str] = []

    @tool
    def note(text: str) -> dict[str, str]:
        """Write a note."""
        notes.append(text)
        return {"noted": text}

    stub.queue({"error": {"message": "overloaded"}}, status=503)
    stub.queue(tool_calls(tool_call("note", '{"text": "hello"}')))
    stub.queue(tool_calls(tool_call("finish", '{"reason": "noted"}')))
    model = model_from_spec("openai:gpt-4o-mini", base_url=f"{stub.url}/v1", env={})
    assert isinstance(model, RetryingModel) and isinstance(model, AsyncModel)
    model.base_delay_s = 0.01
    provider = model.inner
    assert isinstance(provider, OpenAICompatibleModel)
    used_sync: list[str] = []

    def sync_call(request: ModelRequest) -> ModelReply:
        used_sync.append(request.purpose)
        raise AssertionError("the sync client was used under the async Runtime")

    monkeypatch.setattr(provider, "complete", sync_call)
    agent = Agent(
        name="notes", controller=ReActController(model), tools=ToolRegistry([note]), budget=Budget(max_steps=6)
    )
    runtime = Runtime(SQLiteStore(tmp_path / "runs.db"))

    async def main() -> Any:
        try:
            return await asyncio.wait_for(runtime.astart(agent, "Note hello, then finish."), 30)
        finally:
            await provider.aclose()

    try:
        state = asyncio.run(main())
        events = [e.type for e in runtime.events(state.run_id)]
    finally:
        runtime.close()
    assert state.status is RunStatus.COMPLETED, state.terminal_reason
    assert notes == ["hello"] and used_sync == []  # every call went through AsyncOpenAI
    assert len(stub.requests) == 3
    # The failed attempt was made durable, and counted, before the retry that succeeded.
    assert events.index(EventType.MODEL_CALL_FAILED) < events.index(EventType.SIGNAL_RECEIVED)
    assert state.usage.model_calls == 3
    assert state.usage.input_tokens == 2 * 82
