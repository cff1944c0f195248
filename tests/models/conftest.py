"""A tiny local HTTP stub on 127.0.0.1 that answers like a provider, so the official SDKs' real HTTP
path and response parsing run in the fast tests. Bodies are shaped like the providers' documented
examples; no network beyond loopback is used."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from stateward.models.base import ActionSpec, ModelRequest


@dataclass
class Canned:
    body: Any
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


@dataclass
class StubProvider:
    """Serves queued answers in order and keeps every request it received (path, headers, JSON body)."""

    url: str = ""
    answers: list[Canned] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)

    def queue(self, body: Any, status: int = 200, headers: dict[str, str] | None = None, delay_s: float = 0.0) -> None:
        self.answers.append(Canned(body, status, headers or {}, delay_s))

    @property
    def last_body(self) -> dict[str, Any]:
        body: dict[str, Any] = self.requests[-1]["body"]
        return body


def _handler(stub: StubProvider) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length)
            stub.requests.append(
                {
                    "path": self.path,
                    "headers": {k.lower(): v for k, v in self.headers.items()},
                    "body": json.loads(raw or b"{}"),
                }
            )
            canned = stub.answers.pop(0) if stub.answers else Canned({"error": {"message": "stub has no answer"}}, 500)
            if canned.delay_s:
                time.sleep(canned.delay_s)
            # A str body is sent as it is: JSON no dict can express (a repeated key) can be served too.
            payload = canned.body.encode() if isinstance(canned.body, str) else json.dumps(canned.body).encode()
            try:
                self.send_response(canned.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                for key, value in canned.headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout tests)
                pass

    return Handler


@pytest.fixture
def stub() -> Iterator[StubProvider]:
    provider = StubProvider()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(provider))
    server.daemon_threads = True
    provider.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield provider
    server.shutdown()
    server.server_close()


READ_SCHEMA = {
    "type": "object",
    "properties": {"material_id": {"type": "string"}},
    "required": ["material_id"],
    "additionalProperties": False,
}


@pytest.fixture
def decide_request() -> ModelRequest:
    return ModelRequest(
        purpose="decide",
        goal="Write a brief about retry storms.",
        inventory=["m1", "m2"],
        observations=[],
        visible_actions=[
            ActionSpec(name="read_material", description="Read one material by id.", input_schema=READ_SCHEMA),
            ActionSpec(
                name="list_materials",
                description="List materials.",
                input_schema={"type": "object", "properties": {}, "additionalProperties": False},
            ),
        ],
        instructions="Reply with exactly one JSON object.",
    )
