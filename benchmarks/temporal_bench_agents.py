"""The agents bench_temporal.py runs on both backends (``temporal_bench_agents:AGENTS``; not a benchmark).

A module of its own: the benchmark's own script is ``__main__`` in its process, and an agent's recorded version
(its fingerprint) would then differ from the one its worker processes build.
"""

from __future__ import annotations

from stateward.controllers.workflow import FinishNode, ToolNode, WorkflowController
from stateward.core.budget import Budget
from stateward.runtime.agent import Agent
from stateward.runtime.agent_registry import AgentRegistry
from stateward.tools.registry import ToolRegistry
from stateward.tools.spec import tool

STEPS_AGENT = "bench-temporal-steps"
APPROVAL_AGENT = "bench-temporal-approval"


@tool(description="Answer at once; no side effect.", timeout_s=30)
def noop(node: int) -> dict[str, int]:
    return {"node": node}


@tool(description="Pay an invoice: a person approves it first.", requires_approval=True, timeout_s=30)
def pay(invoice: str) -> dict[str, str]:
    return {"paid": invoice}


AGENTS = AgentRegistry()


@AGENTS.agent(STEPS_AGENT)
def build_steps(steps: int = 10) -> Agent:
    """``steps`` tool nodes calling ``noop``, then a finish node."""
    names = [f"call_{i}" for i in range(steps)]
    nodes: list[ToolNode | FinishNode] = [
        ToolNode(name, "noop", {"node": i}, next=names[i + 1] if i + 1 < steps else "done")
        for i, name in enumerate(names)
    ]
    nodes.append(FinishNode("done", "all nodes called"))
    return Agent(
        name=STEPS_AGENT,
        controller=WorkflowController(nodes),
        tools=ToolRegistry([noop]),
        budget=Budget(max_steps=steps + 5),
    )


@AGENTS.agent(APPROVAL_AGENT)
def build_approval() -> Agent:
    """One guarded tool node (the run waits for an approval before it), then a finish node."""
    nodes: list[ToolNode | FinishNode] = [
        ToolNode("pay", "pay", {"invoice": "INV-1"}, next="done"),
        FinishNode("done", "paid"),
    ]
    return Agent(
        name=APPROVAL_AGENT, controller=WorkflowController(nodes), tools=ToolRegistry([pay]), budget=Budget(max_steps=5)
    )
