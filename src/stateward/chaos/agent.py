"""The agent the harness runs: ledger postings around a human approval, driven by a workflow.

Deterministic by construction (no model), so a fault-free run of the same seed is the reference.
"""

from __future__ import annotations

import random

from stateward.controllers.workflow import FinishNode, HumanNode, ToolNode, WorkflowController
from stateward.core.budget import Budget
from stateward.core.state import AgentRef
from stateward.runtime.agent import Agent
from stateward.tools.registry import ToolRegistry
from stateward.tools.spec import ToolContext, tool

NAME = "chaos-ledger"  # registered by stateward.runtime.agent_registry.builtin_agents


def amounts(seed: int, index: int) -> list[int]:
    rng = random.Random(f"{seed}:{index}")
    return [rng.randint(1, 500) for _ in range(3)]


def build_agent(db: str, seed: int, index: int) -> Agent:
    from stateward.chaos.ledger import ledger_for

    ledger = ledger_for(db)

    @tool(
        description="Post one ledger entry.",
        side_effect=True,
        lookup=ledger.lookup,
        health_check=ledger.ping,
        timeout_s=20,
    )
    def post_entry(op: int, amount: int, ctx: ToolContext) -> dict[str, int]:
        result = ledger.apply(ctx.idempotency_key, ctx.run_id, op, amount, ctx.fencing_token)
        return {"posted": int(result["posted"]), "amount": int(result["amount"])}

    @tool(description="Read the run's ledger balance.", timeout_s=20)
    def read_balance(ctx: ToolContext) -> dict[str, int]:
        return {"balance": ledger.balance(ctx.run_id)}

    a, b, c = amounts(seed, index)
    controller = WorkflowController(
        [
            ToolNode("post_1", "post_entry", {"op": 1, "amount": a}, next="balance_1"),
            ToolNode("balance_1", "read_balance", next="post_2"),
            ToolNode("post_2", "post_entry", {"op": 2, "amount": b}, next="approve"),
            HumanNode("approve", "Post the final entry?", on_approved="post_3", on_rejected="done"),
            ToolNode("post_3", "post_entry", {"op": 3, "amount": c}, next="balance_2"),
            ToolNode("balance_2", "read_balance", next="done"),
            FinishNode("done", "ledger posted"),
        ]
    )
    return Agent(
        name="chaos-ledger",
        controller=controller,
        tools=ToolRegistry([post_entry, read_balance]),
        ref=AgentRef(name=NAME, params={"db": db, "seed": seed, "index": index}),
        budget=Budget(max_steps=30),
    )
