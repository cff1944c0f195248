"""The Model protocol every controller uses; controllers never call a provider SDK directly."""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from stateward.core.bridge import blocking, in_bridge, resolve, run_coroutine


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
    # The observations list as attached by ``with_history`` and the length of its JSON: see ``json_chars``.
    _history: _KnownSize | None = PrivateAttr(default=None)

    @classmethod
    def with_history(cls, observations: list[dict[str, Any]], json_chars: int, **fields: Any) -> ModelRequest:
        """A request whose observations are already JSON forms, attached as given: validating (copying)
        the whole history again on every step is what made a long run's loop quadratic.

        ``json_chars`` is the total length of the observations' compact JSON, so ``json_chars()`` of the
        request never serializes the history either. The dicts are shared: treat them as read-only.
        """
        request = cls(**fields).model_copy(update={"observations": observations})
        request._history = _KnownSize(observations, json_chars)
        return request

    def json_chars(self) -> int:
        """``len(self.model_dump_json())``, without serializing a history whose length is already known."""
        known = self._history
        if known is None or known.observations is not self.observations:  # e.g. replaced by model_copy
            return len(self.model_dump_json())
        rest = len(self.model_copy(update={"observations": []}).model_dump_json())
        return rest + known.chars + max(len(self.observations) - 1, 0)  # the commas between them


class _KnownSize:
    """A request's cached history size: a cache, not content, so it never makes two requests unequal."""

    __slots__ = ("chars", "observations")

    def __init__(self, observations: list[dict[str, Any]], chars: int):
        self.observations = observations
        self.chars = chars

    def __eq__(self, other: object) -> bool:
        return other is None or isinstance(other, _KnownSize)

    __hash__ = None  # type: ignore[assignment]


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


@runtime_checkable
class AsyncModel(Protocol):
    """A model whose call is a coroutine (e.g. over ``AsyncOpenAI``): the async Runtime awaits it on its
    event loop while other runs go on; the synchronous Runtime runs it on a loop of its own."""

    name: str

    async def acomplete(self, request: ModelRequest) -> ModelReply: ...


AnyModel = Model | AsyncModel


def complete(model: AnyModel, request: ModelRequest) -> ModelReply:
    """The one way controllers call a model, sync or async, under either Runtime.

    Under the async Runtime an ``acomplete`` is awaited natively (preferred when a model has both) and
    a blocking ``complete`` runs on a thread; under the synchronous one a ``complete`` is called as
    always (preferred when a model has both) and an ``acomplete`` is run to completion on a loop of its own.
    """
    if in_bridge():
        if isinstance(model, AsyncModel):
            return resolve(model.acomplete(request))
        sync_model = model
        return blocking(lambda: sync_model.complete(request))
    if isinstance(model, AsyncModel) and not hasattr(model, "complete"):
        return run_coroutine(model.acomplete(request))
    return model.complete(request)

