"""Telemetry of runs: OpenTelemetry spans and metrics at the Runtime's seams, and the same figures from
the event log (``stateward stats``). Only the OpenTelemetry API is imported on the hot path; the SDK,
exporters and Prometheus live in the ``otel`` extra and are imported only when asked for (``sdk.py``,
``prometheus.py``)."""

from stateward.observability.content import ContentPolicy
from stateward.observability.metrics import RunMetrics
from stateward.observability.prometheus import MetricsEndpoint, serve_metrics
from stateward.observability.sdk import configure_from_env
from stateward.observability.signals import Signal, signals_of
from stateward.observability.stats import StatsReport, compute_stats
from stateward.observability.tracing import Segment, Telemetry

__all__ = [
    "ContentPolicy",
    "MetricsEndpoint",
    "RunMetrics",
    "Segment",
    "Signal",
    "StatsReport",
    "Telemetry",
    "compute_stats",
    "configure_from_env",
    "serve_metrics",
    "signals_of",
]
