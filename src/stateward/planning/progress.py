"""No-progress detection for bounded local ReAct.

A local ReAct loop explores one work item. It must stop when it stops learning, not when a model says so:
the tracker is fed one :class:`StepRecord` per executed step and answers CONTINUE or a stop reason:

* ``PAUSE_REQUESTED`` - a person asked to pause (checked first: their request wins);
* ``BUDGET_EXHAUSTED`` - the remaining budget does not cover one more step;
* ``NO_PROGRESS`` - the same result hash twice in a row, N steps without new evidence, an action that
  already failed repeated with the same arguments, or the same query merely reworded;
* ``STEP_LIMIT`` - ``max_react_steps`` steps were taken.

The tracker is an immutable value, so it can be stored with the run and survive a pause. Decisions are
kept as structured :class:`ReactDecisionSummary` records (no hidden reasoning), and a stop yields a
:class:`PartialResult` naming what was found.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveInt, field_serializer

from stateward.core.canonical import args_digest
from stateward.planning.budget import BudgetAmount, BudgetRemaining


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ProgressSignal(StrEnum):
    """What the bounded local ReAct of a work item says about its next step."""

    CONTINUE = "CONTINUE"
    NO_PROGRESS = "NO_PROGRESS"
    STEP_LIMIT = "STEP_LIMIT"
    BUDGET_EXHAUSTED = "BUDGET_EXHAUSTED"
    PAUSE_REQUESTED = "PAUSE_REQUESTED"


class NoProgressRule(StrEnum):
    """Which rule found that a step made no progress."""

    SAME_RESULT = "SAME_RESULT"
    NO_NEW_EVIDENCE = "NO_NEW_EVIDENCE"
    REPEATED_FAILED_ACTION = "REPEATED_FAILED_ACTION"
    REWORDED_QUERY = "REWORDED_QUERY"
    CONFIDENCE_NOT_RISING = "CONFIDENCE_NOT_RISING"


DEFAULT_STOPWORDS: frozenset[str] = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "for",
        "from",
        "how",
        "in",
        "is",
        "it",
        "of",
        "on",
        "or",
        "the",
        "to",
        "was",
        "what",
        "where",
        "which",
        "with",
    ]
)
DEFAULT_QUERY_KEYS: tuple[str, ...] = ("query", "q", "search", "keywords")
_PUNCT = re.compile(r"[^\w\s]+")


def normalize_query(text: str, stopwords: Iterable[str] = DEFAULT_STOPWORDS) -> tuple[str, ...]:
    """Lowercase, strip punctuation, drop stopwords, sort and de-duplicate tokens."""
    stop = frozenset(stopwords)
    return tuple(sorted({t for t in _PUNCT.sub(" ", text.lower()).split() if t not in stop}))


def jaccard(a: Iterable[str], b: Iterable[str]) -> float:
    """Token-set similarity; two empty sets (queries of only stopwords) count as identical."""
    sa, sb = set(a), set(b)
    if not sa and not sb:
        return 1.0
    return len(sa & sb) / len(sa | sb)


class StepRecord(_Frozen):
    """One executed local ReAct step, as facts: what ran, with what, and what came back."""

    action: str = Field(min_length=1)
    args: dict[str, Any] = Field(default_factory=dict)
    result_hash: str
    new_evidence_ids: tuple[str, ...] = ()
    succeeded: bool = True
    error_code: str | None = None
    # A confidence the step's result measured (e.g. a checker's score), 0..1; None when it measured none.
    confidence: float | None = Field(default=None, ge=0.0, le=1.0, allow_inf_nan=False)


class ProgressConfig(_Frozen):
    """The bounds of one work item's local ReAct: steps, steps without new evidence, query similarity."""

    max_react_steps: PositiveInt
    max_steps_without_evidence: PositiveInt = 2
    query_similarity: float = Field(default=0.8, ge=0.0, le=1.0)
    # Steps that spend budget without raising the best measured confidence, once one was measured.
    max_steps_without_confidence_gain: PositiveInt = 3
    stopwords: frozenset[str] = DEFAULT_STOPWORDS
    query_keys: tuple[str, ...] = DEFAULT_QUERY_KEYS
    step_cost: BudgetAmount = BudgetAmount(tool_calls=1, model_calls=1)  # what one more step needs

    @field_serializer("stopwords")
    def _sorted_stopwords(self, stopwords: frozenset[str]) -> list[str]:
        """In sorted order: a set's own order follows the process's string hashing, so the same config
        would be stored as a different text by each process (and not be found unchanged)."""
        return sorted(stopwords)


class ProgressVerdict(_Frozen):
    """Whether a work item's local ReAct may take another step, and which no-progress rule stopped it."""

    signal: ProgressSignal
    rule: NoProgressRule | None = None
    detail: str = ""
    steps_taken: NonNegativeInt = 0

    @property
    def should_stop(self) -> bool:
        """True unless the verdict is to continue."""
        return self.signal is not ProgressSignal.CONTINUE


