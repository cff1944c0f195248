"""Whether OpenTelemetry can have anything behind it in this process, answered without importing it.

A global tracer or meter provider can only be set through the API's module (``opentelemetry.trace``,
``opentelemetry.metrics``), so while that module is not imported nothing is configured and a span or a
measurement would go nowhere. The one other way in is the environment: an ``OTEL_*`` variable (the CLI's
configurator reads them, and the API itself loads ``OTEL_PYTHON_TRACER_PROVIDER`` /
``OTEL_PYTHON_METER_PROVIDER``). A process with neither (``stateward approve`` with nothing configured)
never imports OpenTelemetry, which costs ~25 ms of start-up.
"""

from __future__ import annotations

import os
import sys

TRACE_API = "opentelemetry.trace"
METRICS_API = "opentelemetry.metrics"


def may_be_configured(api: str) -> bool:
    """True when ``api`` (one of the two module names above) is already imported or an ``OTEL_*`` variable
    is set: only then is it worth importing the API to ask for its global provider."""
    return api in sys.modules or _otel_in_environment()


_SCANNED: list[tuple[int, bool]] = []  # (how many variables the environment had, whether one was OTEL_*)


def _otel_in_environment() -> bool:
    """Asked at every drive: the scan of the environment is redone only when its size changed (a variable
    set or removed), not once per run (it decodes every name: ~2% of a short run's CPU)."""
    size = len(os.environ)
    if _SCANNED and _SCANNED[0][0] == size:
        return _SCANNED[0][1]
    found = any(key.startswith("OTEL_") for key in os.environ)
    _SCANNED[:] = [(size, found)]
    return found
