"""ReAct: a model picks every step from the full observation history.

A plain ReAct loop that makes the same call (same tool, same arguments) and sees the same outcome
``max_repeats`` times in a row (3 by default) is going nowhere: the controller then proposes FAIL with
reason ``no_progress`` instead of asking the model again, and the Runtime ends the run.
"""

from __future__ import annotations

from collections.abc import Sequence

from stateward.controllers.base import provider_rejection
from stateward.core.contract import DecisionContext, Observation, Proposal, SignalFailure
from stateward.core.decision import ControlDecision, DecisionType, SignalSource
from stateward.core.model_io import ReplyContract
from stateward.models.base import AnyModel, complete

NO_PROGRESS = "no_progress"
DEFAULT_MAX_REPEATS = 3

DECIDE_INSTRUCTIONS = (
    "Reply with exactly one JSON object and nothing else: "
    '{"type": "EXECUTE_TOOL", "action": <visible action>, "args": {...}} to act, '
    '{"type": "REQUEST_USER_INPUT", "question": "..."} to ask the user and stop, '
    '{"type": "FINISH", "reason": "..."} when the goal is met, or {"type": "FAIL", "reason": "..."}.'
)


class ReActController:
    """A model picks every step from the observation history; the Runtime validates each proposal, and a loop that
    repeats one call with one outcome ends as no_progress."""

    mode = "react"

    def __init__(
        self, model: AnyModel, *, actions: Sequence[str] | None = None, max_repeats: int | None = DEFAULT_MAX_REPEATS
    ):
        """``max_repeats``: identical calls with identical outcomes in a row that end the run (None: never)."""
        self.model = model
        self.actions = None if actions is None else tuple(actions)
        self.max_repeats = max_repeats

    def decide(self, ctx: DecisionContext) -> Proposal:
        """Ask the model for the next action; stop with NO_PROGRESS when it repeats itself."""
        visible = tuple(ctx.actions) if self.actions is None else self.actions
        if self.max_repeats is not None and repeating(ctx.observations, self.max_repeats):
            stop = ControlDecision(type=DecisionType.FAIL, reason=NO_PROGRESS)
            return Proposal(signal=stop, source=SignalSource.CONTROLLER, visible_actions=frozenset(visible))
        reply = complete(
            self.model,
            ctx.request(
                purpose="decide",
                contract=ReplyContract.DECISION,
                goal=ctx.state.goal,
                inventory=list(ctx.inventory),
                visible_actions=ctx.specs(visible),
                facts=ctx.facts(),
                instructions=DECIDE_INSTRUCTIONS,
                correction=ctx.state.correction,
            ),
        )
        signal: str | SignalFailure = provider_rejection(reply) or reply.text
        return Proposal(
            signal=signal, source=SignalSource.MODEL, visible_actions=frozenset(visible), model_usage=(reply.usage,)
        )


def repeating(observations: Sequence[Observation], times: int) -> bool:
    """Whether the last ``times`` observations are one call (tool, canonical args) with one outcome."""
    count = len(observations)
    if times < 1 or count < times:
        return False

    def key(o: Observation) -> tuple[object, ...]:
        return (o.action, o.args, o.status, o.error_code, o.result)

    last = key(observations[count - 1])  # from the newest back: a run making progress differs at once
    return all(key(observations[count - 1 - back]) == last for back in range(1, times))
