"""Bounded reflection: every repair is a new version, every version is checked in full, repairs are counted."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from stateward.planning import Confidence, FindingRisk
from stateward.verify import (
    ArtifactVersion,
    CheckContext,
    CheckResult,
    CheckSuite,
    ModelJudgement,
    Report,
    VerificationOutcome,
    run_reflection,
)

Doc = Callable[..., dict[str, Any]]


def v1_artifact(doc: dict[str, Any]) -> ArtifactVersion:
    return ArtifactVersion.create("migration-assessment", Report.model_validate(doc))


class Repairer:
    """A scripted repair: returns the given documents in order and records what it was shown."""

    def __init__(self, *docs: dict[str, Any] | str) -> None:
        self.docs = list(docs)
        self.seen: list[tuple[str, tuple[str, ...]]] = []

    def __call__(self, artifact: ArtifactVersion, failing: Sequence[CheckResult]) -> str | Report:
        self.seen.append((artifact.ref, tuple(r.name for r in failing)))
        nxt = self.docs[min(len(self.seen), len(self.docs)) - 1]
        return nxt if isinstance(nxt, str) else Report.model_validate(nxt)


class OverCertainJudge:
    """Semantic check: a migration order written as guaranteed is over-certain (FAIL)."""

    name = "semantic_certainty"

    def judge(self, artifact: ArtifactVersion, context: CheckContext) -> ModelJudgement | Mapping[str, Any] | str:
        return "FAIL" if "guaranteed" in artifact.content else "PASS"


def test_reference_scenario_v1_is_repaired_once_into_v2_which_passes(
    v1_doc: dict[str, Any], make_doc: Doc, ctx: CheckContext
) -> None:
    v1_doc["sections"][5] = {**v1_doc["sections"][5], "body": "this order is guaranteed safe"}
    suite = CheckSuite(context=ctx, model_checks=(OverCertainJudge(),))
    v1 = v1_artifact(v1_doc)
    v1_before = v1.model_dump()
    repair = Repairer(make_doc())

    out = run_reflection(v1, suite, repair, max_reflections=1, confidence=Confidence.HIGH)

    assert [v.ref for v in out.versions] == ["migration-assessment:v1", "migration-assessment:v2"]
    assert out.final.ref == "migration-assessment:v2" and out.final.parent == "migration-assessment:v1"
    assert out.final.sha256 != v1.sha256
    assert v1.model_dump() == v1_before  # v1 is never overwritten
    assert repair.seen == [
        ("migration-assessment:v1", ("count_consistency", "claims_have_evidence", "semantic_certainty"))
    ]
    assert out.reflections_used == 1
    assert [r.decision.outcome for r in out.rounds] == [VerificationOutcome.REPAIR_ONCE, VerificationOutcome.ACCEPT]
    # Every required check ran again on v2, not just the ones that failed on v1.
    assert [r.name for r in out.rounds[1].results] == [r.name for r in out.rounds[0].results]
    assert len(out.rounds[1].results) == 10
    assert out.accepted and out.decision.requires_approval  # high-risk claims: accepted, then approval


def test_a_repair_that_breaks_something_else_is_not_repaired_again_past_the_limit(
    v1_doc: dict[str, Any], make_doc: Doc, suite: CheckSuite
) -> None:
    broken_elsewhere = make_doc()
    broken_elsewhere["sections"] = broken_elsewhere["sections"][:-1]  # fixes the counts, drops "gaps"
    repair = Repairer(broken_elsewhere)
    out = run_reflection(v1_artifact(v1_doc), suite, repair, max_reflections=1)
    assert len(repair.seen) == 1
    assert out.final.version == 2
    assert out.decision.outcome is VerificationOutcome.DEGRADED_DELIVERY
    assert out.decision.reason_code == "REFLECTIONS_EXHAUSTED"
    assert [r.name for r in out.rounds[1].results if r.verdict != "PASS"] == ["required_sections"]


def test_reflection_is_bounded_even_when_repairs_never_succeed(v1_doc: dict[str, Any], suite: CheckSuite) -> None:
    attempts = []
    for n in range(1, 4):
        doc = {**v1_doc, "title": f"attempt {n}"}  # different every time, still wrong
        attempts.append(doc)
    repair = Repairer(*attempts)
    out = run_reflection(v1_artifact(v1_doc), suite, repair, max_reflections=3)
    assert len(repair.seen) == 3
    assert [v.version for v in out.versions] == [1, 2, 3, 4]
    assert out.reflections_used == 3
    assert out.decision.outcome is VerificationOutcome.HUMAN_HANDOFF  # high-risk claim still without evidence


def test_no_repair_when_the_artifact_has_used_its_reflections(v1_doc: dict[str, Any], suite: CheckSuite) -> None:
    repair = Repairer("unused")
    out = run_reflection(v1_artifact(v1_doc), suite, repair, max_reflections=1, reflections_used=1)
    assert repair.seen == []
    assert [v.ref for v in out.versions] == ["migration-assessment:v1"]
    assert out.decision.outcome is VerificationOutcome.HUMAN_HANDOFF


def test_a_repair_that_changes_nothing_ends_the_loop_without_a_new_version(
    v1_doc: dict[str, Any], suite: CheckSuite
) -> None:
    repair = Repairer(v1_doc)
    out = run_reflection(v1_artifact(v1_doc), suite, repair, max_reflections=3)
    assert len(repair.seen) == 1
    assert len(out.versions) == 1
    assert out.decision.outcome is not VerificationOutcome.REPAIR_ONCE
    assert out.decision.reasons[0] == "repair produced identical content"
    assert out.reflections_used == 1


def test_passing_v1_is_accepted_without_calling_repair(make_doc: Doc, suite: CheckSuite) -> None:
    repair = Repairer("unused")
    out = run_reflection(
        v1_artifact(make_doc()), suite, repair, max_reflections=1, risk=FindingRisk.LOW, confidence=Confidence.HIGH
    )
    assert out.accepted and repair.seen == [] and len(out.rounds) == 1
    assert not out.decision.requires_approval


def test_unknown_from_a_model_check_is_never_accepted(make_doc: Doc, ctx: CheckContext) -> None:
    class Unsure:
        name = "semantic"

        def judge(self, artifact: ArtifactVersion, context: CheckContext) -> str:
            return "UNKNOWN"

    suite = CheckSuite(context=ctx, model_checks=(Unsure(),))
    out = run_reflection(
        v1_artifact(make_doc()), suite, Repairer("unused"), max_reflections=1, confidence=Confidence.HIGH
    )
    assert not out.accepted
    assert out.decision.outcome is VerificationOutcome.DEGRADED_DELIVERY
