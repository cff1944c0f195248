"""A Model on the official ``anthropic`` SDK (Messages API), with the same mapping as the OpenAI provider.

Modes: ``tools`` (visible actions plus ``request_user_input`` and ``finish`` as tools; one ``tool_use``
block becomes one decision), ``json`` (no tools; the reply text is parsed by the Runtime) and
``json_schema`` (``json`` plus ``output_config.format``, where the server supports structured output).
Every other reply contract (plans, patches, content, judgements) never uses tools: its schema
(:mod:`stateward.models.contracts`) is sent as ``output_config.format`` in ``json_schema`` mode and
described in the system text in every text mode. The SDK's own retries are off: ``RetryingModel`` retries.

``complete`` uses the SDK's sync client, ``acomplete`` its ``AsyncAnthropic`` client (made on first use,
one per event loop, with the same options); both build the request, map the reply, apply the size
limit, classify errors and count usage with the same code.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Mapping
from typing import Any, Literal

import anthropic
from anthropic.types import Message, MessageParam

from stateward.core.model_io import ReplyContract
from stateward.models import contracts, mapping, prompt
from stateward.models.base import ModelReply, ModelRequest
from stateward.models.errors import ModelCallError, RejectionCode
from stateward.models.provider import PerLoopClient, Prices, classify_sdk_error, make_usage

AnthropicMode = Literal["tools", "json", "json_schema"]


class AnthropicModel:
    """``complete`` returns raw decision text or a named rejection; provider failures raise ModelCallError."""

    def __init__(
        self,
        model: str,
        *,
        api_key: str,
        base_url: str | None = None,
        mode: AnthropicMode = "tools",
        max_tokens: int | None = None,
        max_tokens_by_contract: Mapping[ReplyContract, int] | None = None,
        timeout_s: float = 60.0,
        prices: Prices | None = None,
        max_string: int = mapping.MAX_STRING,
        max_items: int | None = None,
        max_reply_bytes: int | None = mapping.DEFAULT_MAX_REPLY_BYTES,
        provider: str = "anthropic",
    ):
        self.name = f"{provider}:{model}"
        self.model = model
        self.mode: AnthropicMode = mode
        self.max_tokens = max_tokens  # one limit for every reply; None: each contract's default
        self.max_tokens_by = dict(max_tokens_by_contract or {})
        self.prices = prices
        self.max_string = max_string
        self.max_items = max_items  # maxItems of a plan document's or patch's arrays (None: the contract's)
        self.max_reply_bytes = max_reply_bytes
        self.provider = provider
        self._secret = api_key
        options: dict[str, Any] = {"api_key": api_key, "base_url": base_url, "timeout": timeout_s, "max_retries": 0}
        self._client = anthropic.Anthropic(**options)
        # Close the connection pool when this model goes away, even inside a reference cycle: left to the
        # garbage collector, a pooled socket can be finalized before its pool and leak.
        self._closer = weakref.finalize(self, self._client.close)
        # The same options; the factory holds them, not ``self``, so it never keeps the model alive.
        self._async = PerLoopClient(lambda: anthropic.AsyncAnthropic(**options))

    def close(self) -> None:
        """Close the sync client's connections (an async client is closed by ``aclose``)."""
        self._closer()

    async def aclose(self) -> None:
        """Close the async client made on the running loop, if any, and the sync client."""
        await self._async.aclose()
        self._closer()

    def __repr__(self) -> str:  # never show the key
        return f"AnthropicModel({self.name!r}, mode={self.mode!r})"

    def max_tokens_for(self, request: ModelRequest) -> int:
        """This request's reply limit: by the document it asks for (see ``contracts.max_tokens_for``)."""
        return contracts.max_tokens_for(request.reply_contract, flat=self.max_tokens, by_contract=self.max_tokens_by)

    def _messages(self, request: ModelRequest, native: bool) -> list[MessageParam]:
        blocks: list[Any] = [{"type": "text", "text": prompt.user_text(request, native_tools=native)}]
        correction = prompt.correction_text(request)
        if correction is not None:
            blocks.append({"type": "text", "text": correction})
        return [{"role": "user", "content": blocks}]

    def _create_args(self, request: ModelRequest) -> tuple[bool, dict[str, Any]]:
        """Whether tools are native for this request, and the ``messages.create`` arguments."""
        native = self.mode == "tools" and request.reply_contract is ReplyContract.DECISION
        extra: dict[str, Any] = {}
        if native:
            extra["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters}
                for t in mapping.tool_definitions(request)
            ]
            extra["tool_choice"] = {"type": "any", "disable_parallel_tool_use": True}
        elif self.mode == "json_schema":
            extra["output_config"] = {
                "format": {
                    "type": "json_schema",
                    "schema": contracts.response_schema(request, self.max_string, self.max_items)[1],
                }
            }
        args = {
            "model": self.model,
            "max_tokens": self.max_tokens_for(request),
            "system": prompt.system_text(
                request,
                native_tools=native,
                max_string=self.max_string,
                max_items=self.max_items,
                schema_sent=self.mode == "json_schema",
            ),
            "messages": self._messages(request, native),
        }
        return native, {**args, **extra}

    def _failure(self, exc: anthropic.AnthropicError) -> ModelCallError:
        return classify_sdk_error(exc, anthropic, provider=self.provider, secrets=[self._secret])

    def complete(self, request: ModelRequest) -> ModelReply:
        """One Messages API call; tool inputs are re-read strictly from the raw body."""
        _, args = self._create_args(request)
        started = time.monotonic()
        try:
            # The raw body too: the SDK decodes tool inputs with a lenient reader (a repeated key is
            # silently dropped, NaN accepted), so they are read strictly from the body as well.
            raw = self._client.messages.with_raw_response.create(**args)
            response = raw.parse()
            body = raw.text()
        except anthropic.AnthropicError as exc:
            raise self._failure(exc) from None
        return self._reply(response, request, (time.monotonic() - started) * 1000, body)

    async def acomplete(self, request: ModelRequest) -> ModelReply:
        """``complete`` over ``AsyncAnthropic``: the same request, reply mapping, limits and errors."""
        _, args = self._create_args(request)
        client = self._async.get()
        started = time.monotonic()
        try:
            raw = await client.messages.with_raw_response.create(**args)  # the raw body too, as in ``complete``
            response = await raw.parse()
            body = await raw.text()
        except anthropic.AnthropicError as exc:
            raise self._failure(exc) from None
        return self._reply(response, request, (time.monotonic() - started) * 1000, body)

    def _reply(
        self, response: Message, request: ModelRequest, latency_ms: float, body: str | None = None
    ) -> ModelReply:
        u = response.usage
        usage = make_usage(
            model=self.model,
            input_tokens=u.input_tokens + (u.cache_creation_input_tokens or 0) + (u.cache_read_input_tokens or 0),
            output_tokens=u.output_tokens,
            latency_ms=latency_ms,
            request_id=response._request_id or response.id or None,
            prices=self.prices,
        )
        texts = [b.text for b in response.content if b.type == "text"]
        calls = [mapping.ToolCall(b.name, b.input) for b in response.content if b.type == "tool_use"]
        thinking = any(b.type in ("thinking", "redacted_thinking") for b in response.content)
        text = "".join(texts)
        commentary = None
        too_large = mapping.oversized(text, calls, self.max_reply_bytes)
        strict = None if too_large is not None or not calls or body is None else mapping.body_rejection(body, calls)
        if too_large is not None:
            result = too_large
        elif strict is not None:
            result = strict
        elif response.stop_reason == "refusal":
            result = mapping.reject(RejectionCode.MODEL_REFUSED, "the model refused to answer", text)
        elif response.stop_reason == "max_tokens":
            limit = self.max_tokens_for(request)
            result = mapping.truncated(limit, u.output_tokens, text)
        elif calls:
            result = mapping.decision_from_tool_calls(calls, request)
            commentary = text or None
        else:
            result = mapping.text_reply(text, had_thinking=thinking)
        return ModelReply(
            text=result.text,
            usage=usage,
            model=self.name,
            rejection_code=None if result.rejection_code is None else result.rejection_code.value,
            rejection_message=result.rejection_message,
            stop_reason=response.stop_reason,
            commentary=commentary,
        )
