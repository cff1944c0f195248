"""The run's operational metrics as OpenTelemetry instruments (the API only: no-ops until a provider is set).

GenAI client metrics follow the semantic conventions (``gen_ai.client.token.usage``,
``gen_ai.client.operation.duration``); every :class:`~stateward.observability.signals.Signal` is a
counter ``stateward.<name>`` (Prometheus: ``stateward_<name>_total``), moved by the events a run records.
The instruments are made on first use, and only once OpenTelemetry may have a provider behind it
(``otel_state.py``): until then nothing is recorded, and the API is not even imported.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from stateward.core.events import NewEvent
from stateward.models.base import ModelCall
from stateward.observability.otel_state import METRICS_API, may_be_configured
from stateward.observability.signals import Signal, counts, signals_of

if TYPE_CHECKING:
    from opentelemetry.metrics import Counter, Histogram, MeterProvider

METER_NAME = "stateward"
# The conventions' advised bucket boundaries (seconds; tokens).
DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)


_ChatAttributes = tuple[dict[str, str], dict[str, str], dict[str, str]]
Measure = tuple[str, float, Mapping[str, str]]  # a histogram of ``_Instruments`` by name, a value, its attributes
_MAX_CACHED = 256


class RunMetrics:
    """Counters and histograms of runs, fed by the driver's observer (one instance per process is enough)."""

    def __init__(self, provider: MeterProvider | None = None):
        """``provider``: where to record (default: the global provider, looked up when first needed)."""
        self._provider = provider
        self._instruments: _Instruments | None = None
        self._chat: dict[tuple[str, str, str | None], _ChatAttributes] = {}
        self._tool: dict[tuple[str, str], dict[str, str]] = {}

    @property
    def active(self) -> bool:
        """Whether anything reads these instruments: a provider was given, or one was set globally since
        (until then the API's global provider is a proxy with nothing behind it)."""
        if self._provider is not None:
            return True
        if not may_be_configured(METRICS_API):
            return False
        from opentelemetry import metrics

        return type(metrics.get_meter_provider()).__name__ != "_ProxyMeterProvider"

    def _made(self) -> _Instruments | None:
        """The instruments, made on first use; None (record nothing) while no provider can be behind them."""
        made = self._instruments
        if made is None and (self._provider is not None or may_be_configured(METRICS_API)):
            from opentelemetry import metrics

            made = self._instruments = _Instruments(self._provider or metrics.get_meter_provider())
        return made

    def events(self, events: Sequence[NewEvent]) -> None:
        """Count what the run just recorded."""
        made = self._made()
        if made is None:
            return
        for event in events:
            for signal, attrs in signals_of(event.type, event.payload):
                made.counters[signal].add(1, attrs)

    def model_call(self, call: ModelCall) -> None:
        """Token usage and duration of one chat call (``error.type`` on a failed one)."""
        self.record(self.chat_measures(call))

    def tool_call(self, seconds: float, attrs: Mapping[str, str]) -> None:
        """Duration of one call through the Tool Gateway, by tool and status."""
        self.record((("tool_duration", seconds, attrs),))

    def chat_measures(self, call: ModelCall) -> list[Measure]:
        """What one chat call records: its duration, and its input and output tokens when it answered."""
        attrs, inputs, outputs = self._chat_attributes(call.provider, call.model, call.error_code)
        measures: list[Measure] = [("operation_duration", (call.ended_ns - call.started_ns) / 1e9, attrs)]
        if call.reply is not None:
            usage = call.reply.usage
            measures.append(("token_usage", usage.input_tokens, inputs))
            measures.append(("token_usage", usage.output_tokens, outputs))
        return measures

    def record(self, measures: Iterable[Measure]) -> None:
        """Record histogram measurements (the ``_Instruments`` attribute named by each)."""
        made = self._made()
        if made is not None:
            for name, value, attrs in measures:
                getattr(made, name).record(value, attrs)

    def add(self, counts: Iterable[tuple[Signal, Mapping[str, str], int]]) -> None:
        """Move counters by the given amounts."""
        made = self._made()
        if made is not None:
            for signal, attrs, n in counts:
                made.counters[signal].add(n, attrs)

    def tool_attributes(self, tool: str, status: str) -> Mapping[str, str]:
        """The attributes of a gateway call's duration, made once per tool and status (bounded as the chat's)."""
        key = (tool, status)
        found = self._tool.get(key)
        if found is None:
            found = {"gen_ai.tool.name": tool, "stateward.tool.status": status}
            if len(self._tool) < _MAX_CACHED:
                self._tool[key] = found
        return found

    def _chat_attributes(self, provider: str, model: str, error: str | None) -> _ChatAttributes:
        """The three attribute sets of a chat call, made once per provider, model and error (a run makes
        the same few on every step); bounded, so a model naming itself differently each time cannot grow it."""
        key = (provider, model, error)
        found = self._chat.get(key)
        if found is None:
            attrs = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": provider, "gen_ai.request.model": model}
            if error is not None:
                attrs["error.type"] = error
            found = (attrs, {**attrs, "gen_ai.token.type": "input"}, {**attrs, "gen_ai.token.type": "output"})
            if len(self._chat) < _MAX_CACHED:
                self._chat[key] = found
        return found


