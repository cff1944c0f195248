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
