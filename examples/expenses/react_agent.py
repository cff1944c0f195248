"""The expense agent as a ReAct loop: a model picks every step; the Runtime asks before the payment.

    python examples/expenses/react_agent.py [--db expenses.db] [--expense EXP-1] [--reject]

The model is scripted (offline); ``model_spec`` (``stateward run expenses-react --model openai:...``)
puts a real one in its place.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

if __name__ == "__main__" and not __package__:  # run as a file: make `examples.expenses` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from examples.expenses.domain import expense_id_in, make_tools

from stateward import Agent, Budget, ModelRequest, ReActController
from stateward.models import Model, model_from_spec
from stateward.testing import ScriptedModel

NAME = "expenses-react"


def last(request: ModelRequest, action: str) -> dict[str, Any] | None:
    """The latest observation of ``action``, or None."""
    return next((o for o in reversed(request.observations) if o["action"] == action), None)


def reimburse(request: ModelRequest) -> dict[str, Any]:
    """The scripted model: read the claim, check the policy, pay if within it, then finish."""
    expense_id = expense_id_in(request.goal)
    claim = last(request, "get_expense")
    if claim is None:
        return {"type": "EXECUTE_TOOL", "action": "get_expense", "args": {"expense_id": expense_id}}
    c = claim["result"]
    policy = last(request, "check_policy")
    if policy is None:
        args = {"category": c["category"], "amount_cents": c["amount_cents"]}
        return {"type": "EXECUTE_TOOL", "action": "check_policy", "args": args}
    if not policy["result"]["within_policy"]:
        return {"type": "FAIL", "reason": "over_policy"}
    payment = last(request, "pay_reimbursement")
    if payment is not None:
        return {"type": "FINISH", "reason": f"payment {payment['status']}"}
    args = {"expense_id": expense_id, "employee": c["employee"], "amount_cents": c["amount_cents"]}
    return {"type": "EXECUTE_TOOL", "action": "pay_reimbursement", "args": args, "reason": "within policy"}


def build_agent(ledger: str = "payments.jsonl", model_spec: str | None = None) -> Agent:
    model: Model = ScriptedModel(reimburse) if model_spec is None else model_from_spec(model_spec)
    return Agent(
        name=NAME,
        controller=ReActController(model),
        tools=make_tools(Path(ledger)),
        budget=Budget(max_steps=20),
    )


if __name__ == "__main__":
    from examples.expenses.program import run_program

    sys.exit(run_program(NAME))
