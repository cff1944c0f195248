"""ReAct: a model picks every step from the full observation history."""

from __future__ import annotations

from collections.abc import Sequence

from stateward.controllers.base import DecisionContext, Proposal, SignalFailure, provider_rejection
from stateward.core.decision import SignalSource
from stateward.models.base import Model, ModelRequest

DECIDE_INSTRUCTIONS = (
    "Reply with exactly one JSON object and nothing else: "
    '{"type": "EXECUTE_TOOL", "action": <visible action>, "args": {...}} to act, '
    '{"type": "REQUEST_USER_INPUT", "question": "..."} to ask the user and stop, '
    '{"type": "FINISH", "reason": "..."} when the goal is met, or {"type": "FAIL", "reason": "..."}.'
)


class ReActController:
    mode = "react"

    def __init__(self, model: Model, *, actions: Sequence[str] | None = None):
        self.model = model
        self.actions = None if actions is None else tuple(actions)

    def decide(self, ctx: DecisionContext) -> Proposal:
        visible = tuple(ctx.actions) if self.actions is None else self.actions
        reply = self.model.complete(
            ModelRequest(
                purpose="decide",
                goal=ctx.state.goal,
                inventory=list(ctx.inventory),
                observations=[o.model_dump(mode="json") for o in ctx.observations],
                visible_actions=ctx.specs(visible),
                facts=ctx.facts(),
                instructions=DECIDE_INSTRUCTIONS,
                correction=ctx.state.correction,
            )
        )
        signal: str | SignalFailure = provider_rejection(reply) or reply.text
        return Proposal(
            signal=signal, source=SignalSource.MODEL, visible_actions=frozenset(visible), model_usage=(reply.usage,)
        )
