"""MCP tools through the same gateway, against a real MCP server (tests/tools/mcp_server_fixture.py)
started as a subprocess over stdio and over streamable HTTP on 127.0.0.1.

The fixture's ledger file is the outside world: one line per side effect, keyed by the idempotency key
the gateway sent in the request's ``_meta``.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from stateward import (
    Agent,
    ReActController,
    RequestRefusedError,
    RunStatus,
    Runtime,
    ServiceUnavailable,
    ToolRegistry,
    UserError,
    is_run_suspended,
)
from stateward.core.events import EventType
from stateward.models.base import ModelRequest
from stateward.testing import InMemoryGatewayStore, ScriptedModel
from stateward.tools import CallContext, LookupStatus, ToolCall, ToolGateway
from stateward.tools.mcp import McpServer, McpTool, mcp_tools

pytestmark = pytest.mark.slow

FIXTURE = Path(__file__).with_name("mcp_server_fixture.py")
READY_TIMEOUT_S = 20.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_listening(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the MCP fixture server exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"the MCP fixture server did not listen on {port} within {READY_TIMEOUT_S}s")


@contextmanager
def started(transport: str, ledger: Path) -> Iterator[McpServer]:
    """The fixture server over one transport; closed (and its process reaped) on exit."""
    if transport == "stdio":
        with McpServer.stdio(sys.executable, [str(FIXTURE), str(ledger), "stdio"], stderr=subprocess.DEVNULL) as srv:
            yield srv
        return
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, str(FIXTURE), str(ledger), "http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_listening(port, proc)
        with McpServer.http(f"http://127.0.0.1:{port}/mcp", name="fixture") as srv:
            yield srv
    finally:
        proc.kill()
        proc.wait(10)


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    return tmp_path / "ledger.jsonl"


@pytest.fixture(params=["stdio", "http"])
def server(request: pytest.FixtureRequest, ledger: Path) -> Iterator[McpServer]:
    """A fresh server per test: for tests with side effects, or that kill the server."""
    with started(request.param, ledger) as srv:
        yield srv


@pytest.fixture(scope="module", params=["stdio", "http"])
def calm(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[McpServer, Path]]:
    """One server per transport for the tests that neither change the world nor stop the server."""
    ledger = tmp_path_factory.mktemp("mcp") / "ledger.jsonl"
    with started(request.param, ledger) as srv:
        yield srv, ledger


def lines(ledger: Path) -> list[dict[str, Any]]:
    if not ledger.exists():
        return []
    return [json.loads(line) for line in ledger.read_text().splitlines() if line.strip()]


def ledger_lookup(ledger: Path) -> Callable[[str], tuple[LookupStatus, Any]]:
    """What the world says happened under an idempotency key: the test's reconciliation source."""

    def lookup(key: str) -> tuple[LookupStatus, Any]:
        for rec in lines(ledger):
            if rec["key"] == key:
                return LookupStatus.SUCCEEDED, {"content": [{"type": "text", "text": f"sent to {rec['to']}"}]}
        return LookupStatus.NOT_EXECUTED, None

    return lookup


def script(*steps: dict[str, Any]) -> Callable[[ModelRequest], dict[str, Any]]:
    """A model that proposes ``steps`` in order (one per decision), then finishes."""

    def policy(req: ModelRequest) -> dict[str, Any]:
        done = len(req.observations)
        return steps[done] if done < len(steps) else {"type": "FINISH", "reason": "done"}

    return policy


def call(action: str, **args: Any) -> dict[str, Any]:
    return {"type": "EXECUTE_TOOL", "action": action, "args": args, "reason": f"use {action}"}


def agent(tools: list[Any], *steps: dict[str, Any]) -> Agent:
    return Agent(name="mcp-agent", controller=ReActController(ScriptedModel(script(*steps))), tools=ToolRegistry(tools))


def observed(runtime: Runtime, run_id: str) -> list[dict[str, Any]]:
    """What the run observed of its tool calls, from its event log."""
    events = runtime.events(run_id, content=True)
    return [e.payload["observation"] for e in events if e.type is EventType.TOOL_ATTEMPTED]


