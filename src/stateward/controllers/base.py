"""What a controller sees and what it hands back to the Runtime."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from stateward.core.decision import ControlDecision, SignalSource
from stateward.core.events import NewEvent
from stateward.core.state import GuardedAction, RequestKind, RunState
from stateward.models.base import ActionSpec, ModelReply, Usage


class Observation(BaseModel):
    """One tool attempt as the next decision may see it: data, never instructions."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    step: int
    action: str
    args: dict[str, Any] = Field(default_factory=dict)
    status: str
    result: Any = None
    error_code: str | None = None
    artifacts: list[str] = Field(default_factory=list)


class SignalFailure(BaseModel):
    """A signal source produced something that is not a decision (e.g. a plan that does not parse)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    code: str
    message: str
    raw: str | None = None


Signal = str | ControlDecision | SignalFailure


def provider_rejection(reply: ModelReply) -> SignalFailure | None:
    """A reply the provider already knows is not one decision (two tool calls, cut off, thinking only)."""
    if reply.rejection_code is None:
        return None
    return SignalFailure(code=reply.rejection_code, message=reply.rejection_message or "", raw=reply.text[:2000])


@dataclass(frozen=True)
class DecisionContext:
    """What a controller may read to propose its next decision: the run's state, the observations so far (data, never
    instructions), the inventory and the actions it may show a model."""

    state: RunState
    observations: Sequence[Observation]
    inventory: Sequence[str]
    actions: Mapping[str, ActionSpec]

    def facts(self) -> dict[str, Any]:
        """What the run has established so far, in the form a model request carries it."""
        answer = self.state.last_answer
        return {
            "artifacts": {name: f"{name}:v{v}" for name, v in self.state.artifacts.items()},
            # Approvals not yet used up: a ONCE grant leaves this list when its call starts.
            "approved_actions": [{"tool": g.action.tool, "args": g.action.args} for g in self.state.approvals],
            "last_answer": None
            if answer is None
            else {
                "request_id": answer.request_id,
                "verdict": answer.verdict,
                "text": answer.text,
                "guarded_args": None if answer.guarded_action is None else answer.guarded_action.args,
            },
        }

    def specs(self, names: Sequence[str]) -> list[ActionSpec]:
        return [self.actions[n] for n in names if n in self.actions]


@dataclass(frozen=True)
class FinishCheck:
    """The Runtime's verdict on a FINISH: refused, a full completion, or a partial (degraded) one."""

    rejected: str | None = None
    partial: bool = False


@dataclass(frozen=True)
class WaitSpec:
    """What a wait proposed by code (never by model text) is about: the exact action an approval
    admits, or a handoff with the options a person may choose from."""

    guard: GuardedAction | None = None
    kind: RequestKind = RequestKind.INPUT
    options: tuple[str, ...] = ()
    expires_in_s: float | None = None  # a timer: the wait ends by itself at this deadline


@dataclass(frozen=True)
class Proposal:
    """A candidate decision plus what it cost and what the controller wants remembered if accepted."""

    signal: Signal
    source: SignalSource
    visible_actions: frozenset[str]
    model_usage: Sequence[Usage] = ()
    memo: dict[str, Any] | None = None
    notes: Sequence[NewEvent] = field(default_factory=tuple)
    wait: WaitSpec | None = None


class Controller(Protocol):
    mode: str

    def decide(self, ctx: DecisionContext) -> Proposal: ...
