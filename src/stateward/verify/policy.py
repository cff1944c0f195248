"""What happens after verification: accept, repair once more, deliver degraded, or hand off to a person.

Precedence (first match wins):

1. a FAIL flagged ``security`` (sensitive content, artifact hash) -> HUMAN_HANDOFF: no rewrite may hide it;
2. high risk with low confidence (:func:`stateward.planning.delivery.assess` says HUMAN) -> HUMAN_HANDOFF;
3. every result PASS -> ACCEPT (``requires_approval`` for high risk), or DEGRADED_DELIVERY when the
   evidence does not support the conclusion's strength (low confidence);
4. a repairable FAIL while reflections remain -> REPAIR_ONCE (one repair, then every check runs again);
5. the artifact is deliverable in part (no result blocks partial delivery) -> DEGRADED_DELIVERY;
6. otherwise HUMAN_HANDOFF.

UNKNOWN is never PASS: an UNKNOWN result prevents ACCEPT, and a rewrite cannot create missing evidence,
so it is not a reason to repair.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, NonNegativeInt

from stateward.planning.delivery import Confidence, FindingRisk, RiskHandling, assess
from stateward.verify.checks import CheckResult, CheckVerdict


class VerificationOutcome(StrEnum):
    """The policy's verdict on an artifact version: accept it, repair it once, deliver degraded, or hand off."""

    ACCEPT = "ACCEPT"
    REPAIR_ONCE = "REPAIR_ONCE"
    DEGRADED_DELIVERY = "DEGRADED_DELIVERY"
    HUMAN_HANDOFF = "HUMAN_HANDOFF"


class PolicyDecision(BaseModel):
    """What the verification policy decided for one artifact version, and why."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    outcome: VerificationOutcome
    reason_code: str
    reasons: tuple[str, ...] = ()
    requires_approval: bool = False
    reflections_used: NonNegativeInt = 0


def decide(
    results: Iterable[CheckResult],
    reflections_used: int,
    max_reflections_per_artifact: int,
    risk: FindingRisk,
    confidence: Confidence,
) -> PolicyDecision:
    """The next step for an artifact, given all its check results; see the module docstring for the order."""
    rs = tuple(results)
    failed = [r for r in rs if r.verdict is CheckVerdict.FAIL]
    unknown = [r for r in rs if r.verdict is CheckVerdict.UNKNOWN]
    not_passed = [f"{r.name}: {r.verdict.value} {r.detail}".rstrip() for r in (*failed, *unknown)]

    def out(outcome: VerificationOutcome, code: str, reasons: list[str], approval: bool = False) -> PolicyDecision:
        return PolicyDecision(
            outcome=outcome,
            reason_code=code,
            reasons=tuple(reasons),
            requires_approval=approval,
            reflections_used=reflections_used,
        )

    security = [r for r in failed if r.security]
    if security:
        return out(VerificationOutcome.HUMAN_HANDOFF, "SECURITY_ISSUE", [f"{r.name}: {r.detail}" for r in security])
    risk_view = assess(risk, confidence)
    if risk_view.handling is RiskHandling.HUMAN:
        return out(VerificationOutcome.HUMAN_HANDOFF, "HIGH_RISK_LOW_CONFIDENCE", [risk_view.statement, *not_passed])
    if not failed and not unknown:
        if risk_view.handling is RiskHandling.CANNOT_CLAIM_SAFE:
            return out(VerificationOutcome.DEGRADED_DELIVERY, "INSUFFICIENT_CONFIDENCE", [risk_view.statement])
        approval = risk_view.handling is RiskHandling.FLAG_FOR_APPROVAL
        return out(VerificationOutcome.ACCEPT, "ALL_CHECKS_PASSED", [risk_view.statement], approval)
    repairable = [r for r in failed if r.repairable]
    if repairable and reflections_used < max_reflections_per_artifact:
        return out(VerificationOutcome.REPAIR_ONCE, "REPAIRABLE_FAILURE", [f"{r.name}: {r.detail}" for r in repairable])
    if not any(r.blocks_partial for r in (*failed, *unknown)):
        code = "REFLECTIONS_EXHAUSTED" if repairable else ("UNVERIFIABLE" if not failed else "UNREPAIRABLE_FAILURE")
        return out(VerificationOutcome.DEGRADED_DELIVERY, code, not_passed)
    return out(VerificationOutcome.HUMAN_HANDOFF, "NOT_DELIVERABLE", not_passed)
