"""Goal Contract: what a run is for, what it may touch, and how "done" and "failed" are decided.

Every rule the runtime has to check is data (a predicate with a ``kind``), never prose, so it can be
evaluated against recorded facts instead of a model's opinion. Hard constraints stop or hand off a run;
soft constraints are only recorded.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, ValidationError, model_validator

from stateward.core.errors import ErrorCode, RunError


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# --------------------------------------------------------------------------- predicates (data, not prose)


class LimitPredicate(_Frozen):
    """A usage counter must stay at or below ``value``."""

    kind: Literal["max_tool_calls", "max_model_calls", "max_tokens", "max_elapsed_seconds"]
    value: NonNegativeInt


class CapabilityPredicate(_Frozen):
    """A capability must never have been used."""

    kind: Literal["forbidden_capability"]
    value: str = Field(min_length=1)


class MetricPredicate(_Frozen):
    """A named measured fact (e.g. ``accessible_repository_ratio``) compared with a bound.

    ``at_least`` / ``at_most`` include the bound, ``above`` / ``below`` exclude it.
    """

    kind: Literal["metric_at_least", "metric_at_most", "metric_above", "metric_below"]
    metric: str = Field(min_length=1)
    value: int | float


class ArtifactPredicate(_Frozen):
    """An artifact (e.g. ``risk-matrix``) must exist among the run's verified artifacts."""

    kind: Literal["artifact_present"]
    value: str = Field(min_length=1)


class BudgetPredicate(_Frozen):
    """The budget left cannot carry the work still needed to produce an artifact (e.g. ``risk-matrix``): the
    unfinished items making it and their unfinished dependencies, at the plan's estimates (source 3:
    "budget insufficient to complete the risk verification")."""

    kind: Literal["budget_insufficient_for"]
    value: str = Field(min_length=1)


Predicate = Annotated[
    LimitPredicate | CapabilityPredicate | MetricPredicate | ArtifactPredicate | BudgetPredicate,
    Field(discriminator="kind"),
]


class RunFacts(_Frozen):
    """What has been recorded about a run; predicates are evaluated against this and nothing else."""

    tool_calls: NonNegativeInt = 0
    model_calls: NonNegativeInt = 0
    tokens: NonNegativeInt = 0
    elapsed_seconds: NonNegativeInt | None = None  # None: no clock was read, so a deadline cannot be shown
    capabilities_used: tuple[str, ...] = ()
    artifacts: tuple[str, ...] = ()
    metrics: dict[str, float] = Field(default_factory=dict)
    # Artifacts the budget left can no longer reach; None: not measured (no plan, so no estimates yet).
    unaffordable: tuple[str, ...] | None = None


def evaluate(predicate: Predicate, facts: RunFacts) -> bool | None:
    """True if the predicate holds, False if not, None if the fact it needs was never measured."""
    if isinstance(predicate, LimitPredicate):
        used = {
            "max_tool_calls": facts.tool_calls,
            "max_model_calls": facts.model_calls,
            "max_tokens": facts.tokens,
            "max_elapsed_seconds": facts.elapsed_seconds,
        }[predicate.kind]
        return None if used is None else used <= predicate.value
    if isinstance(predicate, CapabilityPredicate):
        return predicate.value not in facts.capabilities_used
    if isinstance(predicate, ArtifactPredicate):
        return predicate.value in facts.artifacts
    if isinstance(predicate, BudgetPredicate):
        return None if facts.unaffordable is None else predicate.value in facts.unaffordable
    measured = facts.metrics.get(predicate.metric)
    if measured is None:
        return None
    compare = {
        "metric_at_least": measured >= predicate.value,
        "metric_at_most": measured <= predicate.value,
        "metric_above": measured > predicate.value,
        "metric_below": measured < predicate.value,
    }
    return compare[predicate.kind]


# --------------------------------------------------------------------------- the contract


class ViolationEffect(StrEnum):
    """What happens when a constraint does not hold."""

    BLOCK = "BLOCK"  # refuse the action; the run does not continue past it
    HANDOFF = "HANDOFF"  # stop and hand control to a person
    RECORD = "RECORD"  # soft: note the deviation and carry on


