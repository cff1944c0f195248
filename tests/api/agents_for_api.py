"""Agents the API tests register: a guarded payment (optionally needing a domain role) and a question."""

from __future__ import annotations

from typing import Any

from stateward import Agent, AgentRegistry, ReActController, ToolRegistry, tool
from stateward.testing import ScriptedModel


@tool(requires_approval=True)
def pay(invoice: str, amount_cents: int) -> dict[str, str]:
    """Pay an invoice (a real effect)."""
    PAID.append(invoice)
    return {"paid": invoice}


PAID: list[str] = []
agents = AgentRegistry()


@agents.agent("payer")
def make_payer(invoice: str = "INV-1", amount_cents: int = 100, approver_role: str | None = None) -> Agent:
    """Pays one invoice once a person approves that exact payment."""

    def decide(request: Any) -> dict[str, Any]:
        if any(o["action"] == "pay" and o["status"] == "SUCCESS" for o in request.observations):
            return {"type": "FINISH", "reason": "paid"}
        if any(o["action"] == "pay" and o["status"] == "REJECTED" for o in request.observations):
            return {"type": "FAIL", "reason": "payment refused"}
        return {"type": "EXECUTE_TOOL", "action": "pay", "args": {"invoice": invoice, "amount_cents": amount_cents}}

    return Agent(
        name="payer",
        controller=ReActController(ScriptedModel(decide)),
        tools=ToolRegistry([pay]),
        approver_role=approver_role,
    )