def gateway_call(tools: list[Any], tool: str, **args: Any) -> Any:
    gateway = ToolGateway(ToolRegistry(tools), InMemoryGatewayStore())
    return gateway.invoke(ToolCall(tool=tool, args=args), CallContext(run_id="run_1", step=1))


def test_read_only_runs_and_an_undeclared_tool_waits_for_an_approval_then_runs_once(
    runtime: Runtime, server: McpServer, ledger: Path
) -> None:
    tools = mcp_tools(server, include=["search", "send_email"], declare={"search": McpTool(side_effect=False)})
    by_name = {t.name: t for t in tools}
    assert not by_name["search"].side_effect and not by_name["search"].requires_approval
    assert by_name["send_email"].side_effect and by_name["send_email"].requires_approval  # undeclared: guarded
    assert by_name["search"].input_schema()["required"] == ["query"]  # the server's schema, shown to models

    state = runtime.start(
        agent(tools, call("search", query="refunds"), call("send_email", to="ann@example.com", body="hi")), "mail ann"
    )

    assert is_run_suspended(state) and lines(ledger) == []
    assert state.pending is not None and state.pending.kind == "approval"
    [first] = observed(runtime, state.run_id)
    assert first["status"] == "SUCCESS" and "result 1 for refunds" in first["result"]["content"][0]["text"]

    answered = runtime.approve(state.run_id, state.pending.request_id, by="alice")

    assert answered.state.status is RunStatus.COMPLETED
    effects = lines(ledger)
    assert [(e["tool"], e["to"]) for e in effects] == [("send_email", "ann@example.com")]
    sent = [o for o in observed(runtime, state.run_id) if o["action"] == "send_email"]
    assert [o["status"] for o in sent] == ["SUCCESS"]
    # the server received the call's idempotency key, so it (or a lookup) can tell this call apart
    assert effects[0]["key"] is not None and effects[0]["key"].startswith("idem_")


def test_a_server_dying_mid_call_is_reconciled_through_the_lookup_not_repeated(
    runtime: Runtime, server: McpServer, ledger: Path
) -> None:
    tools = mcp_tools(
        server,
        include=["crash_after_send"],
        declare={"crash_after_send": McpTool(side_effect=True, lookup=ledger_lookup(ledger), timeout_s=20)},
    )

    state = runtime.start(agent(tools, call("crash_after_send", to="bob@example.com")), "mail bob")

    assert state.status is RunStatus.COMPLETED
    assert len(lines(ledger)) == 1  # the effect happened once; nothing re-sent it
    [obs] = observed(runtime, state.run_id)
    assert obs["status"] == "SUCCESS" and obs["result"]["content"][0]["text"] == "sent to bob@example.com"


def test_a_server_dying_mid_call_without_a_lookup_makes_the_run_wait_for_a_person(
    runtime: Runtime, server: McpServer, ledger: Path
) -> None:
    tools = mcp_tools(server, include=["crash_after_send"], declare={"crash_after_send": McpTool(timeout_s=20)})

    state = runtime.start(agent(tools, call("crash_after_send", to="bob@example.com")), "mail bob")

    assert is_run_suspended(state)
    assert state.pending is not None and state.pending.kind == "reconciliation"
    assert len(lines(ledger)) == 1
    [obs] = observed(runtime, state.run_id)
    assert obs["error_code"] == "UNKNOWN_OUTCOME"


