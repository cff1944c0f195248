"""A workflow moves on from a TOOL node only on the recorded outcome of its call."""

from __future__ import annotations

from stateward import Agent, FinishNode, RunStatus, Runtime, ToolNode, ToolRegistry, WorkflowController, tool
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
        ref=AgentRef(factory="tests:none"),
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
