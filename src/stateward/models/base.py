"""The Model protocol every controller uses; controllers never call a provider SDK directly."""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field


class ActionSpec(BaseModel):
    """An action the model may propose at this step, with its argument schema."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=dict)


class ModelRequest(BaseModel):
    """What a model sees: the goal, what has been observed, and the actions visible right now."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    purpose: str  # "decide" (one ControlDecision), "plan", "content"
    goal: str
    inventory: list[str] = Field(default_factory=list)
    observations: list[dict[str, Any]] = Field(default_factory=list)
    visible_actions: list[ActionSpec] = Field(default_factory=list)
    facts: dict[str, Any] = Field(default_factory=dict)
    instructions: str = ""
    # Set by the runtime's corrective-message policy: providers append it as a user message naming the error.
    correction: str | None = None


class Usage(BaseModel):
    """What one model call cost, as the provider reported it (cost only where a price is configured)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    input_tokens: int = 0
    output_tokens: int = 0
    latency_ms: float = 0.0
    provider_request_id: str | None = None
    cost_usd: float | None = None


class ModelReply(BaseModel):
    """Raw text as the model produced it; parsing it is the Runtime's job.

    A provider that can already see the reply is not exactly one decision (two native tool calls, a
    thinking-only reply) says so in ``rejection_code``; the Runtime then refuses it by that name.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str
    usage: Usage = Field(default_factory=Usage)
    model: str = "unknown"
    rejection_code: str | None = None
    rejection_message: str | None = None
    # Provider-side facts kept for the record, never parsed: why generation stopped, and any prose the
    # model wrote beside its single native tool call.
    stop_reason: str | None = None
    commentary: str | None = None


AttemptSink = Callable[[dict[str, Any]], None]

# Set by the Runtime around a decision: a failed model attempt that may have reached the provider is
# handed here (and made durable) before any retry, so a resume never silently repeats it.
model_attempt_sink: ContextVar[AttemptSink | None] = ContextVar("stateward_model_attempt_sink", default=None)


class Model(Protocol):
    """A signal source backed by a model: it turns a request into raw text (or a native tool call), never into control.
    The Runtime parses and validates what comes back."""

    name: str

    def complete(self, request: ModelRequest) -> ModelReply: ...
