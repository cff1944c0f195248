"""A workflow moves on from a TOOL node only on the recorded outcome of its call."""

from __future__ import annotations

from typing import Any

import pytest

from stateward import (
    Agent,
    FinishNode,
    RequestRefusedError,
    RunStatus,
    Runtime,
    ToolNode,
    ToolRegistry,
    WorkflowController,
    tool,
)
from stateward.controllers.workflow import TimerNode, ValidationNode
from stateward.core.events import EventType
from stateward.core.state import AgentRef
from stateward.tools.errors import ServiceUnavailable


def _agent(on_failure: str | None) -> Agent:
    @tool(description="Always down.")
    def flaky() -> dict[str, str]:
        raise ServiceUnavailable("down for maintenance")

    @tool(description="A fallback that works.")
    def fallback() -> dict[str, str]:
        return {"ok": "yes"}

    nodes = [
        ToolNode("call", "flaky", next="done", on_failure=on_failure),
        ToolNode("fallback", "fallback", next="done"),
        FinishNode("done"),
    ]
    return Agent(
        name="routes",
        controller=WorkflowController(nodes),
        tools=ToolRegistry([flaky, fallback]),
        ref=AgentRef(name="tests:none"),
    )


def test_failed_call_without_route_fails_the_run(runtime: Runtime) -> None:
    state = runtime.start(_agent(None), "g")
    assert state.status is RunStatus.FAILED
    assert state.terminal_reason is not None and "node call failed: SERVICE_UNAVAILABLE" in state.terminal_reason


def test_failed_call_takes_its_failure_route(runtime: Runtime) -> None:
    state = runtime.start(_agent("fallback"), "g")
    assert state.status is RunStatus.COMPLETED
    actions = [
        e.payload["observation"]["action"]
        for e in runtime.store.read_events(state.run_id)
        if e.type is EventType.TOOL_ATTEMPTED
    ]
    assert actions == ["flaky", "fallback"]


def _validated_agent(check: Any) -> Agent:
    @tool(description="Fetch a number.")
    def fetch() -> dict[str, int]:
        return {"value": 41}

    nodes = [
        ToolNode("fetch", "fetch", next="validate"),
        ValidationNode("validate", check, on_pass="done"),
        FinishNode("done"),
    ]
    return Agent(
        name="validated",
        controller=WorkflowController(nodes),
        tools=ToolRegistry([fetch]),
        ref=AgentRef(name="tests:none"),
    )


def test_validation_node_routes_on_code_not_on_claims(runtime: Runtime) -> None:
    def must_be_42(ctx: Any) -> str | None:
        value = ctx.observations[-1].result["value"]
        return None if value == 42 else f"expected 42, got {value}"

    state = runtime.start(_validated_agent(must_be_42), "g")
    assert state.status is RunStatus.FAILED and "expected 42, got 41" in (state.terminal_reason or "")
    ok = runtime.start(_validated_agent(lambda ctx: None), "g")
    assert ok.status is RunStatus.COMPLETED
    outcomes = [
        e.payload["outcome"] for e in runtime.store.read_events(ok.run_id) if e.type is EventType.VERIFICATION_RECORDED
    ]
    assert outcomes == ["PASS"]


def test_timer_node_really_suspends_and_the_sweep_resumes_it(db_path: Any) -> None:
    from datetime import UTC, datetime, timedelta

    from stateward.store.sqlite import SQLiteStore

    now = [datetime(2026, 11, 30, 12, 0, tzinfo=UTC)]
    runtime = Runtime(SQLiteStore(db_path), clock=lambda: now[0])

    @tool(description="Ping.")
    def ping() -> dict[str, str]:
        return {"pong": "yes"}

    agent = Agent(
        name="timed",
        controller=WorkflowController(
            [TimerNode("cool_down", 60, next="ping"), ToolNode("ping", "ping", next="done"), FinishNode("done")]
        ),
        tools=ToolRegistry([ping]),
        ref=AgentRef(name="tests:none"),
    )
    state = runtime.start(agent, "g")
    assert state.status is RunStatus.WAITING_FOR_USER and state.pending is not None
    assert state.pending.kind == "timer" and state.usage.tool_attempts == 0
    with pytest.raises(RequestRefusedError) as err:  # nobody can answer a timer early
        runtime.approve(state.run_id, state.pending.request_id, by="impatient")
    assert err.value.code == "WRONG_ANSWER_KIND"
    assert runtime.expire_requests() == []  # not due yet
    now[0] += timedelta(seconds=61)
    assert runtime.expire_requests() == [state.pending.request_id]
    done = runtime.get(state.run_id)
    assert done.status is RunStatus.COMPLETED and done.usage.tool_attempts == 1
    runtime.close()


def test_node_contracts_check_output_shape_and_call_budget(runtime: Runtime) -> None:
    from pydantic import BaseModel

    from stateward.controllers.workflow import compensation

    class Quote(BaseModel):
        price: int

    booked: list[str] = []

    @tool(description="Quote a price (returns the wrong shape).")
    def quote() -> dict[str, str]:
        return {"cost": "cheap"}

    @tool(description="Book.")
    def book() -> dict[str, str]:
        booked.append("x")
        return {"booked": "yes"}

    @tool(description="Cancel a booking.")
    def unbook() -> dict[str, str]:
        booked.pop()
        return {"cancelled": "yes"}

    nodes = [
        ToolNode("book", "book", next="quote"),
        ToolNode("quote", "quote", next="done", output_schema=Quote, on_failure="undo"),
        compensation("undo", "unbook", {}, next="done"),
        FinishNode("done"),
    ]
    agent = Agent(
        name="saga",
        controller=WorkflowController(nodes),
        tools=ToolRegistry([quote, book, unbook]),
        ref=AgentRef(name="tests:none"),
    )
    state = runtime.start(agent, "g")
    assert state.status is RunStatus.COMPLETED and booked == []  # the bad quote routed to the compensation
    events = runtime.store.read_events(state.run_id)
    assert [e.payload["branch"] for e in events if e.type is EventType.BRANCH_TAKEN] == ["compensation"]

    looping = [ToolNode("again", "book", next="again", max_calls=2)]
    loop = Agent(
        name="loop",
        controller=WorkflowController(looping),
        tools=ToolRegistry([book]),
        ref=AgentRef(name="tests:none"),
    )
    stopped = runtime.start(loop, "g")
    assert stopped.status is RunStatus.FAILED and "call budget exhausted" in (stopped.terminal_reason or "")
    assert stopped.usage.tool_attempts == 2
