"""Spans of a run, following the OpenTelemetry GenAI conventions, built at the Runtime's seams.

Each drive of a run is one segment, ``invoke_agent {agent}``; under it ``plan {id}`` (per plan version),
``work_item {id}`` > ``attempt {n}``, and inside those ``chat {model}``, ``execute_tool {name}`` and
``verify {artifact}``. Decisions, refusals and transitions are span events. A run that stops in one
process and resumes in another stays one trace: the first segment's context is kept with the run
(``RunState.trace``), every later segment is its child and links to the segment before it.

Only the OpenTelemetry API is used here: with no SDK configured every span is a non-recording no-op and
a segment does nothing beyond one ``is_recording`` check per hook.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode, Tracer, TracerProvider
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from stateward.core.events import EventType, NewEvent
from stateward.core.state import RunState, TraceLink
from stateward.models.base import ModelCall
from stateward.observability.content import ContentPolicy
from stateward.observability.metrics import RunMetrics
from stateward.tools.redaction import RedactionRules
from stateward.tools.types import ToolOutcome

TRACER_NAME = "stateward"
_PROPAGATOR = TraceContextTextMapPropagator()
_FAILED = ("FAILED",)

# Per event type, the payload keys a span event keeps: ids, versions, hashes, codes — never content.
EVENT_ATTRIBUTES: dict[EventType, tuple[str, ...]] = {
    EventType.SIGNAL_RECEIVED: ("signal_source", "step"),
    EventType.RUNTIME_VALIDATED: ("runtime_decision", "decision_type", "transition", "code", "action_digest"),
    EventType.STATE_TRANSITION: ("state_before", "state_after", "reason", "by"),
    EventType.ILLEGAL_TRANSITION: ("code",),
    EventType.ACTION_BLOCKED: ("action", "reason"),
    EventType.ACTION_REFUSED: ("request_id",),
    EventType.PENDING_RECORDED: ("pending_request_id", "kind", "asked_by"),
    EventType.REQUEST_ANSWERED: ("request_id", "verdict", "by"),
    EventType.ARTIFACT_WRITTEN: ("name", "version", "sha256"),
    EventType.BRANCH_TAKEN: ("node", "branch"),
    EventType.WORK_ITEM_BLOCKED: ("work_item_id", "code"),
    EventType.TERMINATION_RECORDED: ("decision", "reason"),
    EventType.CONSTRAINT_DEVIATION_RECORDED: ("constraint", "kind"),
    EventType.HANDOFF_RECORDED: ("reason", "request_id"),
    EventType.READINESS_EVALUATED: ("ready", "reason_code"),
    EventType.REACT_DECISION: ("work_item_id", "action", "stop_reason"),
    EventType.MODEL_CALL_FAILED: ("error", "code"),
    EventType.RUN_RESUMED: ("by", "from_status"),
    EventType.RUN_EXITED: ("status", "terminal_reason"),
    EventType.BUDGET_EXHAUSTED: ("dimension",),
    EventType.STEP_CRASHED: ("error", "count", "retries"),
    EventType.AGENT_UNAVAILABLE: ("error", "count", "retries"),
    EventType.MODEL_UNAVAILABLE: ("error", "count", "retries"),
}


# Events a span already stands for (its own span, or the chat / tool span of the step).
_SPANNED = frozenset({EventType.TOOL_ATTEMPTED, EventType.REACT_DECISION})


def _routine(p: Mapping[str, Any]) -> bool:
    """An accepted tool call: its ``execute_tool`` span is the record; refusals and stops stay span events."""
    return p.get("runtime_decision") == "accepted" and p.get("decision_type") == "EXECUTE_TOOL"


def event_attributes(event: NewEvent) -> dict[str, Any]:
    """The scalar, content-free attributes a span event carries for ``event``."""
    keys = EVENT_ATTRIBUTES.get(event.type, ())
    out: dict[str, Any] = {}
    for key in keys:
        value = event.payload.get(key)
        if isinstance(value, str | bool | int | float):
            out[f"stateward.{key}"] = value
    return out


class Telemetry:
    """What the Runtime reports a run's progress to: spans on the given (default: global) tracer
    provider and metrics on the given (default: global) meter provider, content off unless asked for."""

    def __init__(
        self,
        tracer_provider: TracerProvider | None = None,
        metrics: RunMetrics | None = None,
        content: ContentPolicy | None = None,
        *,
        enabled: bool = True,
    ):
        """``enabled=False``: no span, metric or hook at all (not even the API's no-ops)."""
        self.enabled = enabled
        provider = tracer_provider or trace.get_tracer_provider()
        self.tracer: Tracer = provider.get_tracer(TRACER_NAME)
        self.metrics = metrics or RunMetrics()
        self.content = content or ContentPolicy.from_env()

    def segment(self, state: RunState, agent: str, mode: str) -> Segment | None:
        """Open the span of one drive of ``state``'s run (continuing its stored trace, if any). None when
        disabled, or when nothing would record it: no span recording and no meter provider behind the
        metrics (the default with no SDK configured), so the run pays for no hook at all."""
        if not self.enabled:
            return None
        segment = Segment(self, state, agent, mode)
        if segment.recording or self.metrics.active:
            return segment
        segment.span.end()
        return None


def _context(carrier: Mapping[str, str]) -> Context:
    return _PROPAGATOR.extract(dict(carrier))


def _carrier(span: Span) -> dict[str, str]:
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
    return carrier


class _Item:
    __slots__ = ("attempt", "span")

    def __init__(self, span: Span, attempt: Span):
        self.span = span
        self.attempt = attempt


class Segment:
    """The telemetry of one drive: its span tree and the metrics its events move."""

    def __init__(self, telemetry: Telemetry, state: RunState, agent: str, mode: str):
        self._t = telemetry
        self._metrics = telemetry.metrics
        link = state.trace
        parent: Context | None = None
        links: list[Link] = []
        if link is not None:
            parent = _context(link.root)
            last = trace.get_current_span(_context(link.last)).get_span_context()
            if last.is_valid:
                links.append(Link(last, {"stateward.link": "previous_segment"}))
        self.span = telemetry.tracer.start_span(
            f"invoke_agent {agent}",
            context=parent,
            kind=SpanKind.INTERNAL,
            links=links,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": agent,
                "gen_ai.conversation.id": state.run_id,
                "stateward.run.id": state.run_id,
                "stateward.run.tenant": state.tenant,
                "stateward.controller.mode": mode,
                "stateward.segment.from_status": state.status.value,
                "stateward.segment.continued": link is not None,
            },
        )
        self.recording = self.span.is_recording()
        self.trace = (
            TraceLink(root=link.root if link is not None else _carrier(self.span), last=_carrier(self.span))
            if self.recording
            else None
        )
        self._plan: Span | None = None
        self._items: dict[str, _Item] = {}
        self._current: str | None = None
        self._calls: list[ModelCall] = []
        self._ctx_span: Span | None = None
        self._ctx: Context | None = None

    # -- where children go ----------------------------------------------------------------------
    def _parent(self) -> Span:
        item = self._items.get(self._current) if self._current is not None else None
        if item is not None:
            return item.attempt
        if self._items:
            return next(reversed(self._items.values())).attempt
        return self._plan or self.span

    def _context_of(self, span: Span) -> Context:
        """The context whose current span is ``span``, made once per parent (every step has children)."""
        ctx = self._ctx
        if ctx is None or span is not self._ctx_span:
            ctx = trace.set_span_in_context(span)
            self._ctx_span, self._ctx = span, ctx
        return ctx

    def _child(self, name: str, kind: SpanKind = SpanKind.INTERNAL, *, under: Span | None = None, **kw: Any) -> Span:
        return self._t.tracer.start_span(name, context=self._context_of(under or self._parent()), kind=kind, **kw)

    # -- hooks the driver calls -----------------------------------------------------------------
    def model_call(self, call: ModelCall) -> None:
        """A model call just returned or raised: metrics now, its span once the step says where it belongs."""
        self._metrics.model_call(call)
        if self.recording:
            self._calls.append(call)

    def observe(self, events: Sequence[NewEvent]) -> None:
        """Events the run recorded (or is about to, for a step's notes before its tool call)."""
        self._metrics.events(events)
        if not self.recording:
            return
        routine = any(e.type is EventType.RUNTIME_VALIDATED and _routine(e.payload) for e in events)
        for event in events:
            if not (routine and event.type is EventType.SIGNAL_RECEIVED):
                self._on_event(event)
        self._flush_calls()

    @contextmanager
    def tool_call(self, tool: str, args: Mapping[str, Any], redact: RedactionRules | None) -> Iterator[_ToolSpan]:
        """Around one call through the gateway: ``execute_tool {tool}``, its outcome set by the caller."""
        self._flush_calls()
        recorder = _ToolSpan(self, tool, args, redact)
        try:
            yield recorder
        finally:
            recorder.end()

    def end(self, state: RunState) -> None:
        """The drive is over: close what is open, say how the segment ended."""
        if not self.recording:
            return
        self._flush_calls()
        for item in self._items.values():
            for span in (item.attempt, item.span):
                span.set_attribute("stateward.segment.ended_with", state.status.value)
                span.end()
        self._items.clear()
        if self._plan is not None:
            self._plan.end()
        self.span.set_attribute("stateward.run.status", state.status.value)
        if state.terminal_reason is not None:
            self.span.set_attribute("stateward.run.terminal_reason", state.terminal_reason)
        self.span.set_attribute("stateward.run.steps", state.usage.steps)
        if state.status.value in _FAILED:
            self.span.set_status(Status(StatusCode.ERROR, state.terminal_reason or "failed"))
        self.span.end()

    # -- events to spans ------------------------------------------------------------------------
    def _on_event(self, event: NewEvent) -> None:
        kind = event.type
        p = event.payload
        if kind is EventType.PLAN_RECORDED and "refused_patch" not in p:
            self._open_plan(p)
        elif kind is EventType.WORK_ITEM_STARTED:
            self._open_item(p)
        elif kind is EventType.WORK_ITEM_ENDED:
            self._close_item(p)
        elif kind is EventType.VERIFICATION_RECORDED:
            self._verification(p)
        elif kind not in _SPANNED and not (kind is EventType.RUNTIME_VALIDATED and _routine(p)):
            wid = p.get("work_item_id")
            if isinstance(wid, str) and wid in self._items:
                self._current = wid
            self._parent().add_event(kind.value, event_attributes(event))

    def _open_plan(self, p: Mapping[str, Any]) -> None:
        if self._plan is not None:
            self._plan.end()
        self._plan = self._t.tracer.start_span(
            f"plan {p.get('plan_id', '')}".strip(),
            context=trace.set_span_in_context(self.span),
            attributes={
                "stateward.plan.id": str(p.get("plan_id", "")),
                "stateward.plan.version": int(p.get("plan_version") or 0),
                "stateward.plan.work_items": int(p.get("work_items") or 0),
                "stateward.plan.base_version": int(p.get("base_version") or 0),
            },
        )

    def _open_item(self, p: Mapping[str, Any]) -> None:
        wid = str(p.get("work_item_id", ""))
        old = self._items.pop(wid, None)
        if old is not None:
            old.attempt.end()
            old.span.end()
        parent = trace.set_span_in_context(self._plan or self.span)
        span = self._t.tracer.start_span(f"work_item {wid}", context=parent, attributes={"stateward.work_item.id": wid})
        attempt_no = int(p.get("attempt") or 1)
        attempt = self._t.tracer.start_span(
            f"attempt {attempt_no}",
            context=trace.set_span_in_context(span),
            attributes={"stateward.work_item.id": wid, "stateward.attempt.number": attempt_no},
        )
        self._items[wid] = _Item(span, attempt)
        self._current = wid

    def _close_item(self, p: Mapping[str, Any]) -> None:
        wid = str(p.get("work_item_id", ""))
        item = self._items.pop(wid, None)
        if item is None:
            return
        outcome = str(p.get("outcome") or "")
        error = p.get("error")
        for span in (item.attempt, item.span):
            span.set_attribute("stateward.work_item.outcome", outcome)
            if error:
                span.set_attribute("error.type", str(error))
                span.set_status(Status(StatusCode.ERROR, str(error)))
            span.end()
        if self._current == wid:
            self._current = None

    def _verification(self, p: Mapping[str, Any]) -> None:
        artifact = str(p.get("artifact", ""))
        span = self._child(
            f"verify {artifact}",
            attributes={
                "stateward.artifact": artifact,
                "stateward.verification.outcome": str(p.get("outcome", "")),
                "stateward.verification.reason_code": str(p.get("reason_code") or ""),
                "stateward.verification.checks": len(p.get("checks") or ()),
            },
        )
        for check in p.get("checks") or ():
            span.add_event(
                "check",
                {"stateward.check.name": str(check.get("name")), "stateward.check.verdict": str(check.get("verdict"))},
            )
        span.end()

    def _flush_calls(self) -> None:
        calls, self._calls = self._calls, []
        for call in calls:
            self._chat_span(call)

    def _chat_span(self, call: ModelCall) -> None:
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": call.provider,
            "gen_ai.request.model": call.model,
        }
        if call.request.purpose != "decide":  # the routine purpose is left out; planning, content, ... are said
            attrs["stateward.model.purpose"] = call.request.purpose
        reply = call.reply
        if reply is not None:
            if reply.model and reply.model != call.model:  # the model that answered, when not the one named
                attrs["gen_ai.response.model"] = reply.model
            attrs["gen_ai.usage.input_tokens"] = reply.usage.input_tokens
            attrs["gen_ai.usage.output_tokens"] = reply.usage.output_tokens
            attrs["gen_ai.response.finish_reasons"] = (reply.stop_reason or "stop",)
            if reply.usage.provider_request_id:
                attrs["gen_ai.response.id"] = reply.usage.provider_request_id
        content = self._t.content
        if content.capture:
            attrs["gen_ai.input.messages"] = content.render(call.request.model_dump(mode="json"))
            if reply is not None:
                attrs["gen_ai.output.messages"] = content.render(reply.text)
        under = (self._plan or self.span) if call.request.purpose == "plan" else None  # the planner's call
        span = self._child(
            f"chat {call.model}", SpanKind.CLIENT, under=under, attributes=attrs, start_time=call.started_ns
        )
        code = call.error_code or (reply.rejection_code if reply is not None else None)
        if code is not None:
            span.set_attribute("error.type", code)
            span.set_status(Status(StatusCode.ERROR, code))
        span.end(end_time=call.ended_ns)


