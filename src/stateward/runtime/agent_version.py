"""An agent's version when its registration names none: a fingerprint of what it is made of.

Two processes that would drive a run differently must not both drive it. The fingerprint covers what
decides a run's path and what its approvals are bound to: the tools (names, input schemas, side-effect,
approval and retry policy), the controller's kind and shape (a workflow's nodes and edges, a plan run's
config), the budget and the approval and expiry policy. Anything that is code rather than data (a
model object, a handler, a policy function) enters by its qualified name only, so the fingerprint is
the same in every process that runs the same definition, and changes when a tool, a node or a bound does.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import math
from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from stateward.core.errors import ErrorCode, UserError

if TYPE_CHECKING:
    from stateward.runtime.agent import Agent

FINGERPRINT_PREFIX = "fp-"
_MAX_DEPTH = 8
_MAX_ITEMS = 10_000  # entries described in all; a larger definition is cut (and says so in the text hashed)


def fingerprint(agent: Agent) -> str:
    """``fp-`` and 16 hex digits of the SHA-256 of the agent's :func:`definition`."""
    text = json.dumps(definition(agent), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return FINGERPRINT_PREFIX + hashlib.sha256(text.encode()).hexdigest()[:16]


def definition(agent: Agent) -> dict[str, Any]:
    """The agent's definition as plain JSON data: what the fingerprint hashes (and a diff can show)."""
    walker = _Walker()
    return {
        "name": agent.name,
        "controller": {
            "kind": agent.controller.mode,
            "type": _qualname(type(agent.controller)),
            "shape": walker.public_attributes(agent.controller),
        },
        "tools": [_tool(spec, walker) for spec in sorted(agent.tools, key=lambda s: s.name)],
        "budget": agent.budget.model_dump(mode="json"),
        "permissions": sorted(agent.permissions),
        "inventory": list(agent.inventory),
        "policy": {
            "request_ttl_s": None if agent.request_ttl is None else agent.request_ttl.total_seconds(),
            "approver_role": agent.approver_role,
            "on_request_expiry": str(agent.on_request_expiry),
            "on_rejected_signal": str(agent.on_rejected_signal),
            "escalation_role": agent.escalation_role,
            "on_refusal": str(agent.on_refusal),
            "max_question_chars": agent.max_question_chars,
            "wait_policy": _qualname(agent.wait_policy),
            "finish_policy": _qualname(agent.finish_policy),
        },
    }


def _tool(spec: Any, walker: _Walker) -> dict[str, Any]:
    """One tool as the model and the gateway see it; its handler and lookup by name only."""
    fields = (
        "name",
        "description",
        "permission",
        "side_effect",
        "requires_approval",
        "approval_scope",
        "timeout_s",
        "retry",
        "breaker",
        "max_result_bytes",
        "on_too_large",
        "redact",
    )
    described = {name: walker.value(getattr(spec, name, None), 1) for name in fields}
    described["input_schema"] = spec.input_schema() if hasattr(spec, "input_schema") else None
    described["handler"] = _qualname(spec.handler)
    described["lookup"] = None if spec.lookup is None else _qualname(spec.lookup)
    return described


class _Walker:
    """Turns definition objects into JSON: data by value, code by name, bounded in depth and size."""

    def __init__(self) -> None:
        self.items = 0

    def public_attributes(self, obj: Any) -> dict[str, Any]:
        """A controller's shape: its public attributes (its collaborators by type name only)."""
        names = sorted(k for k in vars(obj) if not k.startswith("_")) if hasattr(obj, "__dict__") else []
        return {name: self.value(getattr(obj, name), 1) for name in names}

    def value(self, obj: Any, depth: int) -> Any:
        self.items += 1
        if self.items > _MAX_ITEMS or depth > _MAX_DEPTH:
            return "<cut>"
        if obj is None or isinstance(obj, bool | int | str):
            return obj
        if isinstance(obj, float):
            return obj if math.isfinite(obj) else repr(obj)
        if isinstance(obj, enum.Enum):
            return self.value(obj.value, depth + 1)
        if isinstance(obj, timedelta):
            return obj.total_seconds()
        if isinstance(obj, BaseModel):
            body = {name: self.value(getattr(obj, name), depth + 1) for name in type(obj).model_fields}
            return {"type": _qualname(type(obj)), **body}
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            body = {f.name: self.value(getattr(obj, f.name), depth + 1) for f in dataclasses.fields(obj)}
            return {"type": _qualname(type(obj)), **body}
        if isinstance(obj, Mapping):
            return {str(k): self.value(v, depth + 1) for k, v in sorted(obj.items(), key=lambda kv: str(kv[0]))}
        if isinstance(obj, list | tuple):
            return [self.value(v, depth + 1) for v in obj]
        if isinstance(obj, set | frozenset):
            values = [self.value(v, depth + 1) for v in obj]
            return sorted(values, key=lambda v: json.dumps(v, sort_keys=True, default=str))
        if callable(obj) and hasattr(obj, "__qualname__"):
            return "code:" + _qualname(obj)
        return "object:" + _qualname(type(obj))


def _qualname(obj: Any) -> str:
    module = getattr(obj, "__module__", None) or ""
    name = getattr(obj, "__qualname__", None) or type(obj).__qualname__
    return f"{module}.{name}" if module else str(name)


MAX_VERSION_CHARS = 100


def check_version(version: object) -> str:
    """A version is 1-100 printable characters without spaces (INVALID_AGENT_VERSION otherwise)."""
    if not isinstance(version, str) or not 0 < len(version) <= MAX_VERSION_CHARS or not version.isprintable():
        raise UserError(
            f"an agent version must be 1-{MAX_VERSION_CHARS} printable characters, not {version!r}"[:300],
            code=ErrorCode.INVALID_AGENT_VERSION,
        )
    if any(c.isspace() for c in version):
        raise UserError(f"an agent version has no spaces: {version!r}"[:300], code=ErrorCode.INVALID_AGENT_VERSION)
    return version
