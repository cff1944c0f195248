"""``GET /metrics`` on the service: the worker's Prometheus exposition, served only when asked for.

Prometheus scrapes without the API's principals: a scraper is no tenant, and the store gauges count
every tenant's runs, so API keys are the wrong gate. The standard is a network-restricted address
(the service binds 127.0.0.1 by default) and, where the port is reachable by others, a bearer token in
the scrape config (``authorization: {credentials: ...}``). So the route is absent (404) unless
``stateward serve --metrics``; when ``STATEWARD_METRICS_TOKEN`` is set it requires
``Authorization: Bearer <token>`` (401 UNAUTHENTICATED otherwise).
"""

from __future__ import annotations

import hmac
from collections.abc import Callable

from fastapi import FastAPI, Request
from fastapi.responses import Response

from stateward.api.identity import AuthError

METRICS_TOKEN_ENV = "STATEWARD_METRICS_TOKEN"


def metrics_route(app: FastAPI, exposition: Callable[[], tuple[bytes, str]], *, token: str | None = None) -> None:
    """Add ``/metrics`` answering ``exposition()`` (body, content type), behind ``token`` when one is given."""
    expected = None if not token else f"Bearer {token}".encode()

    @app.get("/metrics", include_in_schema=False)
    def metrics(request: Request) -> Response:
        if expected is not None:
            given = request.headers.get("authorization", "").encode()
            if not hmac.compare_digest(given, expected):
                raise AuthError("/metrics needs Authorization: Bearer <STATEWARD_METRICS_TOKEN>")
        body, content_type = exposition()
        return Response(body, media_type=content_type)
