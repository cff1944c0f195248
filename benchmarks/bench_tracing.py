"""What tracing costs: one 1,000-step ReAct run, untraced and under three telemetry set-ups.

Each variant drives a real Runtime (scripted model, one no-op tool, SQLite at NORMAL) for N tool steps:
``untraced`` (``Telemetry(enabled=False)``: no hook runs at all, the baseline), ``no provider`` (the
default: the OpenTelemetry API's global no-op), ``sdk, no-op exporter`` (the SDK's TracerProvider and
MeterProvider, spans batched to an exporter that drops them) and ``batch OTLP`` (the SDK batching spans
to a real OTLP/HTTP receiver in another process; queued spans are flushed inside the timed run). Variants
run interleaved, ``--rounds`` times (8), each round starting with the next variant. The figure per
variant is the median process CPU time of its runs (the exporter's thread included; each run starts
after a full collection, so no run pays for the garbage of the one before) as a ratio to the untraced
median of the same process: on a shared machine CPU time is the stable figure; wall time is
printed beside it. Targets: no provider <= 1.02x, batch OTLP <= 1.3x.

The floors, beside the ratios: the spans of one traced run (kept by an extra run) replayed through a
fresh SDK provider back to back (``start_span`` + ``end`` with the same names, parents, attributes and
events, batched to the dropping exporter: what the SDK itself costs for them), and the same spans encoded
as the OTLP exporter encodes them (``encode_spans(...).SerializeToString()``, in its thread during a
real run). Each variant's added CPU per step (its ms minus the untraced run's) is printed beside what its
floor adds, in ms as well as a ratio (the ratio's denominator shrinks as the step gets cheaper).
``--profile`` adds a cProfile of one SDK run, the telemetry's own functions and the SDK's.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import NonRecordingSpan

from bench_loop import loop_agent
from benchkit import Target, emit, machine, table, targets_table
from stateward import Runtime
from stateward.observability import RunMetrics, Telemetry
from stateward.store.sqlite import SQLiteStore

STEPS = 1_000
ROUNDS = 8
TARGET_NO_PROVIDER = 1.02
TARGET_BATCH = 1.3

RECEIVER = """
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class H(BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *a): pass
s = ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"""


class Dropping(SpanExporter):
    """The SDK's whole pipeline, nothing sent."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


class Keeping(SpanExporter):
    """Keeps what it is given: the spans of one traced run, for the floors."""

    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS


class Variant:
    """A telemetry set-up; ``flush`` exports what is still queued (its cost belongs to the run)."""

    def __init__(
        self,
        telemetry: Telemetry,
        flush: Callable[[], object] = lambda: None,
        close: Callable[[], object] = lambda: None,
    ):
        self.telemetry = telemetry
        self.flush = flush
        self.close = close


def sdk(exporter: SpanExporter) -> Variant:
    tracer = TracerProvider()
    tracer.add_span_processor(BatchSpanProcessor(exporter))
    meters = MeterProvider()

    def close() -> None:
        tracer.shutdown()
        meters.shutdown()

    return Variant(Telemetry(tracer_provider=tracer, metrics=RunMetrics(meters)), tracer.force_flush, close)


def one_run(tmp: Path, name: str, variant: Variant, n: int) -> tuple[float, float]:
    """Wall and process CPU seconds of one run (CPU includes the exporter's thread: its cost is real)."""
    path = tmp / f"{name}-{time.monotonic_ns()}.db"
    runtime = Runtime(SQLiteStore(path, synchronous="NORMAL"), telemetry=variant.telemetry)
    gc.collect()  # the garbage of the run before (a traced one's spans) is not charged to this one
    try:
        wall, cpu = time.perf_counter(), time.process_time()
        state = runtime.start(loop_agent(n), "call noop until done")
        variant.flush()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        assert state.usage.tool_attempts == n, state
    finally:
        runtime.close()
    return wall, cpu


