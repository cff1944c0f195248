"""Spans of a run, following the OpenTelemetry GenAI conventions, built at the Runtime's seams.

Each drive of a run is one segment, ``invoke_agent {agent}``; under it ``plan {id}`` (per plan version),
``work_item {id}`` > ``attempt {n}``, and inside those ``chat {model}``, ``execute_tool {name}`` and
``verify {artifact}``. Decisions, refusals and transitions are span events. A run that stops in one
process and resumes in another stays one trace: the first segment's context is kept with the run
(``RunState.trace``), every later segment is its child and links to the segment before it.

The spans of a step's calls are finished things (their parent, times and attributes are known when the
call returns), so a segment queues them, with the step's metric measurements, and hands the queue to
OpenTelemetry in one go: at most ``HAND_OVER_EVERY`` items or ``HAND_OVER_AFTER_S`` later, before any
span they may sit under ends, and when the drive ends. The SDK's code then runs a hundred times in a row
instead of twice per step between the store and the model, which costs about half as much CPU
(``benchmarks/bench_tracing.py``); what a backend receives is the same, up to that delay.

Imported only when a span is needed (``tracing.py`` decides): this module imports the OpenTelemetry API.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, Protocol

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from stateward.core.contract import OutcomeStatus
from stateward.core.events import EventType, NewEvent
from stateward.core.state import RunState, TraceLink
from stateward.models.base import ModelCall
from stateward.observability.content import ContentPolicy
from stateward.observability.metrics import MetricsBatch, RunMetrics
from stateward.tools.redaction import RedactionRules
from stateward.tools.types import ToolOutcome

_PROPAGATOR = TraceContextTextMapPropagator()


class Telemetry(Protocol):
    """What a segment reports to: ``tracing.Telemetry``, named here by what it offers, so this module (which
    that one imports lazily) does not import it back."""

    @property
    def tracer(self) -> trace.Tracer:
        """The tracer spans are made on."""
        ...

    metrics: RunMetrics
    content: ContentPolicy


_FAILED = ("FAILED",)
HAND_OVER_EVERY = 128  # queued spans and measurements
HAND_OVER_AFTER_S = 0.1

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


def _all_routine(events: Sequence[NewEvent]) -> bool:
    """A step that makes no span event: an accepted call's signal and validation (its ``execute_tool`` span
    is the record), or the call's own ``tool_attempted``. Most steps are one of the two."""
    n = len(events)
    if n == 1:
        return events[0].type is EventType.TOOL_ATTEMPTED
    return (
        n == 2
        and events[0].type is EventType.SIGNAL_RECEIVED
        and events[1].type is EventType.RUNTIME_VALIDATED
        and _routine(events[1].payload)
    )


def event_attributes(event: NewEvent) -> dict[str, Any]:
    """The scalar, content-free attributes a span event carries for ``event``."""
    keys = EVENT_ATTRIBUTES.get(event.type, ())
    out: dict[str, Any] = {}
    for key in keys:
        value = event.payload.get(key)
        if isinstance(value, str | bool | int | float):
            out[f"stateward.{key}"] = value
    return out


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


class _Finished:
    """A span whose call is over, waiting in the segment's queue: everything the SDK will be given."""

    __slots__ = ("attributes", "end_ns", "error", "kind", "name", "parent", "start_ns")

    def __init__(
        self, name: str, kind: SpanKind, parent: Context, attributes: dict[str, Any], start_ns: int, end_ns: int
    ):
        self.name = name
        self.kind = kind
        self.parent = parent
        self.attributes = attributes
        self.start_ns = start_ns
        self.end_ns = end_ns
        self.error: str | None = None