class _ToolSpan:
    """One ``execute_tool`` span. Its parent is fixed when the call starts; the span itself is made when the
    call returns, with its start time and every attribute at once (one pass through the SDK's attribute
    checks, nothing set twice). ``done`` records what the gateway answered."""

    def __init__(self, segment: Segment, tool: str, args: Mapping[str, Any], redact: RedactionRules | None):
        self._segment = segment
        self._tool = tool
        self._started = time.perf_counter()
        self._attrs: dict[str, str] = {"gen_ai.tool.name": tool}
        self._span_attrs: dict[str, Any] | None = None
        self._under: Context | None = None
        self._start_ns = 0
        self._error: str | None = None
        if segment.recording:
            self._under = segment._context_of(segment._parent())
            self._start_ns = time.time_ns()
            attributes: dict[str, Any] = {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": tool,
                "gen_ai.tool.type": "function",
            }
            content = segment._t.content
            if content.capture:
                rendered = content.render(dict(args), redact)
                if rendered is not None:
                    attributes["gen_ai.tool.call.arguments"] = rendered
            self._span_attrs = attributes

    def done(self, outcome: ToolOutcome, call_id: str) -> None:
        status = outcome.status.value
        self._attrs["stateward.tool.status"] = status
        attrs = self._span_attrs
        if attrs is None:
            return
        attrs["gen_ai.tool.call.id"] = call_id
        attrs["stateward.tool.status"] = status
        # What most calls share (executed once, by one attempt) is left out, as in the event log.
        if outcome.runtime_action.value != "EXECUTE":
            attrs["stateward.tool.runtime_action"] = outcome.runtime_action.value
        if len(outcome.attempts) != 1:
            attrs["stateward.tool.attempts"] = len(outcome.attempts)
        if outcome.handler_calls != 1:
            attrs["stateward.tool.handler_calls"] = outcome.handler_calls
        if outcome.idempotency_key and outcome.idempotency_key != call_id:
            attrs["stateward.tool.idempotency_key"] = outcome.idempotency_key
        if outcome.error_code is not None:
            attrs["error.type"] = outcome.error_code.value
        if status != "SUCCESS":
            self._error = status
        content = self._segment._t.content
        if content.capture:
            rendered = content.render(outcome.result)
            if rendered is not None:
                attrs["gen_ai.tool.call.result"] = rendered

    def end(self) -> None:
        self._segment._metrics.tool_call(time.perf_counter() - self._started, self._attrs)
        if self._span_attrs is None:
            return
        span = self._segment._t.tracer.start_span(
            f"execute_tool {self._tool}", context=self._under, attributes=self._span_attrs, start_time=self._start_ns
        )
        if self._error is not None:
            span.set_status(Status(StatusCode.ERROR, self._error))
        span.end()
