"""``/docs``: Swagger UI over the service's OpenAPI schema, off unless the operator turns it on.

FastAPI's default pages load unpinned scripts from a CDN and run an inline script, which the strict
Content-Security-Policy of the inbox forbids. So neither ``/docs`` nor ``/redoc`` exists by default
(404); ``stateward serve --docs`` (``ApiSettings(docs=True)``) adds ``/docs`` served from this
machine: the Swagger UI files of the pinned ``swagger-ui-bundle`` package, a page without inline
script or style, and the start-up script from the inbox's own static files, all under the same
security headers as the inbox. ``/redoc`` has no local assets and stays absent. The page carries no
data; what "Try it out" sends needs an API key, as any call does.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse, HTMLResponse

from stateward.core.errors import ErrorCode, UserError

PREFIX = "/docs"
_ASSETS = {"swagger-ui.css": "text/css", "swagger-ui-bundle.js": "text/javascript"}
_INIT = Path(__file__).parent / "web" / "static" / "swagger-init.js"
_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>stateward API</title>
<link rel="stylesheet" href="/docs/assets/swagger-ui.css"></head>
<body><div id="swagger-ui" data-openapi-url="/openapi.json"></div>
<script src="/docs/assets/swagger-ui-bundle.js"></script>
<script src="/docs/assets/swagger-init.js"></script></body></html>
"""


def _bundle_dir() -> Path:
    try:
        import swagger_ui_bundle  # type: ignore[import-untyped]
    except ImportError:
        raise UserError(
            "serving /docs needs the swagger-ui-bundle package: pip install 'stateward[serve]'",
            code=ErrorCode.CONFIGURATION_ERROR,
        ) from None
    return Path(swagger_ui_bundle.swagger_ui_path)


def docs_route(app: FastAPI) -> None:
    """Add ``/docs`` and its three assets (nothing else of the bundle's directory is reachable)."""
    bundle = _bundle_dir()
    files = {name: (bundle / name, kind) for name, kind in _ASSETS.items()}
    files["swagger-init.js"] = (_INIT, "text/javascript")

    @app.get(PREFIX, include_in_schema=False)
    def docs_page() -> HTMLResponse:
        return HTMLResponse(_PAGE)

    for name, (path, kind) in files.items():
        app.add_api_route(f"{PREFIX}/assets/{name}", _serve(path, kind), methods=["GET"], include_in_schema=False)


def _serve(path: Path, kind: str) -> Callable[[], FileResponse]:
    def asset() -> FileResponse:
        return FileResponse(path, media_type=kind)

    return asset
