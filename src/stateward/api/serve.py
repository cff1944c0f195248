"""Running the service under uvicorn: one process, one Runtime on the store, bound where the operator says."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from stateward.api.app import ApiSettings, create_app
from stateward.api.metrics_route import METRICS_TOKEN_ENV
from stateward.api.oidc import OidcSettings
from stateward.api.stream import StreamLimits
from stateward.api.web.session import SessionSettings
from stateward.api.webhook_routes import webhook_store
from stateward.api.webhook_targets import TargetPolicy
from stateward.api.webhooks import DeliveryPolicy, WebhookDispatcher
from stateward.runtime.runtime import Runtime
from stateward.store.backends import open_store


def serve(
    db: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    settings: ApiSettings | None = None,
    webhooks: DeliveryPolicy | None = None,
    metrics: bool = False,
    targets: TargetPolicy | None = None,
    docs: bool = False,
    streams: StreamLimits | None = None,
) -> None:
    """Serve the HTTP API and the inbox on ``db`` (an existing store: the service never creates one), and
    deliver its webhook outbox, until stopped. ``targets``: where webhooks may go (default: from the
    environment, ``STATEWARD_WEBHOOK_ALLOW_HTTP`` and ``STATEWARD_WEBHOOK_ALLOW_NETWORKS``). ``metrics``:
    also ``/metrics`` (Prometheus; the otel extra, METRICS_UNAVAILABLE without it), behind
    ``STATEWARD_METRICS_TOKEN`` when that is set. ``docs``: also Swagger UI at ``/docs`` (local assets,
    strict CSP; see api/docs_route.py). ``streams``: the caps and bounds of event streams (else
    ``StreamLimits.from_env()``)."""
    import uvicorn

    exposed, telemetry = _prometheus(db) if metrics else (None, None)
    runtime = Runtime.open(db, create=False, telemetry=telemetry)
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
        app = create_app(runtime, settings, metrics=None if exposed is None else exposed.text)
        # The webhook outbox is delivered from the service (a thread): rows a crash left are sent on restart.
        dispatcher = WebhookDispatcher(
            webhook_store(runtime), webhooks or DeliveryPolicy.from_env(), targets=settings.webhook_targets
        )
        dispatcher.start()
        uvicorn.run(app, host=host, port=port, log_level="info", access_log=True, server_header=False)
    finally:
        if dispatcher is not None:
            dispatcher.close()
        runtime.close()
        if exposed is not None:
            exposed.close()


def stream_limits(max_streams: int | None = None, max_streams_per_key: int | None = None) -> StreamLimits:
    """The event streams' bounds from the environment (``StreamLimits.from_env``), with the serve options over it."""
    given = {"max_streams": max_streams, "max_streams_per_key": max_streams_per_key}
    return dataclasses.replace(StreamLimits.from_env(), **{k: v for k, v in given.items() if v is not None})


def _prometheus(db: str) -> tuple[Any, Any]:
    """The service's Prometheus metrics and the telemetry its Runtime records into (imported only when asked:
    the otel extra is optional, and its absence is METRICS_UNAVAILABLE)."""
    from stateward.core.errors import ErrorCode, UserError

    try:
        from stateward.observability.prometheus import prometheus_metrics
        from stateward.observability.tracing import Telemetry
    except ImportError as exc:
        raise UserError(
            "--metrics needs the otel extra (pip install 'stateward[otel]')", code=ErrorCode.METRICS_UNAVAILABLE
        ) from exc
    exposed = prometheus_metrics(lambda: open_store(db, create=False))
    return exposed, Telemetry(metrics=exposed.metrics)
