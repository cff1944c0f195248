"""Configure the OpenTelemetry SDK from the standard ``OTEL_*`` variables, when the ``otel`` extra is installed.

The CLI calls :func:`configure_from_env` once at start, so any ``stateward`` command reports to a
collector without code: ``OTEL_TRACES_EXPORTER`` / ``OTEL_METRICS_EXPORTER`` (``otlp``, ``console``,
...), ``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_EXPORTER_OTLP_PROTOCOL``, ``OTEL_SERVICE_NAME``,
``OTEL_RESOURCE_ATTRIBUTES`` and the rest are read by the SDK's own configurator, not by us. Two
choices are ours: an OTLP endpoint alone means "export traces there" (the specification's default
exporter is OTLP), and OTLP defaults to ``http/protobuf`` (the extra ships the HTTP exporter, not gRPC).
"""

from __future__ import annotations

import logging
import os
from collections.abc import MutableMapping

log = logging.getLogger("stateward.observability")

SIGNAL_VARS = (
    "OTEL_TRACES_EXPORTER",
    "OTEL_METRICS_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
)
_done: list[bool] = []


def wanted(env: MutableMapping[str, str]) -> bool:
    """Whether the environment asks for telemetry at all (and does not disable the SDK)."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return any(env.get(name, "").strip() for name in SIGNAL_VARS)


def configure_from_env(env: MutableMapping[str, str] | None = None) -> bool:
    """Set the global tracer and meter providers from ``OTEL_*``; True if configured.

    Does nothing (False) when no variable asks for telemetry, when it already ran in this process, or
    when the ``otel`` extra is not installed (logged once: the command still runs, untraced).
    """
    env = os.environ if env is None else env
    if _done or not wanted(env):
        return False
    try:
        from opentelemetry.sdk._configuration import _OTelSDKConfigurator
    except ImportError:
        log.warning("OTEL_* variables are set but the otel extra is not installed (pip install 'stateward[otel]')")
        return False
    env.setdefault("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    endpoint_only = not env.get("OTEL_TRACES_EXPORTER", "").strip()
    if endpoint_only and (env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")):
        env["OTEL_TRACES_EXPORTER"] = "otlp"
    _OTelSDKConfigurator().configure()  # type: ignore[no-untyped-call]
    _done.append(True)
    return True
