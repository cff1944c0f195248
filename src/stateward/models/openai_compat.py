"""A Model on the official ``openai`` SDK, for any OpenAI-compatible server (OpenAI, DeepSeek, vLLM,
llama.cpp, Ollama) selected by ``base_url``.

Two modes. ``tools``: visible actions (plus ``request_user_input`` and ``finish``) are native tools and
one tool call becomes one decision. ``json_schema``: for servers that cannot call tools, the reply is
constrained by ``response_format: json_schema`` and its text goes to the Runtime's strict parser.
Every other reply contract (plans, patches, content, judgements) always uses the JSON-schema mode,
with the schema of :mod:`stateward.models.contracts`; ``max_tokens`` is the contract's unless one is set.
The SDK's own retries are off:
``RetryingModel`` retries, so that every attempt can be recorded.

``complete`` uses the SDK's sync client, ``acomplete`` its ``AsyncOpenAI`` client (made on first use,
one per event loop, with the same options); both build the request, map the reply, apply the size
limit, classify errors and count usage with the same code.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Mapping
from typing import Any, Literal

import openai
from openai.types.chat import ChatCompletion, ChatCompletionMessageParam

from stateward.core.model_io import ReplyContract
from stateward.models import contracts, mapping, prompt
from stateward.models.base import ModelReply, ModelRequest
from stateward.models.errors import ModelCallError, RejectionCode
from stateward.models.provider import PerLoopClient, Prices, classify_sdk_error, make_usage

OpenAIMode = Literal["tools", "json_schema"]


class OpenAICompatibleModel:
    """``complete`` returns raw decision text or a named rejection; provider failures raise ModelCallError."""

    def __init__(
        self,
        model: str,
        *,
        api_key: str,
        base_url: str | None = None,
        mode: OpenAIMode = "tools",
        max_tokens: int | None = None,
        max_tokens_by_contract: Mapping[ReplyContract, int] | None = None,
        temperature: float | None = None,
        timeout_s: float = 60.0,
        strict_schema: bool = False,
        max_string: int = mapping.MAX_STRING,
        max_items: int | None = None,
        max_reply_bytes: int | None = mapping.DEFAULT_MAX_REPLY_BYTES,
        prices: Prices | None = None,
        provider: str = "openai",
    ):
        self.name = f"{provider}:{model}"
        self.model = model
        self.mode: OpenAIMode = mode
        self.max_tokens = max_tokens  # one limit for every reply; None: each contract's default
        self.max_tokens_by = dict(max_tokens_by_contract or {})
        self.temperature = temperature
        self.strict_schema = strict_schema
        self.max_string = max_string
        self.max_items = max_items  # maxItems of a plan document's or patch's arrays (None: the contract's)
        self.max_reply_bytes = max_reply_bytes
        self.prices = prices
        self.provider = provider
        self._secret = api_key
        self._options: dict[str, Any] = {
            "api_key": api_key,
            "base_url": base_url,
            "timeout": timeout_s,
            "max_retries": 0,
        }
        self._client = openai.OpenAI(**self._options)
        # Close the connection pool when this model goes away, even inside a reference cycle: left to the
        # garbage collector, a pooled socket can be finalized before its pool and leak.
        self._closer = weakref.finalize(self, self._client.close)
        options = self._options  # not ``self``: the factory must not keep the model alive
        self._async = PerLoopClient(lambda: openai.AsyncOpenAI(**options))

    def close(self) -> None:
        """Close the sync client's connections (an async client is closed by ``aclose``)."""
        self._closer()

    async def aclose(self) -> None:
        """Close the async client made on the running loop, if any, and the sync client."""
        await self._async.aclose()
        self._closer()

    def __repr__(self) -> str:  # never show the key
        return f"OpenAICompatibleModel({self.name!r}, mode={self.mode!r})"

    def max_tokens_for(self, request: ModelRequest) -> int:
        """This request's reply limit: by the document it asks for (see ``contracts.max_tokens_for``)."""
        return contracts.max_tokens_for(request.reply_contract, flat=self.max_tokens, by_contract=self.max_tokens_by)

    def _system(self, request: ModelRequest, native: bool) -> str:
        # Outside a native tool call the reply is always held to its schema by response_format.
        return prompt.system_text(
            request, native_tools=native, max_string=self.max_string, max_items=self.max_items, schema_sent=True
        )

    def _messages(self, request: ModelRequest, native: bool) -> list[ChatCompletionMessageParam]:
        messages: list[ChatCompletionMessageParam] = [
            {"role": "system", "content": self._system(request, native)},
            {"role": "user", "content": prompt.user_text(request, native_tools=native)},
        ]
        correction = prompt.correction_text(request)
        if correction is not None:
            messages.append({"role": "user", "content": correction})
        return messages

    def _create_args(self, request: ModelRequest) -> tuple[bool, dict[str, Any]]:
        """Whether tools are native for this request, and the ``chat.completions.create`` arguments."""
        native = self.mode == "tools" and request.reply_contract is ReplyContract.DECISION
        extra: dict[str, Any] = {}
        if native:
            extra["tools"] = [
                {
                    "type": "function",
                    "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
                }
                for t in mapping.tool_definitions(request)
            ]
            extra["tool_choice"] = "required"
            extra["parallel_tool_calls"] = False
        else:
            name, schema = contracts.response_schema(request, self.max_string, self.max_items)
            extra["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": name, "schema": schema, "strict": self.strict_schema},
            }
        if self.temperature is not None:
            extra["temperature"] = self.temperature
        limit = self.max_tokens_for(request)
        args = {"model": self.model, "messages": self._messages(request, native), "max_tokens": limit}
        return native, {**args, **extra}

    def _failure(self, exc: openai.OpenAIError) -> ModelCallError:
        return classify_sdk_error(exc, openai, provider=self.provider, secrets=[self._secret])

    def complete(self, request: ModelRequest) -> ModelReply:
        """One Chat Completions call, its failures mapped to ``ModelCallError`` kinds."""
        native, args = self._create_args(request)
        started = time.monotonic()
        try:
            response = self._client.chat.completions.create(**args)
        except openai.OpenAIError as exc:
            raise self._failure(exc) from None
        latency_ms = (time.monotonic() - started) * 1000
        return self._reply(response, request, native, latency_ms)

    async def acomplete(self, request: ModelRequest) -> ModelReply:
        """``complete`` over ``AsyncOpenAI``: the same request, reply mapping, limits and errors."""
        native, args = self._create_args(request)
        client = self._async.get()
        started = time.monotonic()
        try:
            response = await client.chat.completions.create(**args)
        except openai.OpenAIError as exc:
            raise self._failure(exc) from None
        latency_ms = (time.monotonic() - started) * 1000
        return self._reply(response, request, native, latency_ms)

    def _reply(self, response: ChatCompletion, request: ModelRequest, native: bool, latency_ms: float) -> ModelReply:
        usage = make_usage(
            model=self.model,
            input_tokens=response.usage.prompt_tokens if response.usage else 0,
            output_tokens=response.usage.completion_tokens if response.usage else 0,
            latency_ms=latency_ms,
            request_id=response._request_id or response.id or None,
            prices=self.prices,
        )
        meta: dict[str, Any] = {"usage": usage, "model": self.name}
        if not response.choices:
            return ModelReply(text="", rejection_code=RejectionCode.EMPTY_REPLY, rejection_message="no choices", **meta)
        choice = response.choices[0]
        message = choice.message
        text = message.content or ""
        meta["stop_reason"] = choice.finish_reason
        calls = [
            mapping.ToolCall(c.function.name, c.function.arguments)
            for c in message.tool_calls or []
            if c.type == "function"
        ]
        too_large = mapping.oversized(text, calls, self.max_reply_bytes)
        if too_large is not None:
            result = too_large
        elif message.refusal:
            result = mapping.reject(RejectionCode.MODEL_REFUSED, message.refusal[:500], text)
        elif choice.finish_reason == "length":
            limit = self.max_tokens_for(request)
            result = mapping.truncated(limit, response.usage.completion_tokens if response.usage else None, text)
        elif len(message.tool_calls or []) > len(calls):
            result = mapping.reject(RejectionCode.UNKNOWN_TOOL, "a non-function tool call", text)
        elif calls:
            result = mapping.decision_from_tool_calls(calls, request)
            meta["commentary"] = text or None
        else:
            reasoning = getattr(message, "reasoning_content", None) or getattr(message, "reasoning", None)
            result = mapping.text_reply(text, had_thinking=bool(reasoning))
        return ModelReply(
            text=result.text,
            rejection_code=None if result.rejection_code is None else result.rejection_code.value,
            rejection_message=result.rejection_message,
            **meta,
        )
