"""A deterministic model driven by a policy function: the offline signal source for tests and demos.

The policy sees the same ModelRequest a real model would, so a scripted run resumed in another
process continues exactly where the script says, without replaying call counts.
"""

from __future__ import annotations

import inspect
import json
import math
from collections.abc import Awaitable, Callable
from typing import Any

from stateward.core.errors import ErrorCode, UserError
from stateward.models.base import ModelReply, ModelRequest, Usage

Policy = Callable[[ModelRequest], "str | dict[str, Any]"]
AsyncPolicy = Callable[[ModelRequest], "str | dict[str, Any] | Awaitable[str | dict[str, Any]]"]
# ``json.dumps(out, ensure_ascii=False)`` with one encoder built once: dumps with an option builds one per call.
_REPLY = json.JSONEncoder(ensure_ascii=False)


class ScriptedModel:
    """A deterministic model driven by a policy function: the offline signal source for tests and demos.

    The policy gets the same ModelRequest a real model would and returns a decision as a dict (or raw
    text). It should decide from the request alone, so a run resumed in another process goes on alike:
    ``request.observations`` (each tool attempt: action, args, status, result, error_code),
    ``request.facts["artifacts"]`` (latest version per name), ``request.facts["approved_actions"]``
    (approvals not yet used up: tool and args) and ``request.facts["last_answer"]`` (request_id,
    verdict, text, guarded_args of the latest answer). ``calls`` keeps every request, for assertions."""

    def __init__(self, policy: Policy, *, name: str = "scripted"):
        self.name = name
        self._policy = policy
        self.calls: list[ModelRequest] = []

    def complete(self, request: ModelRequest) -> ModelReply:
        """Answer from the policy, deterministically, and remember the request."""
        self.calls.append(request)
        return scripted_reply(request, self._policy(request), self.name)


def scripted_reply(request: ModelRequest, out: str | dict[str, Any], model: str) -> ModelReply:
    """A policy's answer as the reply a provider would give (token counts estimated from lengths)."""
    text = out if isinstance(out, str) else _REPLY.encode(out)
    return ModelReply(
        text=text,
        usage=Usage(input_tokens=request.json_chars() // 4, output_tokens=len(text) // 4),
        model=model,
    )


class AsyncScriptedModel:
    """:class:`ScriptedModel` as an async model: ``await acomplete(request)``, after ``latency_s`` of
    non-blocking waiting (a provider's round trip). The policy may be a plain or an ``async`` function.

    Under the async Runtime the wait is an ``await`` on the event loop, so many runs wait at once; it
    is what ``benchmarks/bench_async.py`` drives. ``calls`` keeps every request, for assertions."""

    def __init__(self, policy: AsyncPolicy, *, name: str = "scripted-async", latency_s: float = 0.0):
        if not (math.isfinite(latency_s) and latency_s >= 0):
            raise UserError(
                f"latency_s must be a finite number >= 0 (got {latency_s})", code=ErrorCode.INVALID_MODEL_CONFIG
            )
        self.name = name
        self.latency_s = latency_s
        self._policy = policy
        self.calls: list[ModelRequest] = []

    async def acomplete(self, request: ModelRequest) -> ModelReply:
        """Wait ``latency_s`` (a stand-in for a provider's round trip), then answer from the policy."""
        self.calls.append(request)
        if self.latency_s:
            import asyncio  # here, not at the top: the sync scripted model never loads it

            await asyncio.sleep(self.latency_s)
        out = self._policy(request)
        if inspect.isawaitable(out):
            out = await out
        return scripted_reply(request, out, self.name)