class Segment:
    """The telemetry of one drive: its span tree and the metrics its events move."""

    def __init__(self, telemetry: Telemetry, state: RunState, agent: str, mode: str):
        self._t = telemetry
        self._tracer = telemetry.tracer
        link = state.trace
        parent: Context | None = None
        links: list[Link] = []
        if link is not None:
            parent = _context(link.root)
            last = trace.get_current_span(_context(link.last)).get_span_context()
            if last.is_valid:
                links.append(Link(last, {"stateward.link": "previous_segment"}))
        self.span = self._tracer.start_span(
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
        self._queue: list[_Finished] = []  # finished spans, handed over with the measurements
        self._measures = MetricsBatch(telemetry.metrics)
        self._due = time.monotonic() + HAND_OVER_AFTER_S

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

    # -- the queue ------------------------------------------------------------------------------
    def _hand_over_if_due(self) -> None:
        waiting = len(self._queue) + len(self._measures)
        if waiting >= HAND_OVER_EVERY or (waiting and time.monotonic() >= self._due):
            self.hand_over()

    def hand_over(self) -> None:
        """Give OpenTelemetry every queued span (in the order they were made) and measurement."""
        queue, self._queue = self._queue, []
        for done in queue:
            self._emit(done)
        self._measures.hand_over()
        self._due = time.monotonic() + HAND_OVER_AFTER_S

    def _emit(self, done: _Finished) -> None:
        span = self._tracer.start_span(
            done.name, context=done.parent, kind=done.kind, attributes=done.attributes, start_time=done.start_ns
        )
        if done.error is not None:
            span.set_status(Status(StatusCode.ERROR, done.error))
        span.end(end_time=done.end_ns)

    def _end_span(self, span: Span) -> None:
        """End a span that queued ones may sit under: they reach the SDK first."""
        if self._queue:
            self.hand_over()
        span.end()

    # -- hooks the driver calls -----------------------------------------------------------------
    def model_call(self, call: ModelCall) -> None:
        """A model call just returned or raised: its measurements queued now, its span once the step says
        where it belongs."""
        self._measures.model_call(call)
        if self.recording:
            self._calls.append(call)

    def observe(self, events: Sequence[NewEvent]) -> None:
        """Events the run recorded (or is about to, for a step's notes before its tool call)."""
        self._measures.events(events)
        if self.recording:
            if not _all_routine(events):
                routine = any(e.type is EventType.RUNTIME_VALIDATED and _routine(e.payload) for e in events)
                for event in events:
                    if not (routine and event.type is EventType.SIGNAL_RECEIVED):
                        self._on_event(event)
            if self._calls:
                self._queue_calls()
        self._hand_over_if_due()

    def tool_call(self, tool: str, args: Mapping[str, Any], redact: RedactionRules | None) -> _ToolSpan:
        """Around one call through the gateway (``with``): ``execute_tool {tool}``, its outcome set by the caller."""
        if self._calls:
            self._queue_calls()
        return _ToolSpan(self, tool, args, redact)

    def end(self, state: RunState) -> None:
        """The drive is over: close what is open, say how the segment ended."""
        self._queue_calls()
        self.hand_over()
        if not self.recording:
            return
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
            self._end_span(self._plan)
        self._plan = self._tracer.start_span(
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
            self._end_span(old.attempt)
            old.span.end()
        parent = trace.set_span_in_context(self._plan or self.span)
        span = self._tracer.start_span(f"work_item {wid}", context=parent, attributes={"stateward.work_item.id": wid})
        attempt_no = int(p.get("attempt") or 1)
        attempt = self._tracer.start_span(
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
        if self._queue:
            self.hand_over()
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
        span = self._tracer.start_span(
            f"verify {artifact}",
            context=self._context_of(self._parent()),
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

    def _queue_calls(self) -> None:
        """The step's model calls, now that it is known where they belong: queued as ``chat`` spans."""
        calls, self._calls = self._calls, []
        for call in calls:
            self._queue.append(self._chat_span(call))

    def _chat_span(self, call: ModelCall) -> _Finished:
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
        under = (self._plan or self.span) if call.request.purpose == "plan" else self._parent()  # the planner's call
        done = _Finished(
            f"chat {call.model}", SpanKind.CLIENT, self._context_of(under), attrs, call.started_ns, call.ended_ns
        )
        code = call.error_code or (reply.rejection_code if reply is not None else None)
        if code is not None:
            attrs["error.type"] = code
            done.error = code
        return done


class _ToolSpan:
    """One ``execute_tool`` span, a context manager around the call (a class, not a generator: it is
    entered once per step). Its parent is fixed when the call starts; the span is queued when the
    call returns, with its times and every attribute at once (one pass through the SDK's attribute
    checks, nothing set twice). ``done`` records what the gateway answered."""

    def __init__(self, segment: Segment, tool: str, args: Mapping[str, Any], redact: RedactionRules | None):
        self._segment = segment
        self._tool = tool
        self._status = "UNKNOWN"
        self._started = time.time_ns()
        self._span: _Finished | None = None
        if segment.recording:
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
            under = segment._context_of(segment._parent())
            self._span = _Finished(f"execute_tool {tool}", SpanKind.INTERNAL, under, attributes, self._started, 0)

    def done(self, outcome: ToolOutcome, call_id: str) -> None:
        status = self._status = outcome.status.value
        if self._span is None:
            return
        attrs = self._span.attributes
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
        content = self._segment._t.content
        if content.capture:
            rendered = content.render(outcome.result)
            if rendered is not None:
                attrs["gen_ai.tool.call.result"] = rendered
        if status != OutcomeStatus.SUCCESS:
            self._span.error = status

    def __enter__(self) -> _ToolSpan:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.end()

    def end(self) -> None:
        segment = self._segment
        ended = time.time_ns()
        seconds = max(0.0, (ended - self._started) / 1e9)  # the spans' wall clock: a clock step never makes it negative
        segment._measures.tool_call(seconds, self._tool, self._status)
        span = self._span
        if span is not None:
            span.end_ns = ended
            segment._queue.append(span)
