"""A parent whose child hands off (a HANDOFF request with options), the call declaring who answers it: the
child's own approvers (role ``refunds``) or, escalated, the parent's (role ``triage``)."""

from __future__ import annotations

from typing import Any

from stateward import Agent, AgentRegistry, Budget, ReActController, ToolRegistry
from stateward.core.contract import DecisionContext, Proposal, WaitSpec
from stateward.core.decision import ControlDecision, DecisionType, SignalSource
from stateward.core.state import RequestKind
from stateward.models.base import ModelRequest
from stateward.testing import ScriptedModel
from stateward.tools import ChildHandoff, agent_tool

OPTIONS = ("refund_in_full", "cancel")


class HandsOff:
    """A child that cannot decide alone: it hands the refund to a person, then finishes with their choice."""

    mode = "workflow"

    def decide(self, ctx: DecisionContext) -> Proposal:
        answer = ctx.state.last_answer
        if answer is not None and answer.kind is RequestKind.HANDOFF:
            done = ControlDecision(type=DecisionType.FINISH, reason=f"a person chose {answer.text}")
            return Proposal(signal=done, source=SignalSource.CONTROLLER, visible_actions=frozenset())
        ask = ControlDecision(type=DecisionType.REQUEST_USER_INPUT, question="the refund is over my limit: choose")
        return Proposal(
            signal=ask,
            source=SignalSource.CONTROLLER,
            visible_actions=frozenset(),
            wait=WaitSpec(kind=RequestKind.HANDOFF, options=OPTIONS),
        )


def handoff_agent() -> Agent:
    return Agent(name="handoff-agent", controller=HandsOff(), tools=ToolRegistry([]), approver_role="refunds")


def _parent(request: ModelRequest) -> dict[str, Any]:
    if request.observations:
        return {"type": "FINISH", "reason": str(request.observations[-1]["result"]["answer"])}
    return {"type": "EXECUTE_TOOL", "action": "handoff_agent", "args": {"goal": "refund A-1"}}


def parent_agent(on_handoff: str = ChildHandoff.ANSWER_IN_CHILD.value) -> Agent:
    return Agent(
        name="escalating-parent",
        controller=ReActController(ScriptedModel(_parent)),
        tools=ToolRegistry([agent_tool("handoff-agent", on_handoff=ChildHandoff(on_handoff))]),
        budget=Budget(max_steps=20),
        approver_role="triage",
    )


def registry() -> AgentRegistry:
    agents = AgentRegistry()
    agents.register("handoff-agent", handoff_agent)
    agents.register("escalating-parent", parent_agent)
    return agents
