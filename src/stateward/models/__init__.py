"""Signal sources backed by models: they turn a request into raw text, never into control.

The public names below are imported on first use (PEP 562): the provider SDKs load only when a
provider is asked for. ``model_from_spec("openai:gpt-4o-mini")`` builds a provider from a spec string
(``openai:``, ``openai+json:``, ``anthropic:``, ``replay:<file>``; see :mod:`stateward.models.config`).
Each request names the document its reply must be (``ReplyContract``); the schema both providers send for
it, and its ``max_tokens``, come from :mod:`stateward.models.contracts`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stateward.models.anthropic import AnthropicModel
    from stateward.models.base import ActionSpec, AsyncModel, Model, ModelReply, ModelRequest, Usage, complete
    from stateward.models.config import model_from_spec, parse_spec
    from stateward.models.contracts import ReplyContract
    from stateward.models.errors import ModelCallError
    from stateward.models.local_server import start_local_server
    from stateward.models.openai_compat import OpenAICompatibleModel
    from stateward.models.recording import RecordingModel, ReplayModel
    from stateward.models.retrying import RetryingModel
    from stateward.models.scripted import AsyncScriptedModel, ScriptedModel

_EXPORTS: dict[str, str] = {
    "start_local_server": "stateward.models.local_server",
    "complete": "stateward.models.base",
    "ActionSpec": "stateward.models.base",
    "AnthropicModel": "stateward.models.anthropic",
    "AsyncModel": "stateward.models.base",
    "AsyncScriptedModel": "stateward.models.scripted",
    "Model": "stateward.models.base",
    "ModelCallError": "stateward.models.errors",
    "ModelReply": "stateward.models.base",
    "ModelRequest": "stateward.models.base",
    "OpenAICompatibleModel": "stateward.models.openai_compat",
    "RecordingModel": "stateward.models.recording",
    "ReplyContract": "stateward.models.contracts",
    "ReplayModel": "stateward.models.recording",
    "RetryingModel": "stateward.models.retrying",
    "ScriptedModel": "stateward.models.scripted",
    "Usage": "stateward.models.base",
    "model_from_spec": "stateward.models.config",
    "parse_spec": "stateward.models.config",
}

__all__ = (
    "ActionSpec",
    "AnthropicModel",
    "AsyncModel",
    "AsyncScriptedModel",
    "Model",
    "ModelCallError",
    "ModelReply",
    "ModelRequest",
    "OpenAICompatibleModel",
    "RecordingModel",
    "ReplayModel",
    "ReplyContract",
    "RetryingModel",
    "ScriptedModel",
    "Usage",
    "complete",
    "model_from_spec",
    "parse_spec",
    "start_local_server",
)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'stateward.models' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
