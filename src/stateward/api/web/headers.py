"""Security headers on every inbox response: a strict Content-Security-Policy and its companions.

The policy admits scripts, styles and requests from the service's own origin only: no inline script
or style, no ``eval``, no plugin, no frame (the inbox cannot be framed for clickjacking), forms post
only back to the service. What a model wrote can therefore not run even if it escaped the templates.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"permissions-policy", b"camera=(), microphone=(), geolocation=()"),
)


class SecurityHeaders:
    """Pure ASGI middleware: adds :data:`SECURITY_HEADERS` to responses under ``prefix`` (or any of
    ``also``: the run console shares the inbox's policy)."""

    def __init__(self, app: ASGIApp, prefix: str, also: tuple[str, ...] = ()):
        self.app = app
        self.prefixes = (prefix, *also)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if not any(path == p or path.startswith(f"{p}/") for p in self.prefixes):
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {name for name, _ in SECURITY_HEADERS}
                kept = [(k, v) for k, v in message.get("headers", []) if k.lower() not in names]
                message["headers"] = [*kept, *SECURITY_HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers)
