"""The Runtime's contract with its signal sources: what a controller reads (DecisionContext, its
Observations), what it hands back (a Proposal carrying a Signal, maybe a WaitSpec) and the Runtime's
verdicts on waits and finishes (WaitCheck, FinishCheck).

Controllers and the Runtime both depend on this module and neither on the other: this is where they
meet. Plain data and protocols only; no I/O.
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from itertools import chain
from operator import attrgetter
from typing import Any, Protocol, overload

from pydantic import BaseModel, ConfigDict, Field

from stateward.core.canonical import compact_json
from stateward.core.decision import ControlDecision, SignalSource
from stateward.core.events import NewEvent
from stateward.core.model_io import ActionSpec, ModelRequest, ObservationView, Usage
from stateward.core.state import GuardedAction, RequestKind, RunState


class OutcomeStatus(StrEnum):
    """How a call through the gateway ended: SUCCESS, FAILED, REJECTED before the handler, BLOCKED by the action gate,
    or PENDING_VERIFICATION (unknown outcome). An Observation's status, as controllers and checks read it."""

    SUCCESS = "SUCCESS"
    REJECTED = "REJECTED"  # refused before the handler (or by a person); nothing happened
    BLOCKED = "BLOCKED"  # the action gate refused it (needs an approval bound to this action)
    FAILED = "FAILED"  # the handler ran (or may have) and failed in a known way
    PENDING_VERIFICATION = "PENDING_VERIFICATION"  # a side effect may have happened; nobody can say


class PlanOutcomeCode(StrEnum):
    """Why a plan run delivered what it did (the ``code`` of its recorded outcome), besides the termination
    service's own reasons (``planning.termination.TerminationReason``), which are recorded as they are."""

    GOAL_MET = "GOAL_MET"
    SUCCESS_CRITERIA_UNMET = "SUCCESS_CRITERIA_UNMET"
    PLAN_STALLED = "PLAN_STALLED"
    NO_RUNNABLE_WORK = "NO_RUNNABLE_WORK"
    BUDGET_EXHAUSTED = "BUDGET_EXHAUSTED"
    DEPENDENCY_UNAVAILABLE = "DEPENDENCY_UNAVAILABLE"
    ACCEPTED_PARTIAL = "ACCEPTED_PARTIAL"
    CANCELLED_AT_HANDOFF = "CANCELLED_AT_HANDOFF"
    SCOPE_SHORTFALL = "SCOPE_SHORTFALL"
    UNKNOWN_OUTCOME = "UNKNOWN_OUTCOME"
    CONFLICTING_AUTHORITIES = "CONFLICTING_AUTHORITIES"  # two authoritative sources disagree: a person chooses