def test_an_mcp_tools_own_approver_role_answers_its_reconciliation_and_the_answer_decides(
    runtime: Runtime, server: McpServer, ledger: Path
) -> None:
    declared = McpTool(requires_approval=True, timeout_s=20, approver_role="comms")  # comms answers, not the agent
    tools = mcp_tools(server, include=["crash_after_send"], declare={"crash_after_send": declared})
    assert tools[0].approver_role == "comms"
    mailer = agent(tools, call("crash_after_send", to="bob@example.com"))
    mailer.approver_role = "finance"
    state = runtime.start(mailer, "mail bob")
    assert state.pending is not None and state.pending.approver_role == "comms"  # the approval
    state = runtime.approve(state.run_id, state.pending.request_id, by="cat", roles=frozenset({"comms"})).state
    assert state.pending is not None and state.pending.kind == "reconciliation"
    assert state.pending.approver_role == "comms" and len(lines(ledger)) == 1
    with pytest.raises(RequestRefusedError) as refused:
        runtime.approve(state.run_id, state.pending.request_id, by="fin", roles=frozenset({"finance"}))
    assert refused.value.code == "ROLE_NOT_ALLOWED"
    done = runtime.approve(state.run_id, state.pending.request_id, by="cat", roles=frozenset({"comms"}))
    assert done.state.status is RunStatus.COMPLETED and len(lines(ledger)) == 1  # sent once, never re-sent
    [obs] = observed(runtime, state.run_id)[1:]
    assert obs["status"] == "SUCCESS" and obs["result"]["confirmed_by_person"]["by"] == "cat"


def test_invalid_arguments_are_refused_with_field_errors_before_reaching_the_server(
    calm: tuple[McpServer, Path],
) -> None:
    server, ledger = calm
    tools = mcp_tools(server, include=["send_email"], declare={"send_email": McpTool(side_effect=True)})

    out = gateway_call(tools, "send_email", to=5)

    assert out.error_code == "INVALID_ARGUMENT" and out.handler_calls == 0
    errors = {(tuple(e["loc"]), e["type"]) for e in out.field_errors}
    assert errors == {(("to",), "json_schema_type"), (("body",), "missing")}
    assert lines(ledger) == []


def test_results_are_bounded_and_tool_errors_are_classified(calm: tuple[McpServer, Path]) -> None:
    server, _ = calm
    tools = mcp_tools(
        server,
        include=["shout", "fail"],
        declare={"shout": McpTool(side_effect=False, max_result_bytes=200), "fail": McpTool(side_effect=False)},
    )

    loud = gateway_call(tools, "shout", text="abc")
    failed = gateway_call(tools, "fail", reason="no")

    assert loud.status == "SUCCESS" and loud.truncated and len(loud.result.encode()) < 400
    assert failed.status == "FAILED" and failed.error_code == "EXECUTION_ERROR" and failed.handler_calls == 1
    assert "reported an error" in (failed.error or "")


def test_unusable_tools_are_refused_by_name(calm: tuple[McpServer, Path]) -> None:
    server, _ = calm
    with pytest.raises(UserError) as odd:
        mcp_tools(server)  # the fixture also lists "odd name!"
    with pytest.raises(UserError) as prefixed:
        mcp_tools(server, include=["search"], prefix="9-")
    with pytest.raises(UserError) as huge:
        mcp_tools(server, include=["search"], max_schema_bytes=64)
    with pytest.raises(UserError) as absent:
        mcp_tools(server, declare={"no_such_tool": McpTool(side_effect=False)})

    assert odd.value.code == "MCP_TOOL_NAME_INVALID" and "odd name!" in odd.value.message
    assert prefixed.value.code == "MCP_TOOL_NAME_INVALID"
    assert huge.value.code == "MCP_TOOL_SCHEMA_TOO_LARGE"
    assert absent.value.code == "MCP_TOOL_NOT_FOUND"
    names = [t.name for t in mcp_tools(server, include=["search", "fail"], prefix="fx_")]
    assert names == ["fx_fail", "fx_search"]


def test_an_unreachable_server_is_a_retryable_unavailability() -> None:
    server = McpServer.http(f"http://127.0.0.1:{_free_port()}/mcp", connect_timeout_s=5)
    try:
        with pytest.raises(ServiceUnavailable) as refused:
            server.call_tool("search", {"query": "x"}, timeout_s=5)
        assert refused.value.code == "SERVICE_UNAVAILABLE"
        with pytest.raises(ServiceUnavailable):
            mcp_tools(server)
    finally:
        server.close()
    with pytest.raises(UserError) as closed:
        server.list_tools()
    assert closed.value.code == "MCP_SERVER_CLOSED"
