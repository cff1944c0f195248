"""The expense agent as a workflow: code fixes the steps; a person decides exceptions to the policy.

python examples/expenses/workflow_agent.py [--db expenses.db] [--expense EXP-2] [--reject]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

if __name__ == "__main__" and not __package__:  # run as a file: make `examples.expenses` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from examples.expenses.domain import expense_id_in, make_tools

from stateward import (
    Agent,
    Budget,
    DecisionContext,
    FailNode,
    FinishNode,
    HumanNode,
    RuleNode,
    ToolNode,
    WorkflowController,
)

NAME = "expenses-workflow"


def result_of(ctx: DecisionContext, action: str) -> Any:
    """The result of the latest successful call of ``action``: a recorded fact, not a claim."""
    return next(o.result for o in reversed(ctx.observations) if o.action == action and o.status == "SUCCESS")


def claim_id(ctx: DecisionContext) -> str:
    return expense_id_in(ctx.state.goal)


def policy_args(ctx: DecisionContext) -> dict[str, Any]:
    claim = result_of(ctx, "get_expense")
    return {"category": claim["category"], "amount_cents": claim["amount_cents"]}


def payment_args(ctx: DecisionContext) -> dict[str, Any]:
    claim = result_of(ctx, "get_expense")
    return {"expense_id": claim_id(ctx), "employee": claim["employee"], "amount_cents": claim["amount_cents"]}


def exception_question(ctx: DecisionContext) -> str:
    limit = result_of(ctx, "check_policy")["limit_cents"]
    return f"{claim_id(ctx)} is over the policy limit of {limit} cents. Grant an exception?"


def within_policy(ctx: DecisionContext) -> bool:
    return bool(result_of(ctx, "check_policy")["within_policy"])


def build_agent(ledger: str = "payments.jsonl") -> Agent:
    nodes = [
        ToolNode("read", "get_expense", args=lambda ctx: {"expense_id": claim_id(ctx)}, next="check"),
        ToolNode("check", "check_policy", args=policy_args, next="within"),
        RuleNode("within", branch="within_policy", predicate=within_policy, if_true="pay", if_false="exception"),
        HumanNode("exception", question=exception_question, on_approved="pay", on_rejected="refuse"),
        ToolNode("pay", "pay_reimbursement", args=payment_args, next="done"),  # guarded: the Runtime asks
        FinishNode("done", reason="reimbursed"),
        FailNode("refuse", reason="over_policy"),
    ]
    tools = make_tools(Path(ledger))
    return Agent(name=NAME, controller=WorkflowController(nodes), tools=tools, budget=Budget(max_steps=20))


if __name__ == "__main__":
    from examples.expenses.program import run_program

    sys.exit(run_program(NAME))
