"""Running the service under uvicorn: one process, one Runtime on the store, bound where the operator says."""

from __future__ import annotations

from stateward.api.app import ApiSettings, create_app
from stateward.api.web.session import SessionSettings
from stateward.runtime.runtime import Runtime


def serve(db: str, *, host: str = "127.0.0.1", port: int = 8080, settings: ApiSettings | None = None) -> None:
    """Serve the HTTP API on ``db`` (an existing store: the service never creates one) until stopped."""
    import uvicorn

    runtime = Runtime.open(db, create=False)
    try:
        app = create_app(runtime, settings or ApiSettings(sessions=SessionSettings.from_env()))
        uvicorn.run(app, host=host, port=port, log_level="info", access_log=True, server_header=False)
    finally:
        runtime.close()