def measure(tmp: Path, n: int, rounds: int, endpoint: str) -> dict[str, list[tuple[float, float]]]:
    variants = {
        "untraced": Variant(Telemetry(enabled=False)),
        "no provider": Variant(Telemetry()),
        "sdk, no-op exporter": sdk(Dropping()),
        "batch OTLP": sdk(OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces")),
    }
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in variants}
    try:
        for variant in variants.values():
            one_run(tmp, "warmup", variant, min(n, 100))
        names = list(variants)
        for r in range(rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:  # each round starts elsewhere
                times[name].append(one_run(tmp, name.replace(" ", "_").replace(",", ""), variants[name], n))
    finally:
        for variant in variants.values():
            variant.close()
    return times


def kept_spans(tmp: Path, n: int) -> list[ReadableSpan]:
    """The spans one traced run of ``n`` steps hands its exporter."""
    keeping = Keeping()
    variant = sdk(keeping)
    try:
        one_run(tmp, "kept", variant, n)
    finally:
        variant.close()
    return keeping.spans


def _median_cpu(work: Callable[[], object], repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        cpu = time.process_time()
        work()
        times.append(time.process_time() - cpu)
    return statistics.median(times)


def sdk_floor(spans: Sequence[ReadableSpan]) -> float:
    """CPU seconds for the SDK to make ``spans`` again, back to back, batched to a dropping exporter."""

    def replay() -> None:
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(Dropping()))
        tracer = provider.get_tracer("floor")
        for span in spans:
            parent = None if span.parent is None else trace.set_span_in_context(NonRecordingSpan(span.parent))
            made = tracer.start_span(
                span.name,
                context=parent,
                kind=span.kind,
                attributes=dict(span.attributes or {}),
                start_time=span.start_time,
            )
            for event in span.events:
                made.add_event(event.name, dict(event.attributes or {}), timestamp=event.timestamp)
            made.end(end_time=span.end_time)
        provider.shutdown()

    return _median_cpu(replay)


def encode_floor(spans: Sequence[ReadableSpan]) -> float:
    """CPU seconds for the OTLP exporter's encoding of ``spans`` (what its thread does before sending)."""
    batch = 512  # the BatchSpanProcessor's default export batch

    def encode() -> None:
        for i in range(0, len(spans), batch):
            encode_spans(spans[i : i + batch]).SerializeToString()

    return _median_cpu(encode)


def profile(tmp: Path, n: int, top: int = 25) -> str:
    """cProfile of one SDK run (dropping exporter): the telemetry's and the SDK's functions, by own time."""
    variant = sdk(Dropping())
    profiler = cProfile.Profile()
    try:
        one_run(tmp, "warmup", variant, min(n, 100))
        profiler.enable()
        one_run(tmp, "profiled", variant, n)
        profiler.disable()
    finally:
        variant.close()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats("observability|opentelemetry", top)
    return out.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").strip().splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--profile", action="store_true", help="also print a cProfile of one SDK run")
    args = parser.parse_args()
    load_before = round(os.getloadavg()[0], 2)
    receiver = subprocess.Popen([sys.executable, "-c", RECEIVER], stdout=subprocess.PIPE, text=True)
    try:
        assert receiver.stdout is not None
        endpoint = f"http://127.0.0.1:{receiver.stdout.readline().strip()}"
        with tempfile.TemporaryDirectory(prefix="bench_tracing_") as name:
            times = measure(Path(name), args.steps, args.rounds, endpoint)
            spans = kept_spans(Path(name), args.steps)
            profiled = profile(Path(name), args.steps) if args.profile else ""
    finally:
        receiver.terminate()
        receiver.wait(timeout=10)
    floors_s = {"sdk": sdk_floor(spans), "otlp_encoding": encode_floor(spans)}
    wall = {k: statistics.median(t[0] for t in v) for k, v in times.items()}
    cpu = {k: statistics.median(t[1] for t in v) for k, v in times.items()}
    base = cpu["untraced"]
    ratios = {k: v / base for k, v in cpu.items()}
    wall_ratios = {k: v / wall["untraced"] for k, v in wall.items()}
    floor_ratios = {
        "sdk, no-op exporter": 1 + floors_s["sdk"] / base,
        "batch OTLP": 1 + (floors_s["sdk"] + floors_s["otlp_encoding"]) / base,
    }
    events = sum(len(s.events) for s in spans)
    targets = [
        Target("no provider / untraced (CPU)", ratios["no provider"], TARGET_NO_PROVIDER),
        Target("batch OTLP / untraced (CPU)", ratios["batch OTLP"], TARGET_BATCH),
    ]
    result = {
        "benchmark": "tracing",
        "machine": {**machine(), "load_avg_1m_at_start": load_before},
        "steps": args.steps,
        "rounds": args.rounds,
        "median_wall_s": {k: round(v, 4) for k, v in wall.items()},
        "median_cpu_s": {k: round(v, 4) for k, v in cpu.items()},
        "cpu_ratios": {k: round(v, 4) for k, v in ratios.items()},
        "wall_ratios": {k: round(v, 4) for k, v in wall_ratios.items()},
        "spans_per_run": len(spans),
        "span_events_per_run": events,
        "floors_cpu_s": {k: round(v, 4) for k, v in floors_s.items()},
        "floor_ratios": {k: round(v, 4) for k, v in floor_ratios.items()},
        "added_cpu_ms_per_step": {k: round((v - base) * 1000 / args.steps, 4) for k, v in cpu.items()},
        "floor_added_cpu_ms_per_step": {
            k: round((v - 1) * base * 1000 / args.steps, 4) for k, v in floor_ratios.items()
        },
        "targets": [t.as_dict() for t in targets],
    }
    per_step = 1000 / args.steps
    floor_added = {k: (v - 1) * base * per_step for k, v in floor_ratios.items()}
    rows = [
        [
            k,
            f"{cpu[k] * per_step:.3f}",
            f"{(cpu[k] - base) * per_step:+.3f}" if k != "untraced" else "",
            f"{floor_added[k]:+.3f}" if k in floor_added else "",
            f"{ratios[k]:.3f}x",
            f"{floor_ratios[k]:.3f}x" if k in floor_ratios else "",
            f"{wall[k] * per_step:.3f}",
            f"{wall_ratios[k]:.3f}x",
        ]
        for k in cpu
    ]
    header = (
        "variant",
        "CPU ms/step",
        "added",
        "floor added",
        "CPU ratio",
        "floor",
        "wall ms/step",
        "wall ratio",
    )
    floor_rows = [
        ["spans, span events per run", f"{len(spans):,}, {events:,}", ""],
        [
            "SDK: make the run's spans back to back",
            f"{floors_s['sdk'] * per_step:.3f}",
            f"{floors_s['sdk'] / base:.3f}x",
        ],
        [
            "OTLP: encode them (exporter thread)",
            f"{floors_s['otlp_encoding'] * per_step:.3f}",
            f"{floors_s['otlp_encoding'] / base:.3f}x",
        ],
    ]
    tables = [
        table(f"a {args.steps:,}-step run, median of {args.rounds} (load {load_before} at start)", header, rows),
        table("floors (CPU of the untraced run's steps = 1)", ("floor", "ms/step", "of untraced"), floor_rows),
        targets_table(targets),
    ]
    if profiled:
        tables.append(f"== cProfile of one SDK run (own time)\n{profiled}")
    emit(args.json, result, tables)


if __name__ == "__main__":
    main()
