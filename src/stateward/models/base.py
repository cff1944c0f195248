"""The Model protocol every controller uses; controllers never call a provider SDK directly."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from stateward.core.bridge import blocking, in_bridge, resolve, run_coroutine
from stateward.core.interrupt import CallCancelled, PauseToken, abandon_on_pause, cancel_on_pause, pause_token
from stateward.core.model_io import ActionSpec, ModelReply, ModelRequest, Usage

__all__ = [
    "ActionSpec",
    "AnyModel",
    "AsyncModel",
    "AttemptSink",
    "Model",
    "ModelCall",
    "ModelCallSink",
    "ModelReply",
    "ModelRequest",
    "Usage",
    "complete",
    "model_attempt_sink",
    "model_call_sink",
    "provider_of",
]


AttemptSink = Callable[[dict[str, Any]], None]

# Set by the Runtime around a decision: a failed model attempt that may have reached the provider is
# handed here (and made durable) before any retry, so a resume never silently repeats it.
model_attempt_sink: ContextVar[AttemptSink | None] = ContextVar("stateward_model_attempt_sink", default=None)


class ModelCall(BaseModel):
    """One model call as telemetry sees it: who was asked, what came back (or which error), and when."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    provider: str
    request: ModelRequest
    reply: ModelReply | None = None
    error_code: str | None = None
    started_ns: int
    ended_ns: int


ModelCallSink = Callable[[ModelCall], None]

# Set by the Runtime around a decision when telemetry observes the run: every call through ``complete``
# is reported here once it returns or raises (a span and metrics are built from it afterwards).
model_call_sink: ContextVar[ModelCallSink | None] = ContextVar("stateward_model_call_sink", default=None)


def provider_of(model: object) -> str:
    """The GenAI provider name of a model: its ``provider`` attribute, else the prefix of ``provider:model``."""
    provider = getattr(model, "provider", None)
    if isinstance(provider, str) and provider:
        return provider
    name = str(getattr(model, "name", ""))
    return name.split(":", 1)[0] if ":" in name else "stateward"


class Model(Protocol):
    """A signal source backed by a model: it turns a request into raw text (or a native tool call), never into control.
    The Runtime parses and validates what comes back."""

    name: str

    def complete(self, request: ModelRequest) -> ModelReply:
        """Answer one request; raise ``ModelCallError`` on a failed call so the runtime can classify it."""


@runtime_checkable
class AsyncModel(Protocol):
    """A model whose call is a coroutine (e.g. over ``AsyncOpenAI``): the async Runtime awaits it on its
    event loop while other runs go on; the synchronous Runtime runs it on a loop of its own."""

    name: str

    async def acomplete(self, request: ModelRequest) -> ModelReply:
        """Answer one request without blocking the event loop; raise ``ModelCallError`` on a failed call."""


AnyModel = Model | AsyncModel


def complete(model: AnyModel, request: ModelRequest) -> ModelReply:
    """The one way controllers call a model, sync or async, under either Runtime.

    Under the async Runtime an ``acomplete`` is awaited natively (preferred when a model has both) and
    a blocking ``complete`` runs on a thread; under the synchronous one a ``complete`` is called as
    always (preferred when a model has both) and an ``acomplete`` is run to completion on a loop of its own.
    A call is reported to the ``model_call_sink`` the Runtime set, if any (telemetry).
    """
    sink = model_call_sink.get()
    if sink is None:
        return _complete(model, request)
    started = time.time_ns()
    name = str(getattr(model, "name", "unknown"))
    try:
        reply = _complete(model, request)
    except Exception as exc:
        code = str(getattr(exc, "code", type(exc).__name__))
        sink(_call(model, name, request, None, code, started))
        raise
    sink(_call(model, reply.model or name, request, reply, reply.rejection_code, started))
    return reply


def _call(
    model: object, name: str, request: ModelRequest, reply: ModelReply | None, code: str | None, started: int
) -> ModelCall:
    return ModelCall(
        model=name,
        provider=provider_of(model),
        request=request,
        reply=reply,
        error_code=code,
        started_ns=started,
        ended_ns=time.time_ns(),
    )


def _complete(model: AnyModel, request: ModelRequest) -> ModelReply:
    token = pause_token.get()
    if token is not None:  # a pause asked meanwhile cancels the call (see core/interrupt.py)
        return _cancellable(model, request, token)
    if in_bridge():
        if isinstance(model, AsyncModel):
            return resolve(model.acomplete(request))
        sync_model = model
        return blocking(lambda: sync_model.complete(request))
    if not hasattr(model, "complete") and isinstance(model, AsyncModel):  # a Protocol check is slow: last
        return run_coroutine(model.acomplete(request))
    return model.complete(request)


def _cancellable(model: AnyModel, request: ModelRequest, token: PauseToken) -> ModelReply:
    """The call, given up when the step's pause token is set: an async call's task is cancelled, a blocking
    call's thread abandoned (its late reply discarded)."""
    name = str(getattr(model, "name", "model"))
    if in_bridge():
        if isinstance(model, AsyncModel):
            return resolve(cancel_on_pause(model.acomplete(request), "model", name, token))
        sync_model, context = model, contextvars.copy_context()
        future = asyncio.get_running_loop().run_in_executor(None, context.run, sync_model.complete, request)
        return resolve(cancel_on_pause(future, "model", name, token))
    if not hasattr(model, "complete") and isinstance(model, AsyncModel):  # a Protocol check is slow: last
        return run_coroutine(cancel_on_pause(model.acomplete(request), "model", name, token))
    sync, sink, gone = model, model_attempt_sink.get(), threading.Event()

    def record(attempt: dict[str, Any]) -> None:
        if sink is not None and not gone.is_set():  # an abandoned call's later retries are not the run's
            sink(attempt)

    def call() -> ModelReply:
        model_attempt_sink.set(record)
        return sync.complete(request)

    try:
        return abandon_on_pause(call, "model", name, token)
    except CallCancelled:
        gone.set()
        raise
