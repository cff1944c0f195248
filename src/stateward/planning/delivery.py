"""Degraded delivery and handoff: when evidence or budget runs short, deliver less - never invent more.

* :class:`DegradationRung` is the ladder from a full report down to a safe failure; :func:`choose_rung`
  picks the highest rung the recorded facts support.
* :class:`PartialDelivery` states the original goal, what was and was not covered, and why; a coverage
  gap is part of the delivery, not a footnote.
* Risk and confidence are separate axes (:func:`assess`). "No risk found" (:attr:`FindingRisk.NONE_FOUND`)
  only says the searches found nothing; it is never reported as :attr:`FindingRisk.LOW`.
* :class:`HandoffPackage` is the control-transfer protocol: what happened, what was tried, the impact and
  the options with their consequences; :meth:`HandoffPackage.to_pending_request` makes it the run's
  pending request and :meth:`HandoffPackage.select` maps a person's answer to one option.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, model_validator

from stateward.core.errors import ErrorCode, RequestRefusedError
from stateward.core.state import PendingRequest
from stateward.core.status import RunStatus
from stateward.planning.budget import BudgetAmount, BudgetLedger
from stateward.planning.plan import RiskLevel


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# --------------------------------------------------------------------------- risk vs confidence


class FindingRisk(StrEnum):
    """The risk a finding or conclusion carries, as assessed from evidence.

    Distinct from :class:`stateward.planning.RiskLevel` (a planner's a-priori rating of a work item):
    an assessment can also find *nothing*, and NONE_FOUND must never be conflated with LOW.
    """

    NONE_FOUND = "none_found"
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"

    @property
    def rank(self) -> int:
        """The risk's order, so the highest risk of several can be chosen."""
        return _RISK_RANK[self]

    @classmethod
    def from_plan(cls, level: RiskLevel) -> FindingRisk:
        """A plan risk level maps to the same finding level; it never yields NONE_FOUND."""
        return cls(level.value)

    @classmethod
    def highest(cls, risks: list[FindingRisk] | tuple[FindingRisk, ...]) -> FindingRisk:
        """The highest of ``risks``; nothing assessed is NONE_FOUND, not LOW."""
        return max(risks, key=lambda r: r.rank, default=cls.NONE_FOUND)


_RISK_RANK = {FindingRisk.NONE_FOUND: 0, FindingRisk.LOW: 1, FindingRisk.MEDIUM: 2, FindingRisk.HIGH: 3}


class Confidence(StrEnum):
    """How well the evidence supports the risk assessment (evidence sufficiency)."""

    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"


class RiskHandling(StrEnum):
    """What may be said or done about a finding, given its risk and the confidence in it."""

    STATE_CONCLUSION = "STATE_CONCLUSION"  # low risk, well supported: a low-risk conclusion may be stated
    STATE_WITH_RISK = "STATE_WITH_RISK"  # medium risk, supported: state it with the risk flagged
    FLAG_FOR_APPROVAL = "FLAG_FOR_APPROVAL"  # high risk, supported: state the risk clearly, then approval
    HUMAN = "HUMAN"  # high risk, weakly supported: mark unknown, a person confirms
    CANNOT_CLAIM_SAFE = "CANNOT_CLAIM_SAFE"  # weak support without high risk: must not be called safe
    NOTHING_FOUND = "NOTHING_FOUND"  # searches found nothing: report exactly that, not "low risk"


class RiskAssessment(_Frozen):
    """How certain a finding is and how it must be handled before it is delivered."""

    risk: FindingRisk
    confidence: Confidence
    handling: RiskHandling
    statement: str

    @property
    def needs_human(self) -> bool:
        """True when the risk is handled by a human (a decision or an approval), not automatically."""
        return self.handling in (RiskHandling.HUMAN, RiskHandling.FLAG_FOR_APPROVAL)

    @property
    def may_claim_safe(self) -> bool:
        """Only a low risk found with high confidence supports calling something safe."""
        return self.handling is RiskHandling.STATE_CONCLUSION


def assess(risk: FindingRisk, confidence: Confidence) -> RiskAssessment:
    """Combine risk and confidence without letting either stand in for the other.

    ======== ========== ===================
    risk     confidence handling
    ======== ========== ===================
    high     low        HUMAN
    high     med/high   FLAG_FOR_APPROVAL
    medium   low        CANNOT_CLAIM_SAFE
    medium   med/high   STATE_WITH_RISK
    low      low        CANNOT_CLAIM_SAFE
    low      medium     STATE_WITH_RISK
    low      high       STATE_CONCLUSION
    none     low        CANNOT_CLAIM_SAFE
    none     med/high   NOTHING_FOUND
    ======== ========== ===================
    """
    low_conf = confidence is Confidence.LOW
    if risk is FindingRisk.HIGH:
        handling = RiskHandling.HUMAN if low_conf else RiskHandling.FLAG_FOR_APPROVAL
    elif low_conf:
        handling = RiskHandling.CANNOT_CLAIM_SAFE
    elif risk is FindingRisk.NONE_FOUND:
        handling = RiskHandling.NOTHING_FOUND
    elif risk is FindingRisk.LOW and confidence is Confidence.HIGH:
        handling = RiskHandling.STATE_CONCLUSION
    else:
        handling = RiskHandling.STATE_WITH_RISK
    return RiskAssessment(risk=risk, confidence=confidence, handling=handling, statement=_STATEMENTS[handling])


_STATEMENTS = {
    RiskHandling.STATE_CONCLUSION: "Low risk, supported by sufficient evidence.",
    RiskHandling.STATE_WITH_RISK: "Risk present; stated with its level and evidence.",
    RiskHandling.FLAG_FOR_APPROVAL: "High risk, supported by evidence; requires approval before acting.",
    RiskHandling.HUMAN: "High risk with insufficient evidence; marked unknown until a person confirms.",
    RiskHandling.CANNOT_CLAIM_SAFE: "Evidence is insufficient; this must not be described as safe.",
    RiskHandling.NOTHING_FOUND: "No risk was found by the searches performed; this is not evidence of safety.",
}


# --------------------------------------------------------------------------- the degradation ladder


class DegradationRung(StrEnum):
    """Rungs from best to worst; compare with :attr:`rank` (lower is better)."""

    FULL_REPORT = "FULL_REPORT"
    REPORT_WITH_GAPS = "REPORT_WITH_GAPS"
    FACTS_AND_RISK_CANDIDATES = "FACTS_AND_RISK_CANDIDATES"
    ARTIFACT_INDEX = "ARTIFACT_INDEX"
    HANDOFF_PACKAGE = "HANDOFF_PACKAGE"
    SAFE_FAILURE = "SAFE_FAILURE"

    @property
    def rank(self) -> int:
        """The rung's position on the degradation ladder; a higher rank delivers less."""
        return LADDER.index(self)


LADDER: tuple[DegradationRung, ...] = tuple(DegradationRung)


class DeliveryFacts(_Frozen):
    """What exists at the moment a run must deliver; only recorded facts, nothing a model asserted."""

    expected_scope: tuple[str, ...] = ()
    covered_scope: tuple[str, ...] = ()
    report_verified: bool = False  # the final report passed every required check
    verified_facts: NonNegativeInt = 0  # verified fact-list entries (e.g. breaking changes, call sites)
    completed_artifacts: tuple[str, ...] = ()
    safety_blocked: bool = False  # sensitive content / hard-constraint problem: deliver no content
    can_hand_off: bool = True  # a trusted person can take over (a handoff package can be built)
    min_report_coverage: float = Field(default=0.5, ge=0.0, le=1.0)

    @property
    def missing_scope(self) -> tuple[str, ...]:
        """The expected scope items no delivered fact covers, in their expected order."""
        covered = set(self.covered_scope)
        return tuple(s for s in self.expected_scope if s not in covered)

    @property
    def coverage(self) -> float:
        """The share of the expected scope that is covered (1.0 when nothing was expected)."""
        if not self.expected_scope:
            return 1.0
        covered = set(self.covered_scope)
        return sum(1 for s in self.expected_scope if s in covered) / len(self.expected_scope)


def choose_rung(facts: DeliveryFacts) -> DegradationRung:
    """The best rung the facts support.

    A verified report covering all scope is FULL_REPORT; covering at least ``min_report_coverage`` is
    REPORT_WITH_GAPS (gaps listed); otherwise verified facts give a fact list with risk candidates (no
    final ranking), completed artifacts an index. With nothing deliverable - or content that must not be
    delivered - control goes to a person, and without one the run fails safely.
    """
    if not facts.safety_blocked:
        if facts.report_verified and not facts.missing_scope:
            return DegradationRung.FULL_REPORT
        if facts.report_verified and facts.coverage >= facts.min_report_coverage:
            return DegradationRung.REPORT_WITH_GAPS
        if facts.verified_facts > 0:
            return DegradationRung.FACTS_AND_RISK_CANDIDATES
        if facts.completed_artifacts:
            return DegradationRung.ARTIFACT_INDEX
    return DegradationRung.HANDOFF_PACKAGE if facts.can_hand_off else DegradationRung.SAFE_FAILURE


class Conclusion(_Frozen):
    """A verified conclusion as delivered; high-risk ones must cite evidence."""

    text: str = Field(min_length=1)
    risk: FindingRisk
    confidence: Confidence
    evidence_refs: tuple[str, ...] = ()


class PartialDelivery(_Frozen):
    """What a degraded run delivers, with its gaps stated as part of the result."""

    original_goal: str = Field(min_length=1)
    rung: DegradationRung
    reason_code: str = Field(min_length=1)
    reason: str = Field(min_length=1)
    done_scope: tuple[str, ...] = ()
    missing_scope: tuple[str, ...] = ()
    verified_conclusions: tuple[Conclusion, ...] = ()
    undecidable: tuple[str, ...] = ()
    needed_to_continue: tuple[str, ...] = ()
    budget_used: BudgetAmount = BudgetAmount()
    artifact_refs: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _honest(self) -> PartialDelivery:
        """A partial delivery must say what is missing, and must not carry unsupported high-risk claims."""
        bare = [c.text for c in self.verified_conclusions if c.risk is FindingRisk.HIGH and not c.evidence_refs]
        if bare:
            raise ValueError(f"high-risk conclusions without evidence: {bare}")
        if self.rung is not DegradationRung.FULL_REPORT and not (self.missing_scope or self.undecidable):
            raise ValueError("a degraded delivery must name its missing scope or undecidable parts")
        if self.rung is DegradationRung.FULL_REPORT and self.missing_scope:
            raise ValueError("a full report cannot have missing scope")
        return self

    def coverage_line(self) -> str:
        """E.g. ``"11 of 12 in scope covered; not covered: billing-worker"`` - the gap is stated, not minimised."""
        total = len(self.done_scope) + len(self.missing_scope)
        line = f"{len(self.done_scope)} of {total} in scope covered"
        if self.missing_scope:
            line += f"; not covered: {', '.join(self.missing_scope)}"
        return line

    def summary(self) -> str:
        """A plain-text account of what was delivered, why it is partial, and what is missing."""
        lines = [
            f"Goal: {self.original_goal}",
            f"Delivered as: {self.rung.value} ({self.reason_code}: {self.reason})",
            f"Coverage: {self.coverage_line()}",
        ]
        lines += [
            f"Verified: {c.text} [risk {c.risk.value}, evidence {', '.join(c.evidence_refs) or 'none'}]"
            for c in self.verified_conclusions
        ]
        lines += [f"Undecided: {u}" for u in self.undecidable]
        lines += [f"Needed to continue: {n}" for n in self.needed_to_continue]
        return "\n".join(lines)


# --------------------------------------------------------------------------- handoff


class DecisionOption(_Frozen):
    """One choice a person may name when answering a handoff, with its consequence spelled out."""

    option_id: str = Field(min_length=1, pattern=r"^[a-z][a-z0-9_]*$")
    label: str = Field(min_length=1)
    consequence: str = Field(min_length=1)


class AttemptSummary(_Frozen):
    """Attempt history of one work item: how often, what changed between tries, how it last failed."""

    work_item_id: str
    attempts: NonNegativeInt
    last_error_code: str | None = None
    last_error: str | None = None
    parameter_changes: tuple[str, ...] = ()


class ResumePoint(_Frozen):
    """Where work continues after the person answers; the budget snapshot is restored, never reset."""

    checkpoint_seq: int | None = None
    work_item_id: str | None = None
    plan_version: int | None = None
    budget: BudgetLedger = BudgetLedger()


class HandoffPackage(_Frozen):
    """What a person gets when the run hands over: why, the state reached, attempts, evidence, options with
    consequences and where to resume."""

    reason_code: str = Field(min_length=1)
    reason: str = Field(min_length=1)
    goal: str = Field(min_length=1)
    plan_version: int | None = None
    completed_items: tuple[str, ...] = ()
    blocked_items: tuple[str, ...] = ()
    impact: str = ""
    attempt_history: tuple[AttemptSummary, ...] = ()
    evidence_refs: tuple[str, ...] = ()
    artifact_refs: tuple[str, ...] = ()
    options: tuple[DecisionOption, ...] = Field(min_length=1)
    resume_point: ResumePoint = ResumePoint()

    @model_validator(mode="after")
    def _unique_options(self) -> HandoffPackage:
        ids = [o.option_id for o in self.options]
        if len(ids) != len(set(ids)):
            raise ValueError(f"duplicate option ids: {ids}")
        return self

    @property
    def option_ids(self) -> tuple[str, ...]:
        """The ids of the options offered to the human, in order."""
        return tuple(o.option_id for o in self.options)

    def to_question(self) -> str:
        """The text a pending request carries: what happened, what was tried, impact, options and consequences."""
        lines = [f"[{self.reason_code}] {self.reason}", f"Goal: {self.goal}"]
        state = f"plan v{self.plan_version}" if self.plan_version is not None else "no plan"
        lines.append(
            f"State: {state}; completed: {', '.join(self.completed_items) or 'none'}; "
            f"blocked: {', '.join(self.blocked_items) or 'none'}"
        )
        for a in self.attempt_history:
            last = f", last error {a.last_error_code}" if a.last_error_code else ""
            changes = f", changes: {'; '.join(a.parameter_changes)}" if a.parameter_changes else ""
            lines.append(f"Tried: {a.work_item_id} {a.attempts} attempt(s){last}{changes}")
        if self.impact:
            lines.append(f"Impact: {self.impact}")
        if self.evidence_refs or self.artifact_refs:
            # The question is bounded (a person reads it; the Runtime refuses an oversized one): the package in
            # the handoff_recorded event keeps every ref.
            refs = (*self.artifact_refs, *self.evidence_refs)
            more = f" (+{len(refs) - QUESTION_REFS} more in the handoff package)" if len(refs) > QUESTION_REFS else ""
            lines.append(f"Evidence: {', '.join(refs[:QUESTION_REFS])}{more}")
        lines.append("Options:")
        lines += [f"  {o.option_id}: {o.label} - {o.consequence}" for o in self.options]
        lines.append(f"Answer with one of: {', '.join(self.option_ids)}")
        return "\n".join(lines)

    def select(self, answer: str) -> DecisionOption:
        """The option a person's answer names (exact id, case-insensitive); anything else is refused."""
        wanted = answer.strip().lower()
        for o in self.options:
            if o.option_id == wanted:
                return o
        raise RequestRefusedError(
            f"answer {answer!r} is not one of: {', '.join(self.option_ids)}",
            code=ErrorCode.UNKNOWN_OPTION,
            details={"options": list(self.option_ids)},
        )

    def to_pending_request(
        self, request_id: str, state_before: RunStatus, created_at: datetime, expires_at: datetime | None = None
    ) -> PendingRequest:
        """The run's pending request for this handoff (kind ``handoff``; no guarded action)."""
        return PendingRequest(
            request_id=request_id,
            kind="handoff",
            question=self.to_question(),
            state_before=state_before,
            created_at=created_at,
            expires_at=expires_at,
        )


QUESTION_REFS = 24  # evidence refs a handoff question lists (all of them stay in the package)


def standard_options(continue_needs: str = "") -> tuple[DecisionOption, ...]:
    """Continue with authorisation, accept the partial scope, or cancel - the usual three choices."""
    more = f" ({continue_needs})" if continue_needs else ""
    return (
        DecisionOption(
            option_id="continue_authorized",
            label=f"Authorise and continue{more}",
            consequence="work resumes from the resume point with the budget already spent still counted",
        ),
        DecisionOption(
            option_id="accept_partial",
            label="Accept the partial result",
            consequence="the run ends PARTIALLY_COMPLETED; missing scope stays listed as not covered",
        ),
        DecisionOption(
            option_id="cancel",
            label="Cancel the run",
            consequence="the run ends FAILED (cancelled_at_handoff), delivering nothing; no further tool calls",
        ),
    )
