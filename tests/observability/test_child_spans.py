"""A child run's trace is its parent's: its segment span is a child of the parent's segment that made the call."""

from __future__ import annotations

from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from tests.runtime import child_family as family

from stateward.observability.tracing import Telemetry
from stateward.runtime.runtime import Runtime


def test_a_child_runs_segment_is_a_child_of_the_parents_calling_segment(tmp_path: Path) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    rt = Runtime.open(str(tmp_path / "t.db"), telemetry=Telemetry(tracer_provider=provider), agents=family.registry())
    rt.start(rt.agents.create("triage"), goal="refund every order", run_id="root")
    segments = [s for s in exporter.get_finished_spans() if s.name.startswith("invoke_agent")]
    parents = [s for s in segments if s.name == "invoke_agent triage"]
    kids = [s for s in segments if s.name == "invoke_agent refund-agent"]
    assert len(kids) == 2 and len(parents) == 3  # up to each call, and to the end
    assert {s.context.trace_id for s in segments} == {parents[0].context.trace_id}  # one trace
    # Each child's segment hangs under the parent's segment that made its call.
    assert [k.parent.span_id for k in kids if k.parent] == [parents[0].context.span_id, parents[1].context.span_id]
    rt.close()
