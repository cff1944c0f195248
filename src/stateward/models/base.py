"""The Model protocol every controller uses; controllers never call a provider SDK directly."""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, Protocol, cast, runtime_checkable

from pydantic import BaseModel, ConfigDict

from stateward.core.bridge import blocking, in_bridge, resolve, run_coroutine
from stateward.core.calls import TooManyAbandonedCalls, run_off_loop
from stateward.core.interrupt import CallCancelled, PauseToken, abandon_on_pause, cancel_on_pause, pause_token
from stateward.core.model_io import ActionSpec, ModelReply, ModelRequest, Usage
from stateward.models.errors import ServiceUnavailableError

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


def _as_async(model: AnyModel) -> AsyncModel | None:
    """The model if it is an AsyncModel: ``isinstance`` without the runtime-protocol machinery, which costs
    more than the rest of a scripted model call (asked at every call)."""
    return cast(AsyncModel, model) if hasattr(model, "acomplete") and hasattr(model, "name") else None


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
    amodel = _as_async(model)
    if in_bridge():
        if amodel is not None:
            return resolve(amodel.acomplete(request))
        sync_model = cast(Model, model)
        return blocking(lambda: sync_model.complete(request))
    if amodel is not None and not hasattr(model, "complete"):
        return run_coroutine(amodel.acomplete(request))
    return cast(Model, model).complete(request)


def _cancellable(model: AnyModel, request: ModelRequest, token: PauseToken) -> ModelReply:
    """The call, given up when the step's pause token is set: an async call's task is cancelled, a blocking
    call's thread abandoned (its late reply discarded). While too many abandoned calls are still running in
    this process, the call is refused unmade as the provider being unavailable (the run waits and retries)."""
    try:
        return _give_way(model, request, token, str(getattr(model, "name", "model")))
    except TooManyAbandonedCalls as exc:
        raise ServiceUnavailableError(str(exc), provider=provider_of(model), details=exc.details) from exc


def _give_way(model: AnyModel, request: ModelRequest, token: PauseToken, name: str) -> ModelReply:
    amodel = _as_async(model)
    if in_bridge():
        if amodel is not None:
            return resolve(cancel_on_pause(amodel.acomplete(request), "model", name, token))
        sync_model, context = cast(Model, model), contextvars.copy_context()
        waited = _off_loop(lambda: sync_model.complete(request), context)
        return resolve(cancel_on_pause(waited, "model", name, token))
    if amodel is not None and not hasattr(model, "complete"):
        return run_coroutine(cancel_on_pause(amodel.acomplete(request), "model", name, token))
    sync, sink = cast(Model, model), model_attempt_sink.get()
    gone: list[bool] = []  # set once the call is abandoned (a flag: an Event's lock and condition are not needed)

    def record(attempt: dict[str, Any]) -> None:
        if sink is not None and not gone:  # an abandoned call's later retries are not the run's
            sink(attempt)

    def call() -> ModelReply:
        model_attempt_sink.set(record)
        return sync.complete(request)

    try:
        return abandon_on_pause(call, "model", name, token)
    except CallCancelled:
        gone.append(True)
        raise


async def _off_loop(fn: Callable[[], ModelReply], context: contextvars.Context) -> ModelReply:
    """A blocking model call on a runner thread, awaited without blocking the loop (abandoned if cancelled)."""
    call = await run_off_loop(fn, context=context)
    return call.result()  # type: ignore[no-any-return]