class SoftConstraint(_Frozen):
    """A constraint the run should keep; a deviation is recorded once and the run goes on."""

    constraint_id: str = Field(min_length=1)
    description: str
    predicate: Predicate


class HardConstraint(SoftConstraint):
    """A constraint the run must keep; a violation blocks the run or hands it to a person."""

    on_violation: Literal[ViolationEffect.BLOCK, ViolationEffect.HANDOFF] = ViolationEffect.BLOCK


class CriterionEffect(StrEnum):
    """What a met failure criterion does to the run. FAIL: nothing can be safely delivered once it holds.
    DEGRADE: the goal cannot be met in full, but what was verified is delivered (source 12: FAILED is for
    what "cannot be completed and cannot be safely degraded"; 15.4: out of budget -> confirmed facts)."""

    FAIL = "FAIL"
    DEGRADE = "DEGRADE"


class Criterion(_Frozen):
    """A machine-checkable success or failure condition."""

    criterion_id: str = Field(min_length=1)
    description: str
    predicate: Predicate
    on_met: CriterionEffect = CriterionEffect.FAIL  # failure criteria only


class EvidenceRequirement(_Frozen):
    """How much evidence a kind of claim needs before it may be delivered."""

    requirement_id: str = Field(min_length=1)
    applies_to: str = Field(min_length=1)  # e.g. "high_risk_claim"
    min_authoritative_sources: NonNegativeInt = 1
    min_independent_sources: NonNegativeInt = 0


class Scope(_Frozen):
    """What a plan may touch. ``allowed_capabilities=None`` means any registered capability."""

    in_scope: tuple[str, ...] = ()
    out_of_scope: tuple[str, ...] = ()
    allowed_capabilities: tuple[str, ...] | None = None


class GoalContract(_Frozen):
    """The goal as a contract: objective, scope, deliverables, hard and soft constraints, machine-checkable success and
    failure criteria, evidence requirements and a deadline."""

    goal_id: str = Field(min_length=1)
    objective: str = Field(min_length=1)
    scope: Scope = Scope()
    deliverables: tuple[str, ...] = ()
    hard_constraints: tuple[HardConstraint, ...] = ()
    soft_constraints: tuple[SoftConstraint, ...] = ()
    success_criteria: tuple[Criterion, ...] = ()
    failure_criteria: tuple[Criterion, ...] = ()
    evidence_requirements: tuple[EvidenceRequirement, ...] = ()

    @model_validator(mode="after")
    def _unique_ids(self) -> GoalContract:
        """Violations and outcomes are reported by id, so ids must be unambiguous."""
        ids = [c.constraint_id for c in (*self.hard_constraints, *self.soft_constraints)]
        ids += [c.criterion_id for c in (*self.success_criteria, *self.failure_criteria)]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"duplicate constraint/criterion ids: {', '.join(dupes)}")
        return self

    @model_validator(mode="after")
    def _checkable_while_running(self) -> GoalContract:
        """Constraints and failure criteria are checked before every decision, so each must mean
        something at any moment: a constraint cannot ask for an artifact (nothing exists yet at the
        start; that is a success criterion), and a failure criterion cannot be a limit or a forbidden
        capability (those hold at the start; they are constraints)."""
        wrong = [
            f"constraint {c.constraint_id} asks for an artifact (a success criterion)"
            for c in (*self.hard_constraints, *self.soft_constraints)
            if isinstance(c.predicate, ArtifactPredicate)
        ]
        wrong += [
            f"failure criterion {c.criterion_id} is a {c.predicate.kind} predicate (a constraint)"
            for c in self.failure_criteria
            if isinstance(c.predicate, LimitPredicate | CapabilityPredicate)
        ]
        if wrong:
            raise ValueError("; ".join(wrong))
        return self

    def forbidden_capabilities(self) -> frozenset[str]:
        """Capabilities a hard constraint forbids; the plan validator treats them as out of scope."""
        return frozenset(
            c.predicate.value for c in self.hard_constraints if isinstance(c.predicate, CapabilityPredicate)
        )


class ConstraintViolation(_Frozen):
    """A constraint found not to hold, with what the goal says happens then."""

    constraint_id: str
    hard: bool
    effect: ViolationEffect
    message: str


