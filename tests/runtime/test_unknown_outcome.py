"""A side effect whose outcome nobody can tell makes the run wait, and nothing is retried blindly."""

from __future__ import annotations

import threading
from typing import Any

from stateward import (
    Agent,
    FinishNode,
    RunStatus,
    Runtime,
    ToolContext,
    ToolNode,
    ToolRegistry,
    WorkflowController,
    tool,
)
from stateward.core.state import AgentRef, is_run_suspended
from stateward.tools.types import LookupStatus


def test_unknown_outcome_suspends_for_reconciliation(runtime: Runtime) -> None:
    calls: list[str] = []
    release = threading.Event()

    def lookup(key: str) -> tuple[LookupStatus, Any]:
        return LookupStatus.UNKNOWN, None

    @tool(description="Pay out.", side_effect=True, lookup=lookup, timeout_s=0.05)
    def pay(amount: int, ctx: ToolContext) -> dict[str, int]:
        calls.append(ctx.idempotency_key)
        release.wait(2)  # the response never arrives in time
        return {"paid": amount}

    agent = Agent(
        name="payer",
        controller=WorkflowController([ToolNode("pay", "pay", {"amount": 5}, next="done"), FinishNode("done")]),
        tools=ToolRegistry([pay]),
        ref=AgentRef(name="tests:none"),
    )
    state = runtime.start(agent, "pay once")
    release.set()
    assert state.status is RunStatus.WAITING_FOR_USER
    assert state.pending is not None and state.pending.kind == "reconciliation"
    assert is_run_suspended(state)
    assert len(calls) == 1  # no blind retry
    assert runtime.store.get_side_effect(calls[0]) is not None
