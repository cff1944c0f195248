"""Every command honours OTEL_*: two real ``stateward`` processes export OTLP/HTTP protobuf to a receiver
in this test, and the spans they send make one trace across the suspend and the resume."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

pytestmark = pytest.mark.slow


class Receiver:
    """A minimal OTLP/HTTP collector: decodes each POST /v1/traces and keeps the spans with their resource."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.paths: list[str] = []
        received = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                received.paths.append(self.path)
                request = ExportTraceServiceRequest.FromString(body)
                for rs in request.resource_spans:
                    resource = {a.key: a.value.string_value for a in rs.resource.attributes}
                    for ss in rs.scope_spans:
                        for span in ss.spans:
                            received.spans.append({"span": span, "resource": resource, "scope": ss.scope.name})
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    rec = Receiver()
    rec.thread.start()
    yield rec
    rec.server.shutdown()
    rec.server.server_close()


def sw(*args: str, db: Path, endpoint: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(
        STATEWARD_DB=str(db),
        OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,  # nothing else: the endpoint alone turns trace export on
        OTEL_SERVICE_NAME="stateward-under-test",
    )
    proc = subprocess.run(
        [sys.executable, "-m", "stateward.cli.main", *args, "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


def attrs(span: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for a in span.attributes:
        v = a.value
        out[a.key] = getattr(v, v.WhichOneof("value")) if v.WhichOneof("value") else None
    return out


def test_a_suspend_and_a_resume_in_two_processes_export_one_trace(tmp_path: Path, receiver: Receiver) -> None:
    db = tmp_path / "runs.db"
    started = sw("demo", "blog", "--controller", "react", db=db, endpoint=receiver.endpoint)
    assert started["status"] == "WAITING_FOR_USER"
    first = [r for r in receiver.spans]
    assert first, "the first process exported nothing"
    done = sw("approve", started["run_id"], "approval_001", "--by", "alice", db=db, endpoint=receiver.endpoint)
    assert done["status"] == "COMPLETED"

    assert set(receiver.paths) == {"/v1/traces"}
    assert {r["resource"]["service.name"] for r in receiver.spans} == {"stateward-under-test"}
    segments = [r["span"] for r in receiver.spans if r["span"].name.startswith("invoke_agent ")]
    assert len(segments) == 2
    one, two = sorted(segments, key=lambda s: s.start_time_unix_nano)
    assert one.trace_id == two.trace_id and len({r["span"].trace_id for r in receiver.spans}) == 1
    assert two.parent_span_id == one.span_id and [link.span_id for link in two.links] == [one.span_id]
    assert attrs(one)["gen_ai.conversation.id"] == started["run_id"]
    assert attrs(one)["stateward.run.status"] == "WAITING_FOR_USER"
    assert attrs(two)["stateward.run.status"] == "COMPLETED"
    chats = [r["span"] for r in receiver.spans if r["span"].name.startswith("chat ")]
    assert chats and all(attrs(c)["gen_ai.operation.name"] == "chat" for c in chats)
    assert all(int(attrs(c)["gen_ai.usage.input_tokens"]) > 0 for c in chats)
    tools = [attrs(r["span"]) for r in receiver.spans if r["span"].name.startswith("execute_tool ")]
    assert "write_draft" in {t["gen_ai.tool.name"] for t in tools}
    assert not any("gen_ai.tool.call.arguments" in t for t in tools)  # content off by default
