"""Termination service: decides, from recorded facts, whether a run continues or how it stops.

Stopping is a formal outcome, not an exception. :func:`evaluate` reads a :class:`TerminationSnapshot` and
returns one :class:`TerminationRecord`. The first matching rule wins; the order puts safety first, then
a person's explicit wish, then causes a person has to fix, then resource exhaustion, then heuristics:

1. ``HARD_CONSTRAINT_VIOLATED`` - a hard constraint of the goal does not hold
   (:func:`stateward.planning.check_constraints`): effect BLOCK -> FAIL, effect HANDOFF -> HANDOFF.
2. ``GOAL_FAILURE_CRITERION`` - a failure criterion of the goal is met -> FAIL.
3. ``PAUSE_REQUESTED`` -> PAUSE (state is saved; the run can resume).
4. ``REPEATED_FAILURE`` - the same action failed with the same error code N times in a row -> HANDOFF
   (retrying again would not change anything; a person has to fix access, the tool or the scope).
5. ``BUDGET_EXHAUSTED`` - a limited dimension is used up, or the next work does not fit -> DEGRADE
   (deliver what is verified, never an unverified ranking).
6. ``NO_PROGRESS`` - M consecutive local loops stopped without progress -> DEGRADE.
7. ``PLAN_STALLED`` - no work item changed state for K evaluations while work remains -> HANDOFF.
8. otherwise ``OK`` -> CONTINUE.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveInt

from stateward.core.canonical import canonical_json, sha256_hex
from stateward.planning.budget import BudgetAmount, BudgetLedger
from stateward.planning.goal import GoalContract, RunFacts, ViolationEffect, assess_goal, check_constraints
from stateward.planning.patch import WorkItemState


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TerminationDecision(StrEnum):
    """The termination service's answer for the run as a whole."""

    CONTINUE = "CONTINUE"
    PAUSE = "PAUSE"
    DEGRADE = "DEGRADE"
    HANDOFF = "HANDOFF"
    FAIL = "FAIL"


class TerminationReason(StrEnum):
    """Why the termination service decided what it did."""

    OK = "OK"
    HARD_CONSTRAINT_VIOLATED = "HARD_CONSTRAINT_VIOLATED"
    GOAL_FAILURE_CRITERION = "GOAL_FAILURE_CRITERION"
    PAUSE_REQUESTED = "PAUSE_REQUESTED"
    REPEATED_FAILURE = "REPEATED_FAILURE"
    BUDGET_EXHAUSTED = "BUDGET_EXHAUSTED"
    NO_PROGRESS = "NO_PROGRESS"
    PLAN_STALLED = "PLAN_STALLED"


class FailureFact(_Frozen):
    """One failed attempt, as recorded: which action and which error code."""

    action: str
    error_code: str


class TerminationPolicy(_Frozen):
    """Thresholds of the termination service: repeated identical failures, no-progress streaks, stalls."""

    max_identical_failures: PositiveInt = 3
    max_no_progress_streak: PositiveInt = 2
    stall_evaluations: PositiveInt = 5


class TerminationSnapshot(_Frozen):
    """The facts one evaluation reads. The runtime keeps the rolling windows (failures, state history)."""

    step: NonNegativeInt
    budget: BudgetLedger | None = None
    next_estimate: BudgetAmount | None = None  # what the next work item would reserve
    no_progress_streak: NonNegativeInt = 0  # consecutive local loops that ended NO_PROGRESS
    failures: tuple[FailureFact, ...] = ()  # recent failed attempts, oldest first
    state_history: tuple[dict[str, WorkItemState], ...] = ()  # derived states per evaluation, oldest first
    goal: GoalContract | None = None
    facts: RunFacts | None = None
    pause_requested: bool = False


class TerminationRecord(_Frozen):
    """One recorded termination decision, with its reason and the constraints involved."""

    decision: TerminationDecision
    reason: TerminationReason
    detail: str = ""
    at_step: NonNegativeInt
    constraint_ids: tuple[str, ...] = Field(default=())

    @property
    def stops(self) -> bool:
        return self.decision is not TerminationDecision.CONTINUE


_FINISHED = frozenset({WorkItemState.SUCCEEDED, WorkItemState.CANCELLED})


def states_digest(states: Mapping[str, WorkItemState]) -> str:
    return sha256_hex(canonical_json({k: v.value for k, v in states.items()}))


def evaluate(snapshot: TerminationSnapshot, policy: TerminationPolicy | None = None) -> TerminationRecord:
    """The one termination decision for ``snapshot``; see the module docstring for the precedence."""
    p = policy or TerminationPolicy()
    s = snapshot

    def record(
        decision: TerminationDecision, reason: TerminationReason, detail: str, ids: tuple[str, ...] = ()
    ) -> TerminationRecord:
        return TerminationRecord(decision=decision, reason=reason, detail=detail, at_step=s.step, constraint_ids=ids)

    if s.goal is not None and s.facts is not None:
        hard = [v for v in check_constraints(s.goal, s.facts) if v.hard]
        if hard:
            blocking = any(v.effect is ViolationEffect.BLOCK for v in hard)
            return record(
                TerminationDecision.FAIL if blocking else TerminationDecision.HANDOFF,
                TerminationReason.HARD_CONSTRAINT_VIOLATED,
                "; ".join(v.message for v in hard),
                tuple(v.constraint_id for v in hard),
            )
        failures = assess_goal(s.goal, s.facts).failures
        if failures:
            return record(
                TerminationDecision.FAIL,
                TerminationReason.GOAL_FAILURE_CRITERION,
                f"failure criteria met: {', '.join(failures)}",
                failures,
            )

    if s.pause_requested:
        return record(TerminationDecision.PAUSE, TerminationReason.PAUSE_REQUESTED, "pause requested")

    if s.failures:
        last = s.failures[-1]
        run = 0
        for f in reversed(s.failures):
            if f != last:
                break
            run += 1
        if run >= p.max_identical_failures:
            detail = f"{last.action} failed with {last.error_code} {run} times in a row"
            return record(TerminationDecision.HANDOFF, TerminationReason.REPEATED_FAILURE, detail)

    if s.budget is not None:
        # Using up replans only forbids another replan; the plan in hand may still run to the end.
        exhausted = [d for d in s.budget.exhausted() if d != "replans"]
        if not exhausted and s.next_estimate is not None:
            exhausted = [str(x["dimension"]) for x in s.budget.remaining().shortfalls(s.next_estimate)]
        if exhausted:
            detail = f"budget exhausted or insufficient for the next work: {', '.join(exhausted)}"
            return record(TerminationDecision.DEGRADE, TerminationReason.BUDGET_EXHAUSTED, detail)

    if s.no_progress_streak >= p.max_no_progress_streak:
        detail = f"{s.no_progress_streak} local loops in a row stopped without progress"
        return record(TerminationDecision.DEGRADE, TerminationReason.NO_PROGRESS, detail)

    window = s.state_history[-(p.stall_evaluations + 1) :]
    if len(window) == p.stall_evaluations + 1 and len({states_digest(h) for h in window}) == 1:
        unfinished = [k for k, v in window[-1].items() if v not in _FINISHED]
        if unfinished:
            detail = f"no work item changed state for {p.stall_evaluations} evaluations; open: {', '.join(unfinished)}"
            return record(TerminationDecision.HANDOFF, TerminationReason.PLAN_STALLED, detail)

    return record(TerminationDecision.CONTINUE, TerminationReason.OK, "")
