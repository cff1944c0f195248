"""The run's operational metrics as OpenTelemetry instruments (the API only: no-ops until a provider is set).

GenAI client metrics follow the semantic conventions (``gen_ai.client.token.usage``,
``gen_ai.client.operation.duration``); every :class:`~stateward.observability.signals.Signal` is a
counter ``stateward.<name>`` (Prometheus: ``stateward_<name>_total``), moved by the events a run records.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from opentelemetry import metrics
from opentelemetry.metrics import Counter, Histogram, MeterProvider

from stateward.core.events import NewEvent
from stateward.models.base import ModelCall
from stateward.observability.signals import Signal, signals_of

METER_NAME = "stateward"
# The conventions' advised bucket boundaries (seconds; tokens).
DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)


_ChatAttributes = tuple[dict[str, str], dict[str, str], dict[str, str]]
_MAX_CACHED = 256


class RunMetrics:
    """Counters and histograms of runs, fed by the driver's observer (one instance per process is enough)."""

    def __init__(self, provider: MeterProvider | None = None):
        self._given = provider is not None
        meter = (provider or metrics.get_meter_provider()).get_meter(METER_NAME)
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
        self._chat: dict[tuple[str, str, str | None], _ChatAttributes] = {}
        self.counters: dict[Signal, Counter] = {
            s: meter.create_counter(f"stateward.{s.value}", unit="1", description=f"Recorded {s.value}.")
            for s in Signal
        }

    @property
    def active(self) -> bool:
        """Whether anything reads these instruments: a provider was given, or one was set globally since
        (until then the API's global provider is a proxy with nothing behind it)."""
        return self._given or type(metrics.get_meter_provider()).__name__ != "_ProxyMeterProvider"

    def events(self, events: Sequence[NewEvent]) -> None:
        """Count what the run just recorded."""
        for event in events:
            for signal, attrs in signals_of(event.type, event.payload):
                self.counters[signal].add(1, attrs)

    def model_call(self, call: ModelCall) -> None:
        """Token usage and duration of one chat call (``error.type`` on a failed one)."""
        attrs, inputs, outputs = self._chat_attributes(call.provider, call.model, call.error_code)
        self.operation_duration.record((call.ended_ns - call.started_ns) / 1e9, attrs)
        if call.reply is not None:
            usage = call.reply.usage
            self.token_usage.record(usage.input_tokens, inputs)
            self.token_usage.record(usage.output_tokens, outputs)

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

    def tool_call(self, seconds: float, attrs: Mapping[str, str]) -> None:
        """Record one tool call's duration."""
        self.tool_duration.record(seconds, attrs)
