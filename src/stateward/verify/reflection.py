"""Bounded reflection: detect, repair into a new version, re-run every required check, stop by policy.

A repair never edits the artifact it repairs: ``repair_fn`` returns new content and the loop makes
``name:vN+1`` with its own hash, so it stays provable which version a delivery used. Each new version goes
through the *whole* suite again (a fix can break something else). The number of repairs is bounded by
``max_reflections``; a repair that changes nothing ends the loop instead of spending the budget.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pydantic import BaseModel, ConfigDict, NonNegativeInt

from stateward.planning.delivery import Confidence, FindingRisk
from stateward.verify.checks import CheckResult, CheckSuite, CheckVerdict
from stateward.verify.policy import PolicyDecision, VerificationOutcome, decide
from stateward.verify.report import ArtifactVersion, Report

RepairFn = Callable[[ArtifactVersion, Sequence[CheckResult]], "str | Report"]


class ReflectionRound(BaseModel):
    """One verification of one version, and what the policy decided about it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    artifact_ref: str
    sha256: str
    results: tuple[CheckResult, ...]
    decision: PolicyDecision


class ReflectionOutcome(BaseModel):
    """How a bounded reflection ended: the rounds it took and the last verified version, if any."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    final: ArtifactVersion
    versions: tuple[ArtifactVersion, ...]  # v1 first; every version made, none overwritten
    rounds: tuple[ReflectionRound, ...]
    decision: PolicyDecision
    reflections_used: NonNegativeInt

    @property
    def accepted(self) -> bool:
        """True when the reflection accepted the artifact."""
        return self.decision.outcome is VerificationOutcome.ACCEPT


def run_reflection(
    artifact_v1: ArtifactVersion,
    checks: CheckSuite,
    repair_fn: RepairFn,
    max_reflections: int,
    *,
    risk: FindingRisk | None = None,
    confidence: Confidence = Confidence.MEDIUM,
    reflections_used: int = 0,
) -> ReflectionOutcome:
    """Verify ``artifact_v1`` and repair it at most ``max_reflections - reflections_used`` times.

    ``risk`` defaults to the highest risk in the current version's report (NONE_FOUND if unreadable);
    ``reflections_used`` carries repairs already spent on this artifact (e.g. before a resume).
    """
    current = artifact_v1
    versions = [current]
    rounds: list[ReflectionRound] = []
    used = reflections_used
    while True:
        results = checks.run(current)
        decision = decide(results, used, max_reflections, _risk_of(current, risk), confidence)
        rounds.append(
            ReflectionRound(artifact_ref=current.ref, sha256=current.sha256, results=results, decision=decision)
        )
        if decision.outcome is not VerificationOutcome.REPAIR_ONCE:
            break
        failing = tuple(r for r in results if r.verdict is not CheckVerdict.PASS)
        repaired = current.next_version(repair_fn(current, failing))
        used += 1
        if repaired.sha256 == current.sha256:
            # Nothing changed: re-deciding with the budget spent turns this into degrade or handoff.
            decision = decide(results, max(used, max_reflections), max_reflections, _risk_of(current, risk), confidence)
            decision = decision.model_copy(
                update={"reasons": ("repair produced identical content", *decision.reasons), "reflections_used": used}
            )
            break
        current = repaired
        versions.append(current)
    return ReflectionOutcome(
        final=current, versions=tuple(versions), rounds=tuple(rounds), decision=decision, reflections_used=used
    )


def _risk_of(artifact: ArtifactVersion, given: FindingRisk | None) -> FindingRisk:
    if given is not None:
        return given
    try:
        return artifact.report().highest_risk()
    except ValueError:  # pydantic's ValidationError is a ValueError: unreadable reports carry no risk
        return FindingRisk.NONE_FOUND
