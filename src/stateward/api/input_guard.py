"""Every input edge refused by name before a route sees it: text no store can keep, bodies that are not
UTF-8, integers past what a store holds.

A lone surrogate cannot be encoded to UTF-8 (SQLite and psycopg raise), a NUL is refused by PostgreSQL
and cuts C strings short, an integer past 2^63 - 1 overflows SQLite: each reached a store as a 500 or,
on PostgreSQL, as a 503. So this middleware looks at the path, the query, the headers and (JSON or form)
bodies once, and answers:

* 400 INVALID_ENCODING: a body (JSON or form) or query that is not UTF-8;
* 422 INVALID_TEXT: a NUL or a lone surrogate in the path, a query value, a header or any string of a
  JSON or form body (keys included);
* 422 INVALID_CURSOR: an integer header (``Last-Event-ID``) that is no event number from 0 to 2^63 - 1.

An integer query parameter is bounded where its route declares it (``Query(le=MAX_SQL_INTEGER)``, a 422
INVALID_REQUEST): here a query value is only text, so a text parameter that looks like a number stays text.

It sits inside :class:`~stateward.api.limits.BodyLimit`, so a body it reads is already bounded.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import unquote_to_bytes

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from stateward.api.errors import error_body
from stateward.core.errors import ErrorCode

MAX_SQL_INTEGER = 2**63 - 1
_SURROGATE = re.compile("[\ud800-\udfff]")
_INTEGER_HEADERS = (b"last-event-id",)


class Refused(Exception):
    """An input this service does not take: its status, code and message."""

    def __init__(self, status: int, code: ErrorCode, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def _bad_text(text: str) -> bool:
    return "\x00" in text or _SURROGATE.search(text) is not None


def _check_text(where: str, text: str) -> None:
    if _bad_text(text):
        raise Refused(422, ErrorCode.INVALID_TEXT, f"{where} holds a NUL or a lone surrogate, which is not text")


def _check_json(value: Any, where: str = "the body") -> None:
    if isinstance(value, str):
        _check_text(where, value)
    elif isinstance(value, list):
        for item in value:
            _check_json(item, where)
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_text(f"{where} (a key)", key)
            _check_json(item, where)


def _utf8(raw: bytes, where: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise Refused(400, ErrorCode.INVALID_ENCODING, f"{where} is not UTF-8") from None


def _form_pairs(raw: str, where: str) -> list[tuple[str, str]]:
    pairs = []
    for chunk in raw.split("&"):
        if not chunk:
            continue
        name, _, value = chunk.partition("=")
        decode = [_utf8(unquote_to_bytes(part.replace("+", " ")), where) for part in (name, value)]
        pairs.append((decode[0], decode[1]))
    return pairs


def check_head(scope: Scope) -> None:
    """The path, the query and the headers of a request; Refused when one is not acceptable."""
    _check_text("the path", scope.get("path", ""))
    query = scope.get("query_string", b"").decode("latin-1")
    for name, value in _form_pairs(query, "the query"):
        _check_text(f"query parameter {name[:40]!r}", value)
        _check_text("a query parameter's name", name)
    for name, value in scope.get("headers") or []:
        if b"\x00" in value:
            raise Refused(422, ErrorCode.INVALID_TEXT, "a header holds a NUL")
        if name in _INTEGER_HEADERS:
            text = value.decode("latin-1").strip()
            if not (text.isascii() and text.isdigit() and int(text) <= MAX_SQL_INTEGER):
                raise Refused(
                    422, ErrorCode.INVALID_CURSOR, f"{name.decode()} must be an event number from 0 to 2^63 - 1"
                )


def check_body(content_type: str, body: bytes) -> None:
    """A JSON or form body: UTF-8, and no string in it a store cannot keep."""
    if not body:
        return
    kind = content_type.split(";", 1)[0].strip().lower()
    if kind == "application/json" or kind.endswith("+json"):
        text = _utf8(body, "the body")
        try:
            parsed = json.loads(text)
        except ValueError:
            return  # malformed JSON is the route's to refuse (422 INVALID_REQUEST)
        _check_json(parsed)
    elif kind == "application/x-www-form-urlencoded":
        for name, value in _form_pairs(_utf8(body, "the form").strip(), "the form"):
            _check_text(f"form field {name[:40]!r}", value)
            _check_text("a form field's name", name)


class InputGuard:
    """Pure ASGI middleware: refuses what :func:`check_head` and :func:`check_body` refuse, by name, before
    the app runs; an accepted body is handed on unchanged."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            check_head(scope)
        except Refused as refused:
            await _refuse(send, refused)
            return
        headers = dict(scope.get("headers") or [])
        content_type = headers.get(b"content-type", b"").decode("latin-1")
        if scope.get("method") in ("GET", "HEAD", "DELETE", "OPTIONS") and b"content-length" not in headers:
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        try:
            check_body(content_type, body)
        except Refused as refused:
            await _refuse(send, refused)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


async def _refuse(send: Send, refused: Refused) -> None:
    body = json.dumps(error_body(refused.code, refused.message)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": refused.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


__all__ = ["MAX_SQL_INTEGER", "InputGuard", "check_body", "check_head"]
