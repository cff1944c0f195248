"""A deterministic model driven by a policy function: the offline signal source for tests and demos.

The policy sees the same ModelRequest a real model would, so a scripted run resumed in another
process continues exactly where the script says, without replaying call counts.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from stateward.models.base import ModelReply, ModelRequest, Usage

Policy = Callable[[ModelRequest], "str | dict[str, Any]"]


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
        self.calls.append(request)
        out = self._policy(request)
        text = out if isinstance(out, str) else json.dumps(out, ensure_ascii=False)
        return ModelReply(
            text=text,
            usage=Usage(input_tokens=request.json_chars() // 4, output_tokens=len(text) // 4),
            model=self.name,
        )
