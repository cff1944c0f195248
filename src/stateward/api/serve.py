"""Running the service under uvicorn: one process, one Runtime on the store, bound where the operator says."""

from __future__ import annotations

from stateward.api.app import ApiSettings, create_app
from stateward.api.oidc import OidcSettings
from stateward.api.web.session import SessionSettings
from stateward.api.webhook_routes import webhook_store
from stateward.api.webhooks import DeliveryPolicy, WebhookDispatcher
from stateward.runtime.runtime import Runtime


def serve(
    db: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    settings: ApiSettings | None = None,
    webhooks: DeliveryPolicy | None = None,
) -> None:
    """Serve the HTTP API and the inbox on ``db`` (an existing store: the service never creates one), and
    deliver its webhook outbox, until stopped."""
    import uvicorn

    runtime = Runtime.open(db, create=False)
    dispatcher: WebhookDispatcher | None = None
    try:
        app = create_app(
            runtime, settings or ApiSettings(sessions=SessionSettings.from_env(), oidc=OidcSettings.from_env())
        )
        # The webhook outbox is delivered from the service (a thread): rows a crash left are sent on restart.
        dispatcher = WebhookDispatcher(webhook_store(runtime), webhooks or DeliveryPolicy.from_env())
        dispatcher.start()
        uvicorn.run(app, host=host, port=port, log_level="info", access_log=True, server_header=False)
    finally:
        if dispatcher is not None:
            dispatcher.close()
        runtime.close()
