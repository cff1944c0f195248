"""Running the service under uvicorn: one process, one Runtime on the store, bound where the operator says."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from stateward.api.app import ApiSettings, create_app
from stateward.api.backend import RunBackend
from stateward.api.metrics_route import METRICS_TOKEN_ENV
from stateward.api.oidc import OidcSettings
from stateward.api.stream import StreamLimits
from stateward.api.web.session import SessionSettings
from stateward.api.webhook_routes import webhook_store
from stateward.api.webhook_targets import TargetPolicy
from stateward.api.webhooks import DeliveryPolicy, WebhookDispatcher
from stateward.core.errors import ErrorCode, UserError
from stateward.runtime.agent_registry import process_agents
from stateward.runtime.runtime import Runtime
from stateward.store.backends import open_store
from stateward.store.base import Store
from stateward.temporal.opening import open_temporal
from stateward.temporal.target import is_temporal_url, refuse_service_db


def serve(
    db: str,
    *,
    service_db: str | None = None,
    host: str = "127.0.0.1",
    port: int = 8080,
    settings: ApiSettings | None = None,
    webhooks: DeliveryPolicy | None = None,
    metrics: bool = False,
    targets: TargetPolicy | None = None,
    docs: bool = False,
    streams: StreamLimits | None = None,
) -> None:
    """Serve the HTTP API and the inbox on ``db`` (an existing store: the service never creates one, or a
    ``temporal://`` namespace), and deliver its webhook outbox, until stopped. ``service_db``: the existing
    store that keeps API keys, sessions and webhooks instead of ``db`` (required for a Temporal backend).
    ``targets``: where webhooks may go (default: from the environment, ``STATEWARD_WEBHOOK_ALLOW_HTTP`` and
    ``STATEWARD_WEBHOOK_ALLOW_NETWORKS``). ``metrics``: also ``/metrics`` (Prometheus; the otel extra,
    METRICS_UNAVAILABLE without it), behind ``STATEWARD_METRICS_TOKEN`` when that is set. ``docs``: also
    Swagger UI at ``/docs`` (local assets, strict CSP; see api/docs_route.py). ``streams``: the caps and
    bounds of event streams (else ``StreamLimits.from_env()``)."""
    import uvicorn

    if is_temporal_url(db) and metrics:
        raise UserError(
            "--metrics does not run on a Temporal backend: the workers record the run metrics (stateward worker"
            " --metrics-port) and the Temporal server its own",
            code=ErrorCode.STORE_UNSUPPORTED,
        )
    exposed, telemetry = _prometheus(db) if metrics else (None, None)
    runtime, service = open_service_backend(db, service_db, telemetry=telemetry)
    dispatcher: WebhookDispatcher | None = None
    try:
        settings = settings or ApiSettings(
            sessions=SessionSettings.from_env(),
            oidc=OidcSettings.from_env(),
            metrics_token=os.environ.get(METRICS_TOKEN_ENV) or None,
            webhook_targets=targets or TargetPolicy.from_env(),
            docs=docs,
            stream=streams or StreamLimits.from_env(),
        )
        app = create_app(runtime, settings, service_store=service, metrics=None if exposed is None else exposed.text)
        # The webhook outbox is delivered from the service (a thread): rows a crash left are sent on restart.
        dispatcher = WebhookDispatcher(
            webhook_store(service or runtime.store),
            webhooks or DeliveryPolicy.from_env(),
            targets=settings.webhook_targets,
        )
        dispatcher.start()
        uvicorn.run(app, host=host, port=port, log_level="info", access_log=True, server_header=False)
    finally:
        if dispatcher is not None:
            dispatcher.close()
        runtime.close()
        if service is not None:
            service.close()
        if exposed is not None:
            exposed.close()


def open_service_backend(db: str, service_db: str | None, *, telemetry: Any = None) -> tuple[RunBackend, Store | None]:
    """The runs' backend on ``db`` and, when named, the store keeping the service's own records. A Temporal
    backend keeps none of them, so it needs ``service_db`` (SERVICE_STORE_REQUIRED), and only it takes one
    (SERVICE_STORE_UNEXPECTED); neither is ever created here (STORE_NOT_FOUND for a path that holds no store)."""
    if is_temporal_url(db) and service_db is None:
        raise UserError(
            "a Temporal backend keeps no API keys, sessions or webhooks: name a store for them with --service-db"
            " (a SQLite path or a postgresql:// URL, made with `stateward keys create --db ...`)",
            code=ErrorCode.SERVICE_STORE_REQUIRED,
        )
    refuse_service_db(db, service_db)
    service = None if service_db is None else open_store(service_db, create=False)
    try:
        if is_temporal_url(db):
            return open_temporal(db, agents=process_agents()), service
        return Runtime.open(db, create=False, telemetry=telemetry), service
    except BaseException:
        if service is not None:
            service.close()
        raise


def stream_limits(max_streams: int | None = None, max_streams_per_key: int | None = None) -> StreamLimits:
    """The event streams' bounds from the environment (``StreamLimits.from_env``), with the serve options over it."""
    given = {"max_streams": max_streams, "max_streams_per_key": max_streams_per_key}
    return dataclasses.replace(StreamLimits.from_env(), **{k: v for k, v in given.items() if v is not None})


def _prometheus(db: str) -> tuple[Any, Any]:
    """The service's Prometheus metrics and the telemetry its Runtime records into (imported only when asked:
    the otel extra is optional, and its absence is METRICS_UNAVAILABLE)."""
    try:
        from stateward.observability.prometheus import prometheus_metrics
        from stateward.observability.tracing import Telemetry
    except ImportError as exc:
        raise UserError(
            "--metrics needs the otel extra (pip install 'stateward[otel]')", code=ErrorCode.METRICS_UNAVAILABLE
        ) from exc
    exposed = prometheus_metrics(lambda: open_store(db, create=False))
    return exposed, Telemetry(metrics=exposed.metrics)
