"""The expense agent as a plan run: a validated three-item plan, a bounded local ReAct per item.

    python examples/expenses/plan_agent.py [--db expenses.db] [--expense EXP-1] [--exact-approval]

By default the payment item's approval binds to ``start_work_item`` of that item and plan version, and
the guarded payment inside it asks again; ``exact_approval`` binds the item's approval to the payment.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

if __name__ == "__main__" and not __package__:  # run as a file: make `examples.expenses` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from examples.expenses.domain import EXPENSES, expense_id_in, make_tools, payment_args

from stateward import Agent, Budget, ModelRequest, ToolRegistry, guard
from stateward.planning import GoalContract, PlanRunConfig, PlanRunController, plan_finish_policy, plan_run_tools
from stateward.testing import ScriptedModel

NAME = "expenses-plan"


def item(wid: str, title: str, deps: list[str], tool_name: str, output: str, **extra: Any) -> dict[str, Any]:
    return {
        "work_item_id": wid,
        "milestone_id": "M1",
        "title": title,
        "task_type": "LOCAL_REACT",
        "dependencies": deps,
        "required_capabilities": [tool_name],
        "output_spec": {"artifact_type": output},
        "completion_criteria": [f"{output} recorded"],
        "max_react_steps": 3,
        "estimated_cost": {"tool_calls": 2, "model_calls": 2},
        **extra,
    }


def plan_for(expense_id: str) -> dict[str, Any]:
    return {
        "plan_id": f"reimburse-{expense_id}",
        "version": 1,
        "goal_id": f"reimburse-{expense_id}",
        "milestones": [{"milestone_id": "M1", "title": "Claim reimbursed"}],
        "work_items": [
            item("W1", "Read the claim", [], "get_expense", "claim"),
            item("W2", "Check the policy", ["W1"], "check_policy", "policy-check"),
            item(
                "W3",
                "Pay the employee",
                ["W2"],
                "pay_reimbursement",
                "payment",
                risk_level="high",
                approval_required=True,
            ),
        ],
    }


def seen(request: ModelRequest, action: str) -> dict[str, Any] | None:
    return next((o for o in reversed(request.observations) if o["action"] == action and o["status"] == "SUCCESS"), None)


def record(artifact_type: str, value: Any, source: dict[str, Any]) -> dict[str, Any]:
    """Write an item's output, citing the observation it rests on by its evidence id."""
    args = {"artifact_type": artifact_type, "content": json.dumps(value), "evidence": [source["evidence_id"]]}
    return {"type": "EXECUTE_TOOL", "action": "record_output", "args": args}


def make_worker(expense_id: str) -> ScriptedModel:
    def worker(request: ModelRequest) -> dict[str, Any]:
        wid = request.facts["work_item"]["work_item_id"]
        if wid == "W1":
            claim = seen(request, "get_expense")
            if claim is None:
                return {"type": "EXECUTE_TOOL", "action": "get_expense", "args": {"expense_id": expense_id}}
            return record("claim", claim["result"], claim)
        if wid == "W2":
            policy = seen(request, "check_policy")
            if policy is None:
                claim = EXPENSES[expense_id]
                args = {"category": claim["category"], "amount_cents": claim["amount_cents"]}
                return {"type": "EXECUTE_TOOL", "action": "check_policy", "args": args}
            if not policy["result"]["within_policy"]:
                return {"type": "FAIL", "reason": "over_policy"}
            return record("policy-check", policy["result"], policy)
        paid = seen(request, "pay_reimbursement")
        if paid is None:
            return {"type": "EXECUTE_TOOL", "action": "pay_reimbursement", "args": payment_args(expense_id)}
        return record("payment", paid["result"], paid)

    return ScriptedModel(worker)


def build_agent(ledger: str = "payments.jsonl", expense_id: str = "EXP-1", exact_approval: bool = False) -> Agent:
    goal = GoalContract(goal_id=f"reimburse-{expense_id}", objective=f"Reimburse expense {expense_id} if within policy")
    config = PlanRunConfig(
        goal=goal,
        approval_action=(lambda work_item, memo: guard("pay_reimbursement", payment_args(expense_id)))
        if exact_approval
        else None,
    )
    planner = ScriptedModel(lambda request: plan_for(expense_id_in(request.goal)))
    return Agent(
        name=NAME,
        controller=PlanRunController(planner, make_worker(expense_id), config),
        tools=ToolRegistry([*make_tools(Path(ledger)), *plan_run_tools()]),
        finish_policy=plan_finish_policy,
        budget=Budget(max_steps=40),
    )


if __name__ == "__main__":
    from examples.expenses.program import run_program

    sys.exit(run_program(NAME, lambda args: {"expense_id": args.expense, "exact_approval": args.exact_approval}))
