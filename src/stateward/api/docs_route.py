"""``/docs``: Swagger UI over the service's OpenAPI schema, off unless the operator turns it on.

FastAPI's default pages load unpinned scripts from a CDN and run an inline script, which the strict
Content-Security-Policy of the inbox forbids. So neither ``/docs`` nor ``/redoc`` exists by default
(404); ``stateward serve --docs`` (``ApiSettings(docs=True)``) adds ``/docs`` served from this
machine: Swagger UI 5 (``swagger-ui-dist``, vendored unmodified in ``web/static/swagger`` with its
licence and the files' SHA-256 in ``VERSION``; it renders OpenAPI 3.1), a page without inline script
or style, and a start-up script of our own, all under the same security headers as the inbox.
``/redoc`` has no local assets and stays absent. The page carries no data; what "Try it out" sends
needs an API key, as any call does.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse, HTMLResponse

PREFIX = "/docs"
_ASSETS = {
    "swagger-ui.css": "text/css",
    "swagger-ui-bundle.js": "text/javascript",
    "swagger-init.js": "text/javascript",
}
_ASSETS_DIR = Path(__file__).parent / "web" / "static" / "swagger"  # vendored, pinned: see its VERSION file
_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>stateward API</title>
<link rel="stylesheet" href="/docs/assets/swagger-ui.css"></head>
<body><div id="swagger-ui" data-openapi-url="/openapi.json"></div>
<script src="/docs/assets/swagger-ui-bundle.js"></script>
<script src="/docs/assets/swagger-init.js"></script></body></html>
"""


def docs_route(app: FastAPI) -> None:
    """Add ``/docs`` and its three assets (nothing else of the bundle's directory is reachable)."""
    files = {name: (_ASSETS_DIR / name, kind) for name, kind in _ASSETS.items()}

    @app.get(PREFIX, include_in_schema=False)
    def docs_page() -> HTMLResponse:
        return HTMLResponse(_PAGE)

    for name, (path, kind) in files.items():
        app.add_api_route(f"{PREFIX}/assets/{name}", _serve(path, kind), methods=["GET"], include_in_schema=False)


def _serve(path: Path, kind: str) -> Callable[[], FileResponse]:
    def asset() -> FileResponse:
        return FileResponse(path, media_type=kind)

    return asset
