"""The agents the Temporal tier's workers host (imported by name: ``STATEWARD_AGENTS=temporal_agents:registry``).

``refunds``: a scripted model searches, then proposes a guarded, side-effecting refund (a person approves it),
then finishes. Each refund the handler performs is a line in the file ``ledger`` names, so a test counts the
side effects across processes; ``hold_s`` keeps the handler in flight (a worker can be killed mid-call),
``hold_workflow_mark`` a workflow task.
"""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import workflow

from stateward import (
    Agent,
    AgentRegistry,
    Budget,
    LookupStatus,
    ReActController,
    RetryPolicy,
    ToolContext,
    ToolRegistry,
    tool,
)
from stateward.models.base import ModelRequest
from stateward.models.scripted import ScriptedModel

registry = AgentRegistry()


def _policy(request: ModelRequest, think_s: float = 0.0) -> dict[str, Any]:
    if think_s:
        time.sleep(think_s)  # a slow model: a pause asked meanwhile is honoured at the step's end
    obs = request.observations
    if not obs:
        return {"type": "EXECUTE_TOOL", "action": "search_orders", "args": {"query": "c-42"}}
    last = obs[-1]
    if last["action"] == "search_orders":
        return {"type": "EXECUTE_TOOL", "action": "refund_order", "args": {"order_id": "A-1", "amount_cents": 1250}}
    if last["action"] == "refund_order" and last["status"] == "SUCCESS":
        return {"type": "FINISH", "reason": "refunded"}
    return {"type": "REQUEST_USER_INPUT", "question": f"refund_order ended {last['status']}: what now?"}


@registry.agent("refunds")
def build(
    ledger: str,
    hold_s: float = 0.0,
    max_steps: int = 8,
    hold_workflow_mark: str = "",
    think_s: float = 0.0,
    request_ttl_s: float | None = None,
    lookup: bool = True,
    timeout_s: float = 60.0,
) -> Agent:
    book = Path(ledger)
    if hold_workflow_mark and workflow.in_workflow() and not Path(hold_workflow_mark).exists():
        # Built inside a workflow task (the workflow decides with the agent's tools): the first time, say so and
        # hold the task a moment, so a test can kill the worker in the middle of it (the SDK's deadlock
        # detector allows two seconds).
        Path(hold_workflow_mark).touch()
        time.sleep(1.5)

    def performed(key: str) -> bool:
        return book.exists() and key in book.read_text().split()

    def find(key: str) -> tuple[LookupStatus, Any]:
        return (LookupStatus.SUCCEEDED, {"refunded": True}) if performed(key) else (LookupStatus.NOT_EXECUTED, None)

    @tool(description="Search orders by customer.")
    def search_orders(query: str) -> list[dict[str, Any]]:
        return [{"order_id": "A-1", "customer": query, "amount_cents": 1250}]

    @tool(
        description="Refund an order: money leaves the shop.",
        side_effect=True,
        requires_approval=True,
        timeout_s=timeout_s,
        retry=RetryPolicy(max_attempts=1),
        lookup=find if lookup else None,
    )
    def refund_order(order_id: str, amount_cents: int, ctx: ToolContext) -> dict[str, Any]:
        with book.open("a") as out:
            out.write(f"{ctx.idempotency_key}\n")
        if hold_s:
            time.sleep(hold_s)
        return {"refunded": order_id, "amount_cents": amount_cents}

    return Agent(
        name="refunds",
        controller=ReActController(ScriptedModel(lambda request: _policy(request, think_s))),
        tools=ToolRegistry([search_orders, refund_order]),
        budget=Budget(max_steps=max_steps),
        request_ttl=None if request_ttl_s is None else timedelta(seconds=request_ttl_s),
    )


def _reading(request: ModelRequest, pages: int) -> dict[str, Any]:
    read = len(request.observations)
    if read >= pages:
        return {"type": "FINISH", "reason": f"read {read} pages"}
    return {"type": "EXECUTE_TOOL", "action": "fetch_page", "args": {"page": read}}


@registry.agent("reader")
def build_reader(pages: int, page_bytes: int = 100) -> Agent:
    """Reads ``pages`` pages of ``page_bytes`` each, one a step, then finishes: a long run, or a large one."""

    @tool(description="Fetch one page of a long document.")
    def fetch_page(page: int) -> str:
        return (f"page {page}. " * (page_bytes // 8 + 1))[:page_bytes]

    return Agent(
        name="reader",
        controller=ReActController(ScriptedModel(lambda request: _reading(request, pages))),
        tools=ToolRegistry([fetch_page]),
        budget=Budget(max_steps=pages + 5),
    )
