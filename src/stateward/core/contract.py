"""The Runtime's contract with its signal sources: what a controller reads (DecisionContext, its
Observations), what it hands back (a Proposal carrying a Signal, maybe a WaitSpec) and the Runtime's
verdicts on waits and finishes (WaitCheck, FinishCheck).

Controllers and the Runtime both depend on this module and neither on the other: this is where they
meet. Plain data and protocols only; no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, overload

from pydantic import BaseModel, ConfigDict, Field

from stateward.core.decision import ControlDecision, SignalSource
from stateward.core.events import NewEvent
from stateward.core.model_io import ActionSpec, ModelRequest, Usage
from stateward.core.state import GuardedAction, RequestKind, RunState


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


class ObservationLog(Sequence[Observation]):
    """A run's observations in order, each kept with its JSON form and that form's length, both made
    once when it is recorded: a model request then carries the history by reference, and no step
    re-serializes what earlier steps observed (that made a long run's loop quadratic).

    Append-only. As a Sequence it is the view a controller sees: indexing and a tail slice cost what
    they touch, never the whole history.
    """

    def __init__(self, observations: Iterable[Observation] = ()):
        self._items: list[Observation] = []
        self._json: list[dict[str, Any]] = []
        self._chars = 0
        for observation in observations:
            self.record(observation)

    @classmethod
    def of(cls, observations: Sequence[Observation]) -> ObservationLog:
        """``observations`` itself if it is a log, else a log of them (serializing each once)."""
        return observations if isinstance(observations, ObservationLog) else cls(observations)

    def record(self, observation: Observation) -> None:
        self._items.append(observation)
        self._json.append(observation.model_dump(mode="json"))
        self._chars += len(observation.model_dump_json())

    def json_forms(self) -> list[dict[str, Any]]:
        """Every observation's JSON form, in a new list holding the cached dicts (not copies of them)."""
        return self._json[:]

    @property
    def json_chars(self) -> int:
        """Total length of the observations' compact JSON forms."""
        return self._chars

    @overload
    def __getitem__(self, index: int) -> Observation: ...
    @overload
    def __getitem__(self, index: slice) -> list[Observation]: ...
    def __getitem__(self, index: int | slice) -> Observation | list[Observation]:
        return self._items[index]

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Observation]:
        return iter(self._items)

    def __reversed__(self) -> Iterator[Observation]:
        return reversed(self._items)


class SignalFailure(BaseModel):
    """A signal source produced something that is not a decision (e.g. a plan that does not parse)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    code: str
    message: str
    raw: str | None = None


Signal = str | ControlDecision | SignalFailure


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

    def request(self, **fields: Any) -> ModelRequest:
        """A ModelRequest carrying the whole observation history by reference (see ObservationLog)."""
        log = ObservationLog.of(self.observations)
        return ModelRequest.with_history(log.json_forms(), log.json_chars, **fields)


class RefusalReason(StrEnum):
    """Why the Runtime refused a well-formed decision on a precondition. Not error codes: refusal
    reasons are recorded in ``runtime_validated`` events beside the reasons agents' own wait and finish
    policies give (an open, lower-case vocabulary, e.g. ``finish_without_plan``); these are the
    Runtime's own. A decision that is malformed is refused by an ``ErrorCode`` instead."""

    TOOL_DECISION_WITHOUT_ACTION = "tool_decision_without_action"
    ACTION_NOT_VISIBLE = "action_not_visible"
    WAIT_SIGNAL_WITHOUT_QUESTION = "wait_signal_without_question"


@dataclass(frozen=True)
class FinishCheck:
    """The Runtime's verdict on a FINISH: refused, a full completion, or a partial (degraded) one."""

    rejected: str | None = None
    partial: bool = False


@dataclass(frozen=True)
class WaitCheck:
    """The Runtime's verdict on a wait signal: a rejection reason, or what the wait guards."""

    rejected: str | None = None
    guarded_action: GuardedAction | None = None
    kind: RequestKind = RequestKind.INPUT


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
    """A signal source: reads a DecisionContext and proposes; only the Runtime decides what happens."""

    mode: str

    def decide(self, ctx: DecisionContext) -> Proposal: ...


WaitPolicy = Callable[[ControlDecision, RunState], WaitCheck]
"""An agent's precondition on a wait it is asked to enter."""

FinishPolicy = Callable[[ControlDecision, RunState], FinishCheck]
"""An agent's precondition on a FINISH: refused, complete, or partial."""
