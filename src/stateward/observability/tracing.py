"""What the Runtime reports a run's progress to: :class:`Telemetry`, light enough to import on every path.

The spans themselves (``spans.py``) and the metrics' instruments need the OpenTelemetry API; this module
imports neither. A Telemetry given no provider looks the global one up only when a drive starts and
OpenTelemetry may be configured (``otel_state.py``), so a process with nothing configured never imports
OpenTelemetry at all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stateward.core.state import RunState
from stateward.observability.content import ContentPolicy
from stateward.observability.metrics import RunMetrics
from stateward.observability.otel_state import TRACE_API, may_be_configured

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer, TracerProvider

    from stateward.observability.spans import Segment

TRACER_NAME = "stateward"


class Telemetry:
    """Spans on the given (default: global) tracer provider and metrics on the given (default: global)
    meter provider, content off unless asked for."""

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
        self._provider = tracer_provider
        self._tracer: Tracer | None = None
        self.metrics = metrics or RunMetrics()
        self.content = content or ContentPolicy.from_env()

    @property
    def tracer(self) -> Tracer:
        """The ``stateward`` tracer of the given provider, or of the global one (its proxy follows a
        provider set later); imports the OpenTelemetry API on first use."""
        tracer = self._tracer
        if tracer is None:
            if self._provider is None:
                from opentelemetry import trace

                tracer = trace.get_tracer_provider().get_tracer(TRACER_NAME)
            else:
                tracer = self._provider.get_tracer(TRACER_NAME)
            self._tracer = tracer
        return tracer

    def segment(self, state: RunState, agent: str, mode: str) -> Segment | None:
        """Open the span of one drive of ``state``'s run (continuing its stored trace, if any). None when
        disabled, or when nothing would record it: no span recording and no meter provider behind the
        metrics (the default with no SDK configured), so the run pays for no hook at all."""
        if not self.enabled:
            return None
        traced = self._provider is not None or may_be_configured(TRACE_API)
        if not traced and not self.metrics.active:
            return None  # nothing configured: OpenTelemetry is not even imported
        from stateward.observability.spans import Segment

        segment = Segment(self, state, agent, mode)
        if segment.recording or self.metrics.active:
            return segment
        segment.span.end()
        return None