class Observation(BaseModel):
    """One tool attempt as the next decision may see it: data, never instructions."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    step: int
    action: str
    args: dict[str, Any] = Field(default_factory=dict)
    status: OutcomeStatus
    result: Any = None
    error_code: str | None = None
    artifacts: list[str] = Field(default_factory=list)
    # Run-unique: what an artifact cites to say it rests on this observation. Given by the run's log (see
    # ObservationLog.record), never stored with the event: it is the observation's place in the log.
    evidence_id: str | None = None


EVIDENCE_PREFIX = "obs_"  # an observation's evidence id: its place in the run's log, from 1
DEFAULT_WINDOW = 256  # the most recent observations a log keeps as objects; older ones stay bytes


class ObservationLog(Sequence[Observation]):
    """A run's observations in order, each serialized to compact JSON once, when it is recorded, and kept
    as bytes in one buffer: a model request then carries the history as a view of that buffer, and no
    step re-serializes (or copies) what earlier steps observed (that made a long run's loop quadratic).

    A buffer of bytes and an array of offsets are not tracked by Python's garbage collector, so the
    history of a long run adds nothing for a collection to walk. Only the most recent ``window``
    observations are also kept as objects (the Observation and, once a request reads it, its JSON
    dict); an older one is parsed from its bytes each time it is read.

    Append-only. As a Sequence it is the view a controller sees: indexing and a tail slice cost what
    they touch, never the whole history.
    """

    def __init__(self, observations: Iterable[Observation] = (), *, window: int = DEFAULT_WINDOW):
        """``window``: how many of the most recent observations stay objects (at least 1)."""
        self._buffer = bytearray()
        self._ends = array("Q")  # where each observation's JSON ends in the buffer
        self._chars = 0
        self._window = max(1, window)
        self._recent: dict[int, _Recent] = {}
        for observation in observations:
            self.record(observation)

    @classmethod
    def of(cls, observations: Sequence[Observation]) -> ObservationLog:
        """``observations`` itself if it is a log, else a log of them (serializing each once)."""
        return observations if isinstance(observations, ObservationLog) else cls(observations)

    def record(self, observation: Observation, json_form: dict[str, Any] | None = None) -> None:
        """Append ``observation``. ``json_form``: its ``model_dump(mode="json")``, when the caller has made it
        already (the runtime has, for the step's event): it is then serialized from that, never dumped again,
        and kept as the recent observation's JSON dict.

        An observation without an evidence id gets its place in the log: ``obs_<n>`` for the run's n-th one.
        A log rebuilt from the run's events (in their order) names each observation the same way, so the id
        is never stored and stays unique for the run (forks share the prefix, and its ids)."""
        if observation.evidence_id is None:
            evidence_id = f"{EVIDENCE_PREFIX}{len(self._ends) + 1}"
            observation = observation.model_copy(update={"evidence_id": evidence_id})
            if json_form is not None:
                json_form = {**json_form, "evidence_id": evidence_id}
        text = observation.model_dump_json() if json_form is None else compact_json(json_form)
        self._buffer += text.encode()
        self._ends.append(len(self._buffer))
        self._chars += len(text)
        index = len(self._ends) - 1
        recent = self._recent[index] = _Recent(observation)
        recent.json = json_form
        self._recent.pop(index - self._window, None)

    def history(self) -> ObservationHistory:
        """The observations recorded so far as JSON dicts: a view of this log fixed at today's length,
        never a copy (later records do not show in it)."""
        return ObservationHistory(self, len(self._ends))

    def json_form(self, index: int) -> dict[str, Any]:
        """One observation's JSON form (``index`` >= 0): a recent one's is made once and shared, so treat
        it as read-only."""
        recent = self._recent.get(index)
        if recent is None:
            parsed: dict[str, Any] = json.loads(self._bytes(index))
            return parsed
        if recent.json is None:
            recent.json = json.loads(self._bytes(index))
        return recent.json

    @property
    def json_chars(self) -> int:
        """Total length of the observations' compact JSON forms."""
        return self._chars

    def _bytes(self, index: int) -> bytes:
        start = self._ends[index - 1] if index else 0
        return bytes(self._buffer[start : self._ends[index]])

    def _observation(self, index: int) -> Observation:
        recent = self._recent.get(index)
        return recent.observation if recent is not None else Observation.model_validate_json(self._bytes(index))

    @overload
    def __getitem__(self, index: int) -> Observation: ...
    @overload
    def __getitem__(self, index: slice) -> list[Observation]: ...
    def __getitem__(self, index: int | slice) -> Observation | list[Observation]:
        if isinstance(index, slice):
            return [self._observation(i) for i in range(*index.indices(len(self._ends)))]
        return self._observation(range(len(self._ends))[index])

    def __len__(self) -> int:
        return len(self._ends)

    def __iter__(self) -> Iterator[Observation]:
        recent = tuple(self._recent.values())  # in order; the common case (a short run) is all of them
        older = (self._observation(i) for i in range(len(self._ends) - len(recent)))
        return chain(older, map(_OBSERVATION, recent))

    def __reversed__(self) -> Iterator[Observation]:
        recent = tuple(self._recent.values())
        older = (self._observation(i) for i in reversed(range(len(self._ends) - len(recent))))
        return chain(map(_OBSERVATION, reversed(recent)), older)


class _Recent:
    """A recent observation kept as objects: the Observation recorded and, once read, its JSON dict."""

    __slots__ = ("json", "observation")

    def __init__(self, observation: Observation):
        self.observation = observation
        self.json: dict[str, Any] | None = None


_OBSERVATION = attrgetter("observation")


class ObservationHistory(ObservationView):
    """The first ``length`` observations of a log as JSON dicts: what a model request carries. A view,
    not a copy; equal to any sequence of the same dicts (so to the list it stands for)."""

    __slots__ = ("_length", "_log")

    def __init__(self, log: ObservationLog, length: int):
        self._log = log
        self._length = length

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...
    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(index, slice):
            return [self._log.json_form(i) for i in range(*index.indices(self._length))]
        return self._log.json_form(range(self._length)[index])

    def __len__(self) -> int:
        return self._length

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (self._log.json_form(i) for i in range(self._length))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str | bytes):
            return NotImplemented
        return len(other) == self._length and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ObservationHistory({self._length} observations)"


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
        """The specs of the named actions this run may take, skipping names it may not."""
        return [self.actions[n] for n in names if n in self.actions]

    def request(self, **fields: Any) -> ModelRequest:
        """A ModelRequest carrying the whole observation history by reference (see ObservationLog)."""
        log = ObservationLog.of(self.observations)
        return ModelRequest.with_history(log.history(), log.json_chars, **fields)


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

    def decide(self, ctx: DecisionContext) -> Proposal:
        """Propose the next step for the run in ``ctx``; the Runtime validates it and alone changes state."""


class DescribesUnknownOutcomes(Protocol):
    """A controller that says more when the Runtime itself stops its run for a person: a call whose side effect
    may or may not have happened (a reconciliation). Its events (e.g. a handoff package: the state reached, the
    attempts, the impact, what each answer does) are recorded with the wait; they decide nothing."""

    def reconciliation_notes(
        self, state: RunState, observation: Observation, pending_question: str
    ) -> Sequence[NewEvent]: ...


WaitPolicy = Callable[[ControlDecision, RunState], WaitCheck]
"""An agent's precondition on a wait it is asked to enter."""

FinishPolicy = Callable[[ControlDecision, RunState], FinishCheck]
"""An agent's precondition on a FINISH: refused, complete, or partial."""
