"""A webhook receiver for tests: a real HTTP server in a thread that records what it is sent and can be
told to fail, as a receiver that is down or erroring would."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Receiver:
    """Records every POST (headers and body); answers ``status`` (200 unless told otherwise)."""

    def __init__(self) -> None:
        self.received: list[tuple[dict[str, str], str]] = []
        self.status = 200
        self.headers: dict[str, str] = {}  # sent with every answer (a Location, say)
        self.lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode()
                with owner.lock:
                    owner.received.append(({k.lower(): v for k, v in self.headers.items()}, body))
                    status, extra = owner.status, dict(owner.headers)
                self.send_response(status)
                for name, value in extra.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def bodies(self) -> list[dict[str, Any]]:
        with self.lock:
            return [json.loads(body) for _, body in self.received]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
