"""A ReAct node: one workflow step explored by a bounded ReAct loop; recorded facts, not the model, end it."""

from __future__ import annotations

from typing import Any

import pytest

from stateward import (
    Agent,
    FinishNode,
    ReActNode,
    RunStatus,
    Runtime,
    ToolNode,
    ToolRegistry,
    UserError,
    WorkflowController,
    tool,
)
from stateward.core.contract import DecisionContext
from stateward.core.events import EventType
from stateward.core.state import AgentRef
from stateward.models.base import ModelRequest
from stateward.models.scripted import ScriptedModel

WRAPPER = "ev:payments/client.py"


def found_wrapper(ctx: DecisionContext) -> bool:
    return any(o.status == "SUCCESS" and WRAPPER in (o.result or {}).get("hits", []) for o in ctx.observations)


def _agent(model: Any, max_steps: int = 3, on_failure: str | None = None) -> tuple[Agent, list[str]]:
    published: list[str] = []

    @tool(description="Search the code.")
    def search_code(query: str) -> dict[str, Any]:
        return {"hits": [WRAPPER] if "wrapper" in query else []}

    @tool(description="Publish the finding.")
    def publish(text: str) -> dict[str, str]:
        published.append(text)
        return {"ok": "yes"}

    nodes = [
        ReActNode(
            "find_wrapper",
            tools=("search_code",),
            instructions="Find the SDK wrapper.",
            done=found_wrapper,
            max_steps=max_steps,
            next="publish",
            on_failure=on_failure,
        ),
        ToolNode("publish", "publish", {"text": "wrapper found"}, next="done"),
        FinishNode("done"),
        FinishNode("gave_up", reason="wrapper not found"),
    ]
    agent = Agent(
        name="react-node",
        controller=WorkflowController(nodes, model=ScriptedModel(model)),
        tools=ToolRegistry([search_code, publish]),
        ref=AgentRef(name="tests:none"),
    )
    return agent, published


def searcher(queries: list[str]) -> Any:
    def policy(req: ModelRequest) -> dict[str, Any]:
        query = queries[min(len(req.observations), len(queries) - 1)]
        return {"type": "EXECUTE_TOOL", "action": "search_code", "args": {"query": query}}

    return policy


def test_the_loop_explores_until_the_facts_show_the_node_is_done_then_the_workflow_goes_on(runtime: Runtime) -> None:
    agent, published = _agent(searcher(["payment client", "sdk wrapper"]))
    state = runtime.start(agent, "find the wrapper")
    assert state.status is RunStatus.COMPLETED and published == ["wrapper found"]
    calls = [
        e.payload["observation"]["action"]
        for e in runtime.store.read_events(state.run_id)
        if e.type is EventType.TOOL_ATTEMPTED
    ]
    assert calls == ["search_code", "search_code", "publish"]


def test_the_loop_is_bounded_and_a_loop_out_of_steps_fails_or_takes_its_route(runtime: Runtime) -> None:
    agent, published = _agent(searcher(["a", "b", "c", "d", "e"]), max_steps=3)
    state = runtime.start(agent, "find the wrapper")
    assert state.status is RunStatus.FAILED and "STEP_LIMIT after 3 steps" in (state.terminal_reason or "")
    assert state.usage.tool_attempts == 3 and published == []
    routed, _ = _agent(searcher(["a", "b", "c", "d"]), max_steps=2, on_failure="gave_up")
    assert runtime.start(routed, "find the wrapper").status is RunStatus.COMPLETED


def test_a_model_saying_done_does_not_finish_the_node(runtime: Runtime) -> None:
    agent, published = _agent(lambda req: {"type": "FINISH", "reason": "found it, trust me"})
    state = runtime.start(agent, "find the wrapper")
    assert state.status is RunStatus.FAILED and "MODEL_DECLARED_STOP" in (state.terminal_reason or "")
    assert published == [] and state.usage.tool_attempts == 0


def test_the_loop_sees_only_its_tools(runtime: Runtime) -> None:
    agent, published = _agent(lambda req: {"type": "EXECUTE_TOOL", "action": "publish", "args": {"text": "x"}})
    state = runtime.start(agent, "find the wrapper")
    assert published == []  # publish is not visible inside the node: the Runtime refuses it
    assert state.status is RunStatus.FAILED and state.usage.tool_attempts == 0
    refused = [e for e in runtime.store.read_events(state.run_id) if e.type is EventType.RUNTIME_VALIDATED]
    assert [e.payload["runtime_decision"] for e in refused] == ["rejected"]


def test_a_react_node_needs_tools_and_a_positive_bound() -> None:
    with pytest.raises(UserError):
        ReActNode("n", tools=(), instructions="", done=found_wrapper)
    with pytest.raises(UserError):
        ReActNode("n", tools=("search_code",), instructions="", done=found_wrapper, max_steps=0)
