"""An agent a worker subprocess builds by name (``--agents tests.observability.agents_for_metrics:AGENTS``)."""

from __future__ import annotations

from typing import Any

from stateward import Agent, AgentRegistry, ReActController, ToolRegistry, tool
from stateward.models.base import ModelRequest
from stateward.testing import ScriptedModel


@tool
def lookup(customer: str) -> dict[str, str]:
    """Read a customer record (no side effect)."""
    return {"customer": customer, "tier": "gold"}


@tool(side_effect=True, requires_approval=True)
def refund(customer: str, amount: int) -> str:
    """Pay money back (guarded: the run waits for a person)."""
    return f"refunded {amount} to {customer}"


def policy(request: ModelRequest) -> dict[str, Any]:
    done = [o["action"] for o in request.observations]
    if "lookup" not in done:
        return {"type": "EXECUTE_TOOL", "action": "lookup", "args": {"customer": "c-1"}}
    if "refund" not in done:
        return {"type": "EXECUTE_TOOL", "action": "refund", "args": {"customer": "c-1", "amount": 30}}
    return {"type": "FINISH", "reason": "refunded"}


def refunder() -> Agent:
    return Agent(
        name="refunder",
        controller=ReActController(ScriptedModel(policy, name="scripted:refund-v1")),
        tools=ToolRegistry([lookup, refund]),
    )


AGENTS = AgentRegistry()
AGENTS.register("refunder", refunder)
