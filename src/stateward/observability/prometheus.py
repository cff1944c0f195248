"""Prometheus exposition for a long-running process (``stateward worker --metrics-port``, ``serve --metrics``).

A MeterProvider of this process's own, read by the OpenTelemetry Prometheus reader and served by
``prometheus_client`` on ``/metrics``; it is handed to the Runtime (not set globally), so it coexists
with whatever ``OTEL_METRICS_EXPORTER`` configured. Needs the ``otel`` extra.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from stateward.core.errors import ErrorCode, UserError
from stateward.observability.metrics import METER_NAME, RunMetrics
from stateward.observability.store_gauges import StoreGauges
from stateward.store.base import Store


@dataclass
class MetricsEndpoint:
    """A running ``/metrics`` endpoint and the metrics a Runtime should record into."""

    metrics: RunMetrics
    port: int
    _server: Any
    _thread: Any
    _provider: Any

    def close(self) -> None:
        """Stop serving and shut the meter provider down."""
        self._server.shutdown()
        self._server.server_close()
        self._provider.shutdown()


@dataclass
class PrometheusMetrics:
    """This process's MeterProvider read by the Prometheus reader: record into ``.metrics``, expose ``text()``."""

    metrics: RunMetrics
    _provider: Any

    def text(self) -> tuple[bytes, str]:
        """The exposition of every registered collector and its content type (what ``/metrics`` answers)."""
        from prometheus_client import REGISTRY, generate_latest
        from prometheus_client.exposition import CONTENT_TYPE_LATEST

        return generate_latest(REGISTRY), CONTENT_TYPE_LATEST

    def close(self) -> None:
        self._provider.shutdown()


def prometheus_metrics(store: Callable[[], Store]) -> PrometheusMetrics:
    """Run metrics plus the store gauges, read by Prometheus; METRICS_UNAVAILABLE without the extra.

    Shared by the worker's own endpoint and the service's ``/metrics`` route, so both expose the same text.
    """
    try:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    except ImportError as exc:
        raise UserError(
            "Prometheus metrics need the otel extra (pip install 'stateward[otel]')", code=ErrorCode.METRICS_UNAVAILABLE
        ) from exc
    resource = Resource.create()  # OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES, else "stateward"
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: "stateward"}))
    provider = MeterProvider(metric_readers=[PrometheusMetricReader()], resource=resource)
    StoreGauges(provider.get_meter(METER_NAME), store)
    return PrometheusMetrics(RunMetrics(provider), provider)


def serve_metrics(port: int, store: Callable[[], Store], *, addr: str = "127.0.0.1") -> MetricsEndpoint:
    """Serve Prometheus text on ``addr:port`` (0: any free port, see ``.port``); METRICS_UNAVAILABLE without
    the extra, METRICS_PORT_IN_USE when the port cannot be bound."""
    exposed = prometheus_metrics(store)
    from prometheus_client import REGISTRY, start_http_server

    try:
        server, thread = start_http_server(port, addr=addr, registry=REGISTRY)
    except OSError as exc:
        exposed.close()
        raise UserError(f"cannot serve metrics on {addr}:{port}: {exc}", code=ErrorCode.METRICS_PORT_IN_USE) from exc
    return MetricsEndpoint(exposed.metrics, int(server.server_address[1]), server, thread, exposed._provider)
