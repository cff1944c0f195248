"""Telemetry of runs: OpenTelemetry spans and metrics at the Runtime's seams, and the same figures from
the event log (``stateward stats``). Only the OpenTelemetry API is imported on the hot path; the SDK,
exporters and Prometheus live in the ``otel`` extra and are imported only when asked for (``sdk.py``,
``prometheus.py``), and the API itself only once something may be configured (``otel_state.py``). Names
are imported on first use (PEP 562).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stateward.observability.content import ContentPolicy
    from stateward.observability.metrics import RunMetrics
    from stateward.observability.prometheus import MetricsEndpoint, serve_metrics
    from stateward.observability.sdk import configure_from_env
    from stateward.observability.signals import Signal, signals_of
    from stateward.observability.spans import Segment
    from stateward.observability.stats import StatsReport, compute_stats
    from stateward.observability.tracing import Telemetry

_EXPORTS = {
    "ContentPolicy": "stateward.observability.content",
    "MetricsEndpoint": "stateward.observability.prometheus",
    "RunMetrics": "stateward.observability.metrics",
    "Segment": "stateward.observability.spans",
    "Signal": "stateward.observability.signals",
    "StatsReport": "stateward.observability.stats",
    "Telemetry": "stateward.observability.tracing",
    "compute_stats": "stateward.observability.stats",
    "configure_from_env": "stateward.observability.sdk",
    "serve_metrics": "stateward.observability.prometheus",
    "signals_of": "stateward.observability.signals",
}

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


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'stateward.observability' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
