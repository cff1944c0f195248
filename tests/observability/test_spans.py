"""The span tree of a run, through an in-memory exporter: GenAI attributes, span events, content off by
default, and one trace across a suspend in one Runtime and a resume in another (a fresh provider, as a
new process would have)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from stateward import Agent, AgentRegistry, Budget, ReActController, RunStatus, Runtime, ToolRegistry, tool
from stateward.models.base import ModelRequest
from stateward.observability import ContentPolicy, Telemetry
from stateward.observability.spans import HAND_OVER_EVERY
from stateward.testing import ScriptedModel
from stateward.tools import RetryPolicy, ServiceUnavailable
from stateward.tools.redaction import REDACTED


@tool
def lookup(customer: str, api_key: str = "") -> dict[str, str]:
    """Read a customer record (no side effect)."""
    return {"customer": customer, "tier": "gold"}


@tool(side_effect=True, requires_approval=True)
def refund(customer: str, amount: int) -> str:
    """Pay money back (guarded)."""
    return f"refunded {amount} to {customer}"


def policy(request: ModelRequest) -> dict[str, Any]:
    done = [o["action"] for o in request.observations]
    if "lookup" not in done:
        return {"type": "EXECUTE_TOOL", "action": "lookup", "args": {"customer": "c-1", "api_key": "sk-live-123"}}
    if "refund" not in done:
        return {"type": "EXECUTE_TOOL", "action": "refund", "args": {"customer": "c-1", "amount": 30}}
    return {"type": "FINISH", "reason": "refunded"}


def agent() -> Agent:
    return Agent(
        name="refunder",
        controller=ReActController(ScriptedModel(policy, name="scripted:refund-v1")),
        tools=ToolRegistry([lookup, refund]),
    )


AGENTS = AgentRegistry()
AGENTS.register("refunder", agent)


class Process:
    """What one process has: its own tracer provider (in memory) and a Runtime on the shared store file."""

    def __init__(self, db: Path, content: ContentPolicy | None = None):
        self.exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        telemetry = Telemetry(tracer_provider=provider, content=content)
        self.runtime = Runtime.open(str(db), telemetry=telemetry, agents=AGENTS)

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "runs.db"


def by_name(spans: list[ReadableSpan], prefix: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name.startswith(prefix)]


def parent_id(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


def test_one_trace_across_a_suspend_here_and_a_resume_in_another_process(db: Path) -> None:
    first = Process(db)
    run = first.runtime.start(agent(), "refund c-1")
    assert run.status is RunStatus.WAITING_FOR_USER
    spans1 = first.spans()
    (segment1,) = by_name(spans1, "invoke_agent")
    assert segment1.name == "invoke_agent refunder" and segment1.parent is None
    assert segment1.attributes is not None
    assert segment1.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert segment1.attributes["gen_ai.conversation.id"] == run.run_id
    assert segment1.attributes["stateward.run.status"] == "WAITING_FOR_USER"
    # The wait's events, in order, on the segment span.
    names = [e.name for e in segment1.events]
    wait = ["signal_received", "runtime_validated", "state_transition", "pending_recorded", "run_exited"]
    tail = [n for n in names if n in wait][-5:]
    assert tail == wait
    pending = next(e for e in segment1.events if e.name == "pending_recorded")
    assert pending.attributes is not None and pending.attributes["stateward.pending_request_id"] == "approval_001"

    chats = by_name(spans1, "chat ")
    assert len(chats) == 2 and all(parent_id(c) == segment1.context.span_id for c in chats)
    chat = chats[0]
    assert chat.attributes is not None
    assert chat.name == "chat scripted:refund-v1"
    assert chat.attributes["gen_ai.operation.name"] == "chat"
    assert chat.attributes["gen_ai.provider.name"] == "scripted"
    assert chat.attributes["gen_ai.request.model"] == "scripted:refund-v1"
    assert int(str(chat.attributes["gen_ai.usage.input_tokens"])) > 0
    assert int(str(chat.attributes["gen_ai.usage.output_tokens"])) > 0
    assert tuple(chat.attributes["gen_ai.response.finish_reasons"]) == ("stop",)  # type: ignore[arg-type]
    (call,) = by_name(spans1, "execute_tool")
    assert call.attributes is not None
    assert call.name == "execute_tool lookup" and call.attributes["gen_ai.tool.name"] == "lookup"
    assert call.attributes["gen_ai.tool.call.id"] and call.attributes["stateward.tool.status"] == "SUCCESS"
    # Content is off by default: no arguments, results or messages anywhere.
    for span in spans1:
        assert not any(k in (span.attributes or {}) for k in ("gen_ai.tool.call.arguments", "gen_ai.input.messages"))
    stored = first.runtime.get(run.run_id).trace
    assert stored is not None and stored.root["traceparent"].split("-")[2] == f"{segment1.context.span_id:016x}"
    first.runtime.close()

    second = Process(db)  # another process: its own provider, the trace context only from the store
    done = second.runtime.approve(run.run_id, "approval_001", by="alice").state
    assert done.status is RunStatus.COMPLETED
    spans2 = second.spans()
    (segment2,) = by_name(spans2, "invoke_agent")
    assert segment2.context.trace_id == segment1.context.trace_id
    assert parent_id(segment2) == segment1.context.span_id
    assert [link.context.span_id for link in segment2.links] == [segment1.context.span_id]
    assert segment2.attributes is not None and segment2.attributes["stateward.segment.continued"] is True
    assert segment2.attributes["stateward.run.status"] == "COMPLETED"
    (refunded,) = by_name(spans2, "execute_tool")
    assert refunded.name == "execute_tool refund" and refunded.context.trace_id == segment1.context.trace_id
    assert refunded.attributes is not None and str(refunded.attributes["gen_ai.tool.call.id"]).strip()
    assert all(s.context.trace_id == segment1.context.trace_id for s in spans2)

    # A third segment (another resume) links to the second, still under the first.
    third = Process(db)
    assert third.runtime.get(run.run_id).trace is not None
    last = third.runtime.get(run.run_id).trace
    assert last is not None and f"{segment2.context.span_id:016x}" in last.last["traceparent"]
    second.runtime.close()
    third.runtime.close()


def test_content_is_opt_in_and_redacted(db: Path) -> None:
    proc = Process(db, content=ContentPolicy(capture=True))
    proc.runtime.start(agent(), "refund c-1")
    (call,) = by_name(proc.spans(), "execute_tool")
    assert call.attributes is not None
    args = str(call.attributes["gen_ai.tool.call.arguments"])
    assert '"customer":"c-1"' in args and "sk-live-123" not in args and REDACTED in args
    assert "gold" in str(call.attributes["gen_ai.tool.call.result"])
    chat = by_name(proc.spans(), "chat ")[0]
    assert chat.attributes is not None and "refund c-1" in str(chat.attributes["gen_ai.input.messages"])
    proc.runtime.close()


def test_no_provider_records_nothing_and_stores_no_trace_context(db: Path) -> None:
    runtime = Runtime.open(str(db))  # the global provider: the API's no-op unless an SDK was configured
    run = runtime.start(agent(), "refund c-1")
    assert run.status is RunStatus.WAITING_FOR_USER and runtime.get(run.run_id).trace is None
    runtime.close()


def test_a_plan_run_nests_plan_work_items_attempts_and_their_calls(tmp_path: Path) -> None:
    from stateward_demos.payment.agent import build_agent, goal

    proc = Process(tmp_path / "pm.db")
    state = proc.runtime.start(build_agent(), goal().objective)
    assert state.status is RunStatus.WAITING_FOR_USER
    spans = proc.spans()
    ids = {s.context.span_id: s for s in spans}
    (segment,) = by_name(spans, "invoke_agent")
    plans = by_name(spans, "plan ")
    assert plans and all(parent_id(p) == segment.context.span_id for p in plans)
    assert plans[0].attributes is not None and plans[0].attributes["stateward.plan.version"] == 1
    items = by_name(spans, "work_item ")
    attempts = by_name(spans, "attempt ")
    assert len(items) >= 10 and len(attempts) == len(items)
    assert all(ids[parent_id(i) or 0].name.startswith("plan ") for i in items)
    assert all(ids[parent_id(a) or 0].name.startswith("work_item ") for a in attempts)
    tools = by_name(spans, "execute_tool ")
    chats = by_name(spans, "chat ")
    verifies = by_name(spans, "verify ")
    # Every tool call of an item's attempt sits under that attempt.
    under_attempts = [t for t in tools if ids.get(parent_id(t) or 0, segment).name.startswith("attempt ")]
    assert len(under_attempts) >= len(tools) - 2 and len(tools) >= 10
    assert chats and verifies
    outcomes = {str((v.attributes or {})["stateward.verification.outcome"]) for v in verifies}
    assert len(outcomes) >= 2  # report v1 fails (a repair), v2 passes
    assert all(s.context.trace_id == segment.context.trace_id for s in spans)
    # Queued call spans reach the exporter before the span they sit under ends (children first, as unqueued).
    order = {s.context.span_id: i for i, s in enumerate(spans)}
    assert all(order[s.context.span_id] < order[parent_id(s) or 0] for s in spans if (parent_id(s) or 0) in order)
    proc.runtime.close()


def test_a_tool_span_covers_its_call_and_names_only_what_is_not_routine(db: Path) -> None:
    """A routine call's span leaves out what most calls share (one attempt, one handler call, executed);
    a retried call's span says how many attempts it took. Both span the gateway's call."""
    failures = [ServiceUnavailable("down for a moment")]
    timings: list[int] = []

    @tool(retry=RetryPolicy(max_attempts=2, backoff_base_s=0))
    def flaky(n: int) -> int:
        """Fails once, then answers."""
        timings.append(time.time_ns())
        if failures:
            raise failures.pop()
        return n

    def calls(request: ModelRequest) -> dict[str, Any]:
        if len(request.observations) < 2:
            return {"type": "EXECUTE_TOOL", "action": "flaky", "args": {"n": len(request.observations)}}
        return {"type": "FINISH", "reason": "done"}

    proc = Process(db)
    run = proc.runtime.start(
        Agent(name="flaky", controller=ReActController(ScriptedModel(calls)), tools=ToolRegistry([flaky])), "go"
    )
    assert run.status is RunStatus.COMPLETED
    retried, routine = by_name(proc.spans(), "execute_tool flaky")
    for span in (retried, routine):
        assert span.attributes is not None and span.attributes["stateward.tool.status"] == "SUCCESS"
        assert span.start_time is not None and span.end_time is not None
    assert retried.start_time <= timings[0] and timings[1] <= (retried.end_time or 0)  # type: ignore[operator]
    assert retried.attributes["stateward.tool.attempts"] == 2  # type: ignore[index]
    assert retried.attributes["stateward.tool.runtime_action"] == "RETRY"  # type: ignore[index]
    assert not {"stateward.tool.attempts", "stateward.tool.runtime_action", "stateward.tool.handler_calls"} & set(
        routine.attributes or {}
    )
    assert str((routine.attributes or {})["gen_ai.tool.call.id"]).startswith("idem_")
    proc.runtime.close()


def test_a_refused_proposal_stays_a_span_event_and_an_accepted_call_is_only_its_span(db: Path) -> None:
    """An accepted call's signal and validation are its ``execute_tool`` span (no span event); a proposal
    the Runtime refuses (here a tool the agent does not have, which ends a ReAct run) has no span of its
    own, so its signal and refusal are span events."""

    def proposals(request: ModelRequest) -> dict[str, Any]:
        done = len(request.observations)
        if done == 0:
            return {"type": "EXECUTE_TOOL", "action": "lookup", "args": {"customer": "c-1"}}
        return {"type": "EXECUTE_TOOL", "action": "no_such_tool", "args": {}}

    proc = Process(db)
    refused = Agent(name="refused", controller=ReActController(ScriptedModel(proposals)), tools=ToolRegistry([lookup]))
    run = proc.runtime.start(refused, "go")
    assert run.status is RunStatus.FAILED and run.terminal_reason == "rejected_signal"
    (segment,) = by_name(proc.spans(), "invoke_agent")
    names = [e.name for e in segment.events]
    assert names == ["signal_received", "runtime_validated", "state_transition", "run_exited"]  # the refused step's
    refusal = segment.events[1].attributes or {}
    assert refusal["stateward.runtime_decision"] == "rejected" and refusal["stateward.decision_type"] == "EXECUTE_TOOL"
    (call,) = by_name(proc.spans(), "execute_tool")
    assert call.name == "execute_tool lookup"
    proc.runtime.close()


def test_a_long_drive_hands_its_spans_over_as_it_goes(db: Path) -> None:
    """A segment queues finished spans for the SDK, but never more than HAND_OVER_EVERY items (spans and
    measurements) wait: the exporter sees a long run's spans while it runs, and every one once it ends."""
    steps = 2 * HAND_OVER_EVERY
    proc = Process(db)
    exported_at_call: list[int] = []

    @tool
    def tick(i: int) -> int:
        """Notes how many spans the exporter already has."""
        exported_at_call.append(len(proc.spans()))
        return i

    def ticks(request: ModelRequest) -> dict[str, Any]:
        if len(request.observations) < steps:
            return {"type": "EXECUTE_TOOL", "action": "tick", "args": {"i": len(request.observations)}}
        return {"type": "FINISH", "reason": "done"}

    ticker = Agent(
        name="ticker",
        controller=ReActController(ScriptedModel(ticks)),
        tools=ToolRegistry([tick]),
        budget=Budget(max_steps=steps + 1),
    )
    run = proc.runtime.start(ticker, "go")
    assert run.status is RunStatus.COMPLETED
    # Before call i, i steps were done (a chat and an execute_tool span each); at most the queue's bound waits.
    finished_before_last_call = 2 * (steps - 1)
    assert exported_at_call[-1] >= finished_before_last_call - HAND_OVER_EVERY
    spans = proc.spans()
    assert len(by_name(spans, "execute_tool tick")) == steps and len(by_name(spans, "chat ")) == steps + 1
    (segment,) = by_name(spans, "invoke_agent")
    assert all(s.context.trace_id == segment.context.trace_id for s in spans)
    proc.runtime.close()