class _QuerySeen(_Frozen):
    action: str
    rest_digest: str  # the other arguments: the same query against another repository is new work
    tokens: tuple[str, ...]


class ProgressTracker(_Frozen):
    """Immutable progress state of one local ReAct loop; :meth:`observe` returns a new tracker."""

    config: ProgressConfig
    steps_taken: NonNegativeInt = 0
    last_result_hash: str | None = None
    steps_without_evidence: NonNegativeInt = 0
    evidence_ids: tuple[str, ...] = ()  # in discovery order, unique
    failed_actions: tuple[tuple[str, str], ...] = ()  # (action, canonical args digest)
    queries: tuple[_QuerySeen, ...] = ()
    best_confidence: float | None = None  # the highest confidence measured so far
    steps_without_confidence_gain: NonNegativeInt = 0

    @classmethod
    def start(cls, max_react_steps: int, **config: Any) -> ProgressTracker:
        """A tracker for a fresh bounded ReAct loop of at most ``max_react_steps`` steps."""
        return cls(config=ProgressConfig(max_react_steps=max_react_steps, **config))

    # ----------------------------------------------------------------- before a step

    def before_step(
        self,
        *,
        action: str | None = None,
        args: dict[str, Any] | None = None,
        remaining: BudgetRemaining | None = None,
        pause_requested: bool = False,
    ) -> ProgressVerdict:
        """May another step start? With ``action``/``args``, also refuses a proposal that is a known repeat."""
        if stop := self._hard_stop(remaining, pause_requested):
            return stop
        if self.steps_taken >= self.config.max_react_steps:
            return self._verdict(ProgressSignal.STEP_LIMIT, detail=f"{self.steps_taken} steps taken")
        if action is not None:
            rule = self._repeat_rule(action, args or {})
            if rule is not None:
                return self._verdict(ProgressSignal.NO_PROGRESS, rule, f"proposed {action} repeats earlier work")
        return self._verdict(ProgressSignal.CONTINUE)

    # ----------------------------------------------------------------- after a step

    def observe(
        self,
        step: StepRecord,
        *,
        remaining: BudgetRemaining | None = None,
        pause_requested: bool = False,
    ) -> tuple[ProgressTracker, ProgressVerdict]:
        """Record ``step`` and say whether the loop may take another one.

        Precedence: PAUSE_REQUESTED, BUDGET_EXHAUSTED, NO_PROGRESS, STEP_LIMIT - a no-progress stop on the
        last allowed step is reported as such, because it says more than "out of steps".
        """
        repeat = self._repeat_rule(step.action, step.args)
        known = frozenset(self.evidence_ids) if step.new_evidence_ids else frozenset()
        fresh = tuple(e for e in dict.fromkeys(step.new_evidence_ids) if e not in known)
        same_result = self.last_result_hash is not None and step.result_hash == self.last_result_hash
        key = (step.action, args_digest(step.args))
        query = self._query_of(step.action, step.args)
        updated = self.model_copy(
            update={
                "steps_taken": self.steps_taken + 1,
                "last_result_hash": step.result_hash,
                "steps_without_evidence": 0 if fresh else self.steps_without_evidence + 1,
                "evidence_ids": (*self.evidence_ids, *fresh),
                "failed_actions": self.failed_actions
                if step.succeeded or key in self.failed_actions
                else (*self.failed_actions, key),
                "queries": self.queries if query is None else (*self.queries, query),
                **self._confidence_after(step.confidence),
            }
        )
        return updated, updated._after(step, repeat, same_result, remaining, pause_requested)

    def _after(
        self,
        step: StepRecord,
        repeat: NoProgressRule | None,
        same_result: bool,
        remaining: BudgetRemaining | None,
        pause_requested: bool,
    ) -> ProgressVerdict:
        if stop := self._hard_stop(remaining, pause_requested):
            return stop
        stop_np = ProgressSignal.NO_PROGRESS
        if repeat is not None:
            return self._verdict(stop_np, repeat, f"{step.action} repeats earlier work with equivalent arguments")
        if same_result:
            return self._verdict(stop_np, NoProgressRule.SAME_RESULT, "result identical to the previous step")
        if self.steps_without_evidence >= self.config.max_steps_without_evidence:
            detail = f"{self.steps_without_evidence} steps in a row without new evidence"
            return self._verdict(stop_np, NoProgressRule.NO_NEW_EVIDENCE, detail)
        if self.steps_without_confidence_gain >= self.config.max_steps_without_confidence_gain:
            detail = (
                f"{self.steps_without_confidence_gain} steps spent budget without raising confidence "
                f"above {self.best_confidence}"
            )
            return self._verdict(stop_np, NoProgressRule.CONFIDENCE_NOT_RISING, detail)
        if self.steps_taken >= self.config.max_react_steps:
            return self._verdict(ProgressSignal.STEP_LIMIT, detail=f"{self.steps_taken} steps taken")
        return self._verdict(ProgressSignal.CONTINUE)

    # ----------------------------------------------------------------- rules

    def _hard_stop(self, remaining: BudgetRemaining | None, pause_requested: bool) -> ProgressVerdict | None:
        if pause_requested:
            return self._verdict(ProgressSignal.PAUSE_REQUESTED, detail="pause requested")
        if remaining is not None and not remaining.covers(self.config.step_cost):
            dims = ", ".join(s["dimension"] for s in remaining.shortfalls(self.config.step_cost))
            return self._verdict(ProgressSignal.BUDGET_EXHAUSTED, detail=f"no budget for another step: {dims}")
        return None

    def _confidence_after(self, measured: float | None) -> dict[str, Any]:
        """Every step spends budget: once a confidence was measured, a step that does not raise the best one
        (measuring none counts as not raising it) adds to the streak; a higher one resets it."""
        best = self.best_confidence
        if measured is not None and (best is None or measured > best):
            return {"best_confidence": measured, "steps_without_confidence_gain": 0}
        if best is None:
            return {}
        return {"steps_without_confidence_gain": self.steps_without_confidence_gain + 1}

    def _repeat_rule(self, action: str, args: dict[str, Any]) -> NoProgressRule | None:
        if (action, args_digest(args)) in self.failed_actions:
            return NoProgressRule.REPEATED_FAILED_ACTION
        query = self._query_of(action, args)
        if query is not None:
            for seen in self.queries:
                same_target = seen.action == query.action and seen.rest_digest == query.rest_digest
                if same_target and jaccard(seen.tokens, query.tokens) >= self.config.query_similarity:
                    return NoProgressRule.REWORDED_QUERY
        return None

    def _query_of(self, action: str, args: dict[str, Any]) -> _QuerySeen | None:
        for k in self.config.query_keys:
            value = args.get(k)
            if isinstance(value, str):
                rest = {key: v for key, v in args.items() if key != k}
                return _QuerySeen(
                    action=action, rest_digest=args_digest(rest), tokens=normalize_query(value, self.config.stopwords)
                )
        return None

    def _verdict(self, signal: ProgressSignal, rule: NoProgressRule | None = None, detail: str = "") -> ProgressVerdict:
        return ProgressVerdict(signal=signal, rule=rule, detail=detail, steps_taken=self.steps_taken)

    # ----------------------------------------------------------------- results

    def remaining_steps(self) -> int:
        """How many steps the bounded loop may still take."""
        return max(self.config.max_react_steps - self.steps_taken, 0)

    def partial_result(self, verdict: ProgressVerdict, found: Iterable[str] = ()) -> PartialResult:
        """What a stopped loop hands back: the reason, what it found, and the evidence behind it."""
        return PartialResult(
            reason=verdict.signal,
            rule=verdict.rule,
            detail=verdict.detail,
            found=tuple(found),
            evidence_refs=self.evidence_ids,
            steps_taken=self.steps_taken,
        )