class MetricsBatch:
    """One drive's measurements, kept until handed over together (``spans.py`` says when): histogram
    values in order (a chat call's made when it returns, so the call itself is not kept; a tool call's
    attributes at the hand-over), counter increments summed per attribute set (a thousand tool calls: one
    ``add``)."""

    def __init__(self, metrics: RunMetrics):
        self._metrics = metrics
        self._measures: list[Measure] = []
        self._tools: list[tuple[float, str, str]] = []  # seconds, tool, status
        self._counts: dict[tuple[Signal, tuple[tuple[str, str], ...]], tuple[Mapping[str, str], int]] = {}

    def __len__(self) -> int:
        return len(self._measures) + len(self._tools) + len(self._counts)

    def events(self, events: Sequence[NewEvent]) -> None:
        """Keep the counter increments of what the run just recorded."""
        counted = self._counts
        for event in events:
            if not counts(event.type):
                continue
            for signal, attrs in signals_of(event.type, event.payload):
                key = (signal, tuple(attrs.items()))
                found = counted.get(key)
                counted[key] = (attrs, 1) if found is None else (found[0], found[1] + 1)

    def model_call(self, call: ModelCall) -> None:
        """Keep one chat call's duration and token counts."""
        self._measures.extend(self._metrics.chat_measures(call))

    def tool_call(self, seconds: float, tool: str, status: str) -> None:
        """Keep one gateway call's duration."""
        self._tools.append((seconds, tool, status))

    def hand_over(self) -> None:
        """Record everything kept so far, then start empty."""
        measures, tools, counted = self._measures, self._tools, self._counts
        self._measures, self._tools, self._counts = [], [], {}
        metrics = self._metrics
        if counted:
            metrics.add((signal, attrs, n) for (signal, _), (attrs, n) in counted.items())
        for seconds, tool, status in tools:
            measures.append(("tool_duration", seconds, metrics.tool_attributes(tool, status)))
        if measures:
            metrics.record(measures)


class _Instruments:
    """The instruments of one meter provider."""

    def __init__(self, provider: MeterProvider):
        meter = provider.get_meter(METER_NAME)
        self.token_usage: Histogram = meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Tokens used per model call, by gen_ai.token.type (input / output).",
            explicit_bucket_boundaries_advisory=TOKEN_BUCKETS,
        )
        self.operation_duration: Histogram = meter.create_histogram(
            "gen_ai.client.operation.duration",
            unit="s",
            description="Duration of one model call (chat) as the client saw it.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self.tool_duration: Histogram = meter.create_histogram(
            "stateward.tool.duration",
            unit="s",
            description="Duration of one call through the Tool Gateway (retries and reconciliation included).",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self.counters: dict[Signal, Counter] = {
            s: meter.create_counter(f"stateward.{s.value}", unit="1", description=f"Recorded {s.value}.")
            for s in Signal
        }
