"""The agent the harness runs: ledger postings around a human approval, driven by a workflow.

Deterministic by construction (no model), so a fault-free run of the same seed is the reference.

``fault`` (a :class:`LedgerFault` value; the campaign's table rows, never the storm) puts the run in
one of the source's fault situations, each met by a runtime protection:

- ``timeout-once``: the first posting is applied but its answer is lost; the gateway reconciles through the
  ledger's lookup and posts nothing twice;
- ``mirror-down``: the ledger's mirror, synced before posting, fails every attempt; the retries are bounded,
  its breaker opens, and the workflow hands the posting to a person;
- ``permission-denied``: the agent lacks ``ledger:post``; the gateway refuses the posting and the workflow
  hands it to a person.
"""

from __future__ import annotations

import random
import time
from enum import StrEnum
from typing import Final

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

from stateward.controllers.workflow import FinishNode, HumanNode, Node, ToolNode, WorkflowController
from stateward.core.budget import Budget
from stateward.core.errors import ErrorCode, UserError
from stateward.core.state import AgentRef
from stateward.runtime.agent import Agent
from stateward.runtime.agent_registry import AgentRegistry
from stateward.tools.errors import ServiceUnavailable
from stateward.tools.registry import ToolRegistry
from stateward.tools.retry import RetryPolicy
from stateward.tools.spec import ToolContext, ToolSpec, tool

NAME = "chaos-ledger"  # registered only on request: ``registry`` below (STATEWARD_TEST_AGENTS=1)
POST_PERMISSION: Final = "ledger:post"
LOST_ANSWER_TIMEOUT_S: Final = 0.25


class LedgerFault(StrEnum):
    """A fault a ledger run meets (see the module docstring)."""

    TIMEOUT_ONCE = "timeout-once"
    MIRROR_DOWN = "mirror-down"
    PERMISSION_DENIED = "permission-denied"


def amounts(seed: int, index: int) -> list[int]:
    rng = random.Random(f"{seed}:{index}")
    return [rng.randint(1, 500) for _ in range(3)]


def _mirror() -> ToolSpec:
    @tool(description="Sync the ledger's mirror before posting.", retry=RetryPolicy(max_attempts=3, backoff_base_s=0))
    def sync_mirror() -> dict[str, bool]:
        raise ServiceUnavailable("the ledger mirror does not answer")

    return sync_mirror


def _nodes(amount: list[int], fault: LedgerFault | None) -> list[Node]:
    a, b, c = amount
    handoff = "handoff" if fault is not None else None
    nodes: list[Node] = [
        ToolNode("post_1", "post_entry", {"op": 1, "amount": a}, next="balance_1", on_failure=handoff),
        ToolNode("balance_1", "read_balance", next="post_2"),
        ToolNode("post_2", "post_entry", {"op": 2, "amount": b}, next="approve", on_failure=handoff),
        HumanNode("approve", "Post the final entry?", on_approved="post_3", on_rejected="done"),
        ToolNode("post_3", "post_entry", {"op": 3, "amount": c}, next="balance_2", on_failure=handoff),
        ToolNode("balance_2", "read_balance", next="done"),
        FinishNode("done", "ledger posted"),
    ]
    if fault is not None:
        # A person takes over what the tools could not do; their answer ends the run either way.
        nodes.append(HumanNode("handoff", "Posting failed: post it by hand?", on_approved="done", on_rejected="done"))
    if fault is LedgerFault.MIRROR_DOWN:
        nodes.insert(0, ToolNode("sync", "sync_mirror", next="post_1", on_failure="handoff"))
    return nodes


def build_agent(db: str, seed: int, index: int, fault: str | None = None, max_steps: int = 30) -> Agent:
    from stateward.chaos.ledger import ledger_for

    try:
        injected = None if fault is None else LedgerFault(fault)
    except ValueError:
        known = ", ".join(f.value for f in LedgerFault)
        raise UserError(f"unknown ledger fault {fault!r}; known: {known}", code=ErrorCode.UNKNOWN_FIXTURE) from None
    ledger = ledger_for(db)
    lose_first = injected is LedgerFault.TIMEOUT_ONCE

    @tool(
        description="Post one ledger entry.",
        side_effect=True,
        permission=POST_PERMISSION,
        lookup=ledger.lookup,
        health_check=ledger.ping,
        timeout_s=LOST_ANSWER_TIMEOUT_S if lose_first else 20,
    )
    def post_entry(op: int, amount: int, ctx: ToolContext) -> dict[str, int]:
        first = lose_first and ledger.balance(ctx.run_id) == 0
        result = ledger.apply(ctx.idempotency_key, ctx.run_id, op, amount, ctx.fencing_token)
        if first:
            time.sleep(LOST_ANSWER_TIMEOUT_S * 4)  # applied; the answer arrives after the gateway gave up
        return {"posted": int(result["posted"]), "amount": int(result["amount"])}

    @tool(description="Read the run's ledger balance.", timeout_s=20)
    def read_balance(ctx: ToolContext) -> dict[str, int]:
        return {"balance": ledger.balance(ctx.run_id)}

    tools = [post_entry, read_balance, *([_mirror()] if injected is LedgerFault.MIRROR_DOWN else [])]
    params: dict[str, object] = {"db": db, "seed": seed, "index": index}
    if injected is not None:
        params["fault"] = injected.value
    if max_steps != 30:
        params["max_steps"] = max_steps
    return Agent(
        name="chaos-ledger",
        controller=WorkflowController(_nodes(amounts(seed, index), injected)),
        tools=ToolRegistry(tools),
        ref=AgentRef(name=NAME, params=params),
        budget=Budget(max_steps=max_steps),
        permissions=frozenset() if injected is LedgerFault.PERMISSION_DENIED else frozenset({POST_PERMISSION}),
    )


class LedgerParams(BaseModel):
    """The ledger agent's params: a store path (this is a test agent: its operator names the store), the
    seed and index its amounts come from, an optional fault, a step bound."""

    model_config = ConfigDict(extra="forbid")

    db: StrictStr = Field(min_length=1, max_length=4096)
    seed: StrictInt = Field(ge=0, le=2**53)
    index: StrictInt = Field(ge=0, le=10**9)
    fault: LedgerFault | None = None
    max_steps: StrictInt = Field(default=30, ge=1, le=10_000)


registry = AgentRegistry()
"""The agents made for fault campaigns; a process registers them only when its operator asks."""
registry.register(
    NAME,
    build_agent,
    description="the ledger agent `stateward chaos` drives (a test agent)",
    source="test agents (stateward.chaos.agent:registry)",
    params_schema=LedgerParams,
)