class SelectedAction(_Frozen):
    """The tool (and arguments) one local ReAct step chose.

    The log does not repeat it: the decision's own step (the step its ``decision_id``, ``work_item:step``,
    names) has a ``signal_received`` and a ``tool_attempted`` that record the full call, once. ``call``
    (``step:N``) names another step when the call is recorded there; ``arguments`` None means elsewhere.
    """

    tool: str = Field(min_length=1)
    arguments: dict[str, Any] | None = None
    call: str | None = None  # "step:N": where the full call is recorded, when not the decision's own step


class ReactDecisionSummary(_Frozen):
    """What is stored about one ReAct decision: auditable facts and a short reason, not hidden reasoning.

    As the log stores it (``react_decision``) nothing another event of its step holds is repeated: no
    ``decision_id`` (it is ``work_item_id:step``, the step of the ``signal_received`` that follows), no
    ``selected_action`` (that step's signal and tool attempt are the call), no reason when the model gave
    none, the objective only on an attempt's first decision, and the observations it saw as step numbers.
    """

    decision_id: str | None = Field(default=None, min_length=1)  # None: work_item_id and the step it is in
    work_item_id: str = Field(min_length=1)
    objective: str | None = Field(default=None, min_length=1)  # None: as in this attempt's first decision
    observation_refs: tuple[int | str, ...] = ()  # a step number (that step's observation) or another id
    selected_action: SelectedAction | None = None  # None: the decision's own step records the call
    reason_summary: str | None = Field(default=None, min_length=1, max_length=280)  # None: the model gave none
    remaining_steps: NonNegativeInt


class PartialResult(_Frozen):
    """A local loop's result when it stopped before FINISH; never presented as a complete answer."""

    reason: ProgressSignal
    rule: NoProgressRule | None = None
    detail: str = ""
    found: tuple[str, ...] = ()
    evidence_refs: tuple[str, ...] = ()
    steps_taken: NonNegativeInt = 0
