"""Telemetry of runs: OpenTelemetry spans and metrics at the Runtime's seams, and the same figures from
the event log (``stateward stats``). Only the OpenTelemetry API is imported on the hot path; the SDK,
exporters and Prometheus live in the ``otel`` extra and are configured by the CLI (``sdk.py``)."""

from stateward.observability.content import ContentPolicy
from stateward.observability.metrics import RunMetrics
from stateward.observability.signals import Signal, signals_of
from stateward.observability.tracing import Segment, Telemetry

__all__ = ["ContentPolicy", "RunMetrics", "Segment", "Signal", "Telemetry", "signals_of"]
