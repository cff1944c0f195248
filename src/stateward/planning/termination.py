"""Termination service: decides, from recorded facts, whether a run continues or how it stops.

Stopping is a formal outcome, not an exception. :func:`evaluate` reads a :class:`TerminationSnapshot` and
returns one :class:`TerminationRecord`. The first matching rule wins; the order puts safety first, then
a person's explicit wish, then causes a person has to fix, then resource exhaustion, then heuristics:

1. ``HARD_CONSTRAINT_VIOLATED`` - a hard constraint of the goal does not hold
   (:func:`stateward.planning.check_constraints`): effect BLOCK -> FAIL, effect HANDOFF -> HANDOFF.
2. ``GOAL_FAILURE_CRITERION`` - a failure criterion of the goal is met -> FAIL, or DEGRADE when every
   met criterion says so (``on_met``: what was verified can still be delivered safely).
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
from stateward.planning.goal import (
    CriterionEffect,
    GoalContract,
    RunFacts,
    ViolationEffect,
    assess_goal,
    check_constraints,
)
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
        """True unless the decision is to continue."""
        return self.decision is not TerminationDecision.CONTINUE


_FINISHED = frozenset({WorkItemState.SUCCEEDED, WorkItemState.CANCELLED})


def states_digest(states: Mapping[str, WorkItemState]) -> str:
    return sha256_hex(canonical_json({k: v.value for k, v in states.items()}))


# A rule's finding: (decision, reason, detail, constraint ids).
Finding = tuple[TerminationDecision, TerminationReason, str, tuple[str, ...]]


def _goal_rules(s: TerminationSnapshot, p: TerminationPolicy) -> Finding | None:
    """Hard constraints first, then the goal's failure criteria."""
    if s.goal is None or s.facts is None:
        return None
    hard = [v for v in check_constraints(s.goal, s.facts) if v.hard]
    if hard:
        blocking = any(v.effect is ViolationEffect.BLOCK for v in hard)
        return (
            TerminationDecision.FAIL if blocking else TerminationDecision.HANDOFF,
            TerminationReason.HARD_CONSTRAINT_VIOLATED,
            "; ".join(v.message for v in hard),
            tuple(v.constraint_id for v in hard),
        )
    failures = assess_goal(s.goal, s.facts).failures
    if failures:
        detail = f"failure criteria met: {', '.join(failures)}"
        # The run fails only if some met criterion rules out a safe partial delivery.
        fatal = any(c.on_met is CriterionEffect.FAIL for c in s.goal.failure_criteria if c.criterion_id in failures)
        decision = TerminationDecision.FAIL if fatal else TerminationDecision.DEGRADE
        return decision, TerminationReason.GOAL_FAILURE_CRITERION, detail, failures
    return None


def _pause_rule(s: TerminationSnapshot, p: TerminationPolicy) -> Finding | None:
    if not s.pause_requested:
        return None
    return TerminationDecision.PAUSE, TerminationReason.PAUSE_REQUESTED, "pause requested", ()


def _repeated_failure_rule(s: TerminationSnapshot, p: TerminationPolicy) -> Finding | None:
    if not s.failures:
        return None
    last = s.failures[-1]
    run = 0
    for f in reversed(s.failures):
        if f != last:
            break
        run += 1
    if run < p.max_identical_failures:
        return None
    detail = f"{last.action} failed with {last.error_code} {run} times in a row"
    return TerminationDecision.HANDOFF, TerminationReason.REPEATED_FAILURE, detail, ()


def _budget_rule(s: TerminationSnapshot, p: TerminationPolicy) -> Finding | None:
    if s.budget is None:
        return None
    # Using up replans only forbids another replan; the plan in hand may still run to the end.
    exhausted = [d for d in s.budget.exhausted() if d != "replans"]
    if not exhausted and s.next_estimate is not None:
        exhausted = [str(x["dimension"]) for x in s.budget.remaining().shortfalls(s.next_estimate)]
    if not exhausted:
        return None
    detail = f"budget exhausted or insufficient for the next work: {', '.join(exhausted)}"
    return TerminationDecision.DEGRADE, TerminationReason.BUDGET_EXHAUSTED, detail, ()


def _no_progress_rule(s: TerminationSnapshot, p: TerminationPolicy) -> Finding | None:
    if s.no_progress_streak < p.max_no_progress_streak:
        return None
    detail = f"{s.no_progress_streak} local loops in a row stopped without progress"
    return TerminationDecision.DEGRADE, TerminationReason.NO_PROGRESS, detail, ()


def _stall_rule(s: TerminationSnapshot, p: TerminationPolicy) -> Finding | None:
    window = s.state_history[-(p.stall_evaluations + 1) :]
    if len(window) != p.stall_evaluations + 1 or len({states_digest(h) for h in window}) != 1:
        return None
    unfinished = [k for k, v in window[-1].items() if v not in _FINISHED]
    if not unfinished:
        return None
    detail = f"no work item changed state for {p.stall_evaluations} evaluations; open: {', '.join(unfinished)}"
    return TerminationDecision.HANDOFF, TerminationReason.PLAN_STALLED, detail, ()


# In precedence order: the first rule with a finding decides.
RULES = (_goal_rules, _pause_rule, _repeated_failure_rule, _budget_rule, _no_progress_rule, _stall_rule)


def evaluate(snapshot: TerminationSnapshot, policy: TerminationPolicy | None = None) -> TerminationRecord:
    """The one termination decision for ``snapshot``; see the module docstring for the precedence."""
    p = policy or TerminationPolicy()
    for rule in RULES:
        found = rule(snapshot, p)
        if found is not None:
            decision, reason, detail, ids = found
            return TerminationRecord(
                decision=decision, reason=reason, detail=detail, at_step=snapshot.step, constraint_ids=ids
            )
    return TerminationRecord(
        decision=TerminationDecision.CONTINUE, reason=TerminationReason.OK, detail="", at_step=snapshot.step
    )
