"""The Model protocol every controller uses; controllers never call a provider SDK directly."""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, Protocol, runtime_checkable

from stateward.core.bridge import blocking, in_bridge, resolve, run_coroutine
from stateward.core.model_io import ActionSpec, ModelReply, ModelRequest, Usage

__all__ = [
    "ActionSpec",
    "AnyModel",
    "AsyncModel",
    "AttemptSink",
    "Model",
    "ModelReply",
    "ModelRequest",
    "Usage",
    "complete",
    "model_attempt_sink",
]


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
