"""A constrained-decoding model server on loopback, for round trips through the official SDKs.

It speaks OpenAI's Chat Completions (``/v1/chat/completions``) and Anthropic's Messages API
(``/v1/messages``) and answers the way a server that enforces schemas does (llama.cpp grammars, vLLM
guided decoding, OpenAI strict mode): only with a document valid under the schema it was sent -
``response_format`` json_schema, a tool's ``parameters`` / ``input_schema``, or ``output_config.format``.
With no schema sent (Anthropic's plain ``json`` text mode) it reads the schema from the system text,
which is where the provider must describe the document.

What it writes: the next scripted document if one is queued (checked against the schema; a document
the schema refuses is answered HTTP 400, as a grammar can never produce it), else a minimal instance
generated from the schema. A reply longer than ``max_tokens`` (4 characters a token) is cut there and
ends with ``finish_reason: length`` / ``stop_reason: max_tokens``.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from jsonschema import Draft202012Validator

CHARS_PER_TOKEN = 4
SCHEMA_MARKER = "valid under this JSON Schema, and nothing else: "


class SchemaRefused(Exception):
    """A scripted document the sent schema does not admit."""


def minimal_instance(schema: dict[str, Any]) -> Any:
    """The smallest document ``schema`` admits, as a constrained decoder might write it: every object's
    properties (strict schemas require them all), ``minItems`` entries (at least one), the first
    ``anyOf`` branch, the first ``enum`` value."""
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][0]
    if "anyOf" in schema:
        return minimal_instance(schema["anyOf"][0])
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        props = schema.get("properties", {})
        return {name: minimal_instance(sub) for name, sub in props.items()}
    if kind == "array":
        count = max(int(schema.get("minItems", 1)), 1)
        count = min(count, int(schema.get("maxItems", count)))
        return [minimal_instance(schema.get("items", {})) for _ in range(count)]
    if kind == "string":
        size = max(int(schema.get("minLength", 1)), 1)
        return "x" * min(size, int(schema.get("maxLength", size)))
    if kind in ("integer", "number"):
        if "minimum" in schema:
            return schema["minimum"]
        if "exclusiveMinimum" in schema:
            return schema["exclusiveMinimum"] + 1
        return 0
    if kind == "boolean":
        return False
    return None


@dataclass
class ConstrainedServer:
    """The running server: its URLs, the documents it is to write next, and what it was sent."""

    url: str
    scripted: deque[Any] = field(default_factory=deque)
    requests: list[dict[str, Any]] = field(default_factory=list)

    @property
    def openai_url(self) -> str:
        return f"{self.url}/v1"

    def script(self, *documents: Any) -> None:
        """Documents to answer with next (a tool call as ``{"name": ..., "arguments": {...}}``)."""
        self.scripted.extend(documents)

    @property
    def last(self) -> dict[str, Any]:
        return self.requests[-1]

    def write(self, schema: dict[str, Any]) -> Any:
        """The next document under ``schema``: the scripted one if it is valid, else a minimal one."""
        if not self.scripted:
            return minimal_instance(schema)
        doc = self.scripted.popleft()
        errors = sorted(Draft202012Validator(schema).iter_errors(doc), key=lambda e: list(e.path))
        if errors:
            raise SchemaRefused("; ".join(e.message[:200] for e in errors[:3]))
        return doc


def _cut(text: str, max_tokens: int) -> tuple[str, bool]:
    limit = max_tokens * CHARS_PER_TOKEN
    return (text[:limit], True) if len(text) > limit else (text, False)


def _tokens(value: Any) -> int:
    return max(len(json.dumps(value)) // CHARS_PER_TOKEN, 1)


def _openai(server: ConstrainedServer, body: dict[str, Any]) -> dict[str, Any]:
    max_tokens = int(body.get("max_tokens") or 16)
    message: dict[str, Any] = {"role": "assistant", "content": None}
    finish = "stop"
    if body.get("tools"):
        tools = {t["function"]["name"]: t["function"]["parameters"] for t in body["tools"]}
        if server.scripted:
            call = server.scripted[0]
            if call.get("name") not in tools:
                raise SchemaRefused(f"no tool {call.get('name')!r} was offered")
            server.scripted[0] = call["arguments"]
            name = call["name"]
        else:
            name = next(iter(tools))
        args = json.dumps(server.write(tools[name]))
        args, cut = _cut(args, max_tokens)
        message["tool_calls"] = [{"id": "call_1", "type": "function", "function": {"name": name, "arguments": args}}]
        finish = "length" if cut else "tool_calls"
    else:
        schema = body["response_format"]["json_schema"]["schema"]
        text, cut = _cut(json.dumps(server.write(schema)), max_tokens)
        message["content"] = text
        finish = "length" if cut else "stop"
    prompt, produced = _tokens(body["messages"]), max_tokens if finish == "length" else 1
    return {
        "id": "chatcmpl-constrained",
        "object": "chat.completion",
        "created": 1700000000,
        "model": body.get("model", "constrained"),
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": produced, "total_tokens": prompt + produced},
    }


def _schema_in_prompt(system: str) -> dict[str, Any]:
    """The reply schema a text-mode provider put in its system text (the only place it can say it)."""
    _, marker, tail = system.partition(SCHEMA_MARKER)
    if not marker:
        raise SchemaRefused("the system text describes no reply schema")
    schema, _ = json.JSONDecoder().raw_decode(tail)
    return dict(schema)


def _anthropic(server: ConstrainedServer, body: dict[str, Any]) -> dict[str, Any]:
    max_tokens = int(body["max_tokens"])
    content: list[dict[str, Any]]
    if body.get("tools"):
        tools = {t["name"]: t["input_schema"] for t in body["tools"]}
        if server.scripted:
            call = server.scripted[0]
            if call.get("name") not in tools:
                raise SchemaRefused(f"no tool {call.get('name')!r} was offered")
            server.scripted[0] = call["arguments"]
            name = call["name"]
        else:
            name = next(iter(tools))
        args = server.write(tools[name])
        cut = len(json.dumps(args)) > max_tokens * CHARS_PER_TOKEN
        content = [{"type": "tool_use", "id": "toolu_1", "name": name, "input": args if not cut else {}}]
        stop = "max_tokens" if cut else "tool_use"
    else:
        fmt = (body.get("output_config") or {}).get("format")
        schema = fmt["schema"] if fmt else _schema_in_prompt(str(body.get("system", "")))
        text, cut = _cut(json.dumps(server.write(schema)), max_tokens)
        content = [{"type": "text", "text": text}]
        stop = "max_tokens" if cut else "end_turn"
    return {
        "id": "msg_constrained",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "constrained"),
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {
            "input_tokens": _tokens(body["messages"]),
            "output_tokens": max_tokens if stop == "max_tokens" else 1,
        },
    }


def _handler(server: ConstrainedServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
            server.requests.append({"path": self.path, "body": body})
            try:
                if self.path.endswith("/chat/completions"):
                    self._send(200, _openai(server, body))
                elif self.path.endswith("/messages"):
                    self._send(200, _anthropic(server, body))
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
            except SchemaRefused as exc:
                error = {"message": f"the document does not match the schema: {exc}", "type": "invalid_request_error"}
                self._send(400, {"type": "error", "error": error})

    return Handler


@contextmanager
def constrained_server() -> Iterator[ConstrainedServer]:
    """Serve on a free loopback port until the block ends."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(ConstrainedServer(url="")))
    state = ConstrainedServer(url=f"http://127.0.0.1:{httpd.server_address[1]}")
    httpd.RequestHandlerClass = _handler(state)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)
