"""A family of agents for child-run tests: a triage agent that hands each of its orders to a refund agent
(an ``agent_tool``), one child run per order, then finishes with what they answered.

``main`` is what a process a test SIGKILLs at a named boundary runs (imported by its module name, so the
agents' versions match the test process's): it starts the triage run ``root`` and drives the whole tree.
"""

from __future__ import annotations

import os
import signal
from typing import Any

from stateward import Agent, AgentRegistry, Budget, ReActController, Runtime, ToolRegistry, tool
from stateward.models.base import ModelRequest
from stateward.runtime.leases import LeasePolicy
from stateward.testing import ScriptedModel
from stateward.tools import agent_tool

ORDERS = ("A-1", "B-2")
LEASE = LeasePolicy(ttl_s=0.6, heartbeat_s=0.2)


@tool
def lookup(order: str) -> dict[str, Any]:
    """Look an order up (read-only)."""
    return {"order": order, "amount": 10}


@tool(requires_approval=True)
def refund(order: str) -> dict[str, Any]:
    """Refund an order (a person approves each call)."""
    return {"refunded": order}


def _refunder(request: ModelRequest) -> dict[str, Any]:
    order = request.goal.split()[-1]
    if not request.observations:
        return {"type": "EXECUTE_TOOL", "action": "lookup", "args": {"order": order}}
    return {"type": "FINISH", "reason": f"refunded {order}"}


def _approving_refunder(request: ModelRequest) -> dict[str, Any]:
    order = request.goal.split()[-1]
    if not request.observations:
        return {"type": "EXECUTE_TOOL", "action": "refund", "args": {"order": order}}
    return {"type": "FINISH", "reason": f"refunded {order} with approval"}


def _looper(request: ModelRequest) -> dict[str, Any]:
    return {"type": "EXECUTE_TOOL", "action": "lookup", "args": {"order": f"X-{len(request.observations)}"}}


def refund_agent(guarded: bool = False, endless: bool = False) -> Agent:
    """The child: looks the order up and finishes (``guarded``: refunds, which needs an approval by role
    ``refunds``; ``endless``: looks up forever, until its budget ends it)."""
    policy = _looper if endless else _approving_refunder if guarded else _refunder
    return Agent(
        name="refund-agent",
        controller=ReActController(ScriptedModel(policy)),
        tools=ToolRegistry([lookup, refund]),
        budget=Budget(max_steps=20),
        approver_role="refunds",
    )


def _triage(request: ModelRequest) -> dict[str, Any]:
    done = request.observations
    if len(done) < len(ORDERS):
        return {"type": "EXECUTE_TOOL", "action": "refund_agent", "args": {"goal": f"refund {ORDERS[len(done)]}"}}
    said = "; ".join(f"{o['status']}:{(o.get('result') or {}).get('answer')}:{o.get('error_code')}" for o in done)
    return {"type": "FINISH", "reason": said}


def triage_agent(child_steps: int = 5, guarded: bool = False, endless: bool = False, max_steps: int = 40) -> Agent:
    """The parent: one refund-agent child run per order, each carved at most ``child_steps`` steps."""
    child = agent_tool(
        "refund-agent", params={"guarded": guarded, "endless": endless}, budget=Budget(max_steps=child_steps)
    )
    return Agent(
        name="triage",
        controller=ReActController(ScriptedModel(_triage)),
        tools=ToolRegistry([child]),
        budget=Budget(max_steps=max_steps, max_tool_calls=max_steps),
        approver_role="triage",
    )


def _manage(request: ModelRequest) -> dict[str, Any]:
    if not request.observations:
        return {"type": "EXECUTE_TOOL", "action": "triage", "args": {"goal": "refund every order"}}
    return {"type": "FINISH", "reason": "managed"}


def manager_agent() -> Agent:
    """A grandparent: hands the whole job to a (guarded) triage agent, whose children need approvals."""
    return Agent(
        name="manager",
        controller=ReActController(ScriptedModel(_manage)),
        tools=ToolRegistry([agent_tool("triage", params={"guarded": True})]),
        budget=Budget(max_steps=60),
    )


def registry() -> AgentRegistry:
    agents = AgentRegistry()
    agents.register("refund-agent", refund_agent)
    agents.register("triage", triage_agent)
    agents.register("manager", manager_agent)
    return agents


class KillAt:
    """SIGKILLs this process the ``nth`` time the Runtime reaches boundary ``name``."""

    def __init__(self, name: str, nth: int):
        self.name, self.nth, self.seen = name, nth, 0

    def point(self, name: str) -> None:
        if name == self.name:
            self.seen += 1
            if self.seen == self.nth:
                os.kill(os.getpid(), signal.SIGKILL)


def main(url: str, kill_at: str, nth: int) -> None:
    runtime = Runtime.open(url, agents=registry(), faults=KillAt(kill_at, nth), lease=LEASE)
    runtime.start(runtime.agents.create("triage"), goal="refund every order", run_id="root")
    runtime.close()