def check_constraints(goal: GoalContract, facts: RunFacts) -> list[ConstraintViolation]:
    """Constraints that do not hold. An unmeasured metric is not a violation (it cannot be shown)."""
    out: list[ConstraintViolation] = []
    for hard, group in ((True, goal.hard_constraints), (False, goal.soft_constraints)):
        for c in group:
            if evaluate(c.predicate, facts) is False:
                effect = c.on_violation if isinstance(c, HardConstraint) else ViolationEffect.RECORD
                msg = f"{'hard' if hard else 'soft'} constraint {c.constraint_id} violated: {c.description}"
                out.append(ConstraintViolation(constraint_id=c.constraint_id, hard=hard, effect=effect, message=msg))
    return out


class GoalAssessment(_Frozen):
    """Which criteria the facts satisfy; ``succeeded`` needs every success criterion and no failure."""

    met: tuple[str, ...]
    unmet: tuple[str, ...]
    failures: tuple[str, ...]

    @property
    def failed(self) -> bool:
        """True when a failure criterion of the goal contract was met."""
        return bool(self.failures)

    @property
    def succeeded(self) -> bool:
        """True when every success criterion is met and no failure criterion is."""
        return not self.unmet and not self.failures


def assess_goal(goal: GoalContract, facts: RunFacts) -> GoalAssessment:
    """Success is only what the facts show: an unmeasured success metric counts as unmet."""
    met = tuple(c.criterion_id for c in goal.success_criteria if evaluate(c.predicate, facts) is True)
    unmet = tuple(c.criterion_id for c in goal.success_criteria if c.criterion_id not in met)
    failures = tuple(c.criterion_id for c in goal.failure_criteria if evaluate(c.predicate, facts) is True)
    return GoalAssessment(met=met, unmet=unmet, failures=failures)


# --------------------------------------------------------------------------- loading documents


def field_errors(exc: ValidationError) -> list[dict[str, str]]:
    """pydantic's field errors as plain JSON data (no inputs echoed back, no URLs)."""
    return [
        {"loc": ".".join(str(p) for p in e["loc"]) or "(root)", "type": e["type"], "msg": e["msg"]}
        for e in exc.errors(include_url=False, include_input=False, include_context=False)
    ]


def summarize_field_errors(errors: list[dict[str, str]], limit: int = 3) -> str:
    shown = "; ".join(f"{e['loc']}: {e['msg']}" for e in errors[:limit])
    more = f" (+{len(errors) - limit} more)" if len(errors) > limit else ""
    return f"{len(errors)} field error(s): {shown}{more}"


def parse_json_document(doc: Mapping[str, Any] | str | bytes, error: type[RunError]) -> Any:
    """JSON text to data, raising ``error`` with code NOT_JSON on bad text."""
    if not isinstance(doc, str | bytes):
        return doc
    try:
        return json.loads(doc)
    except (ValueError, RecursionError) as exc:  # bad text or encoding, a 5,000-digit number, 100k nested brackets
        reason = "it nests too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise error(f"document is not valid JSON: {reason}", code=ErrorCode.NOT_JSON) from None


class InvalidGoalDocumentError(RunError):
    """A goal contract document does not match the schema; ``details['errors']`` lists the fields."""

    default_code = ErrorCode.INVALID_GOAL_DOCUMENT


def load_goal(doc: Mapping[str, Any] | str | bytes) -> GoalContract:
    """Parse a goal contract from JSON text or data, raising a named error instead of a traceback."""
    data = parse_json_document(doc, InvalidGoalDocumentError)
    try:
        return GoalContract.model_validate(data)
    except ValidationError as exc:
        errors = field_errors(exc)
        raise InvalidGoalDocumentError(summarize_field_errors(errors), details={"errors": errors}) from None


def read_goal_file(path: str | Path) -> GoalContract:
    """Read and validate a goal contract document (INVALID_GOAL_DOCUMENT otherwise)."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        code = ErrorCode.GOAL_FILE_NOT_FOUND if isinstance(exc, FileNotFoundError) else ErrorCode.GOAL_FILE_UNREADABLE
        raise InvalidGoalDocumentError(f"cannot read goal file {p}: {exc.strerror}", code=code) from None
    return load_goal(raw)
