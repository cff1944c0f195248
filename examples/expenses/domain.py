"""The expense domain: claims, the policy, and the three tools every variant of the agent uses.

Payments are appended to a JSON-lines ledger file, keyed by the gateway's idempotency key, so a
payment made in one process is visible to the next and never made twice for one call.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from stateward import ToolContext, ToolInvalidArgument, ToolRegistry, tool

EXPENSES: dict[str, dict[str, Any]] = {
    "EXP-1": {"employee": "alice", "amount_cents": 4200, "category": "meals"},
    "EXP-2": {"employee": "bob", "amount_cents": 9900, "category": "meals"},
    "EXP-3": {"employee": "chen", "amount_cents": 31000, "category": "travel"},
}
LIMITS = {"meals": 5000, "travel": 50000}


def expense_id_in(goal: str) -> str:
    """The claim a goal is about ("reimburse expense EXP-1")."""
    found = re.search(r"EXP-\d+", goal)
    if found is None:
        raise ValueError(f"the goal names no expense (EXP-n): {goal!r}")
    return found.group(0)


def payment_args(expense_id: str) -> dict[str, Any]:
    """The exact arguments of the payment of a claim."""
    claim = EXPENSES[expense_id]
    return {"expense_id": expense_id, "employee": claim["employee"], "amount_cents": claim["amount_cents"]}


def read_ledger(ledger: Path) -> list[dict[str, Any]]:
    """Every payment made so far."""
    if not ledger.exists():
        return []
    return [json.loads(line) for line in ledger.read_text().splitlines() if line.strip()]


def make_tools(ledger: Path) -> ToolRegistry:
    """get_expense, check_policy and the guarded pay_reimbursement, paying into ``ledger``."""

    @tool
    def get_expense(expense_id: str) -> dict[str, Any]:
        """Read an expense claim: who claims how much, in which category."""
        if expense_id not in EXPENSES:
            raise ToolInvalidArgument(f"no expense {expense_id}")
        return {"expense_id": expense_id, **EXPENSES[expense_id]}

    @tool
    def check_policy(category: str, amount_cents: int) -> dict[str, Any]:
        """Whether an amount is within the policy's limit for its category."""
        limit = LIMITS.get(category, 0)
        return {"within_policy": amount_cents <= limit, "limit_cents": limit}

    @tool(requires_approval=True)
    def pay_reimbursement(expense_id: str, employee: str, amount_cents: int, ctx: ToolContext) -> dict[str, Any]:
        """Pay an employee back. Guarded: a person approves each exact call."""
        if not any(p["key"] == ctx.idempotency_key for p in read_ledger(ledger)):
            entry = {"key": ctx.idempotency_key, "expense_id": expense_id, "employee": employee}
            with ledger.open("a") as f:
                f.write(json.dumps({**entry, "amount_cents": amount_cents}) + "\n")
        return {"paid": expense_id, "employee": employee, "amount_cents": amount_cents}

    return ToolRegistry([get_expense, check_policy, pay_reimbursement])
