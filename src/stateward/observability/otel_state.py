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
    return api in sys.modules or any(key.startswith("OTEL_") for key in os.environ)
