"""Degraded delivery and handoff: gaps are stated, "none found" is not "low", a person's answer picks an option."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from stateward.core.errors import RequestRefusedError
from stateward.core.status import RunStatus
from stateward.planning import (
    AttemptSummary,
    BudgetAmount,
    BudgetLedger,
    BudgetLimits,
    Conclusion,
    Confidence,
    DecisionOption,
    DegradationRung,
    DeliveryFacts,
    FindingRisk,
    HandoffPackage,
    PartialDelivery,
    ResumePoint,
    RiskHandling,
    RiskLevel,
    assess,
    choose_rung,
    standard_options,
)

R, C, H = FindingRisk, Confidence, RiskHandling
REPOS = (*(f"repo-{i:02d}" for i in range(1, 12)), "billing-worker")
ACCESSIBLE = REPOS[:11]


@pytest.mark.parametrize(
    ("risk", "confidence", "handling"),
    [
        (R.HIGH, C.HIGH, H.FLAG_FOR_APPROVAL),
        (R.HIGH, C.MEDIUM, H.FLAG_FOR_APPROVAL),
        (R.HIGH, C.LOW, H.HUMAN),
        (R.MEDIUM, C.HIGH, H.STATE_WITH_RISK),
        (R.MEDIUM, C.LOW, H.CANNOT_CLAIM_SAFE),
        (R.LOW, C.HIGH, H.STATE_CONCLUSION),
        (R.LOW, C.MEDIUM, H.STATE_WITH_RISK),
        (R.LOW, C.LOW, H.CANNOT_CLAIM_SAFE),
        (R.NONE_FOUND, C.HIGH, H.NOTHING_FOUND),
        (R.NONE_FOUND, C.LOW, H.CANNOT_CLAIM_SAFE),
    ],
)
def test_risk_and_confidence_are_assessed_separately(risk: FindingRisk, confidence: Confidence, handling: H) -> None:
    assert assess(risk, confidence).handling is handling


def test_high_risk_low_confidence_goes_to_a_person() -> None:
    a = assess(R.HIGH, C.LOW)
    assert a.needs_human and not a.may_claim_safe


def test_no_risk_found_is_never_reported_as_low_risk() -> None:
    assert R.NONE_FOUND is not R.LOW and R.NONE_FOUND.value != R.LOW.value
    none_found = assess(R.NONE_FOUND, C.HIGH)
    low = assess(R.LOW, C.HIGH)
    assert none_found.handling is not low.handling
    assert not none_found.may_claim_safe and low.may_claim_safe
    assert "low risk" not in none_found.statement.lower()
    assert "not evidence of safety" in none_found.statement
    assert R.highest([]) is R.NONE_FOUND  # nothing assessed is not "low"
    assert R.highest([R.NONE_FOUND, R.LOW, R.HIGH, R.MEDIUM]) is R.HIGH
    assert {R.from_plan(level) for level in RiskLevel} == {R.LOW, R.MEDIUM, R.HIGH}


def test_ladder_is_ordered_from_full_report_to_safe_failure() -> None:
    assert [r.rank for r in DegradationRung] == list(range(6))
    assert DegradationRung.FULL_REPORT.rank < DegradationRung.REPORT_WITH_GAPS.rank < DegradationRung.SAFE_FAILURE.rank


@pytest.mark.parametrize(
    ("facts", "rung"),
    [
        (DeliveryFacts(expected_scope=REPOS, covered_scope=REPOS, report_verified=True), "FULL_REPORT"),
        # reference run: 12 repositories, 11 accessible and analysed
        (DeliveryFacts(expected_scope=REPOS, covered_scope=ACCESSIBLE, report_verified=True), "REPORT_WITH_GAPS"),
        # exactly at the minimum coverage for a report (half the scope) still earns one
        (DeliveryFacts(expected_scope=REPOS, covered_scope=REPOS[:6], report_verified=True), "REPORT_WITH_GAPS"),
        # only 5 of 12: a report would overstate; deliver the verified fact list
        (
            DeliveryFacts(expected_scope=REPOS, covered_scope=REPOS[:5], report_verified=True, verified_facts=45),
            "FACTS_AND_RISK_CANDIDATES",
        ),
        # budget ran out during test-gap analysis: repo list, 8 changes, 37 call sites, no final ranking
        (DeliveryFacts(expected_scope=REPOS, covered_scope=ACCESSIBLE, verified_facts=45), "FACTS_AND_RISK_CANDIDATES"),
        (DeliveryFacts(expected_scope=REPOS, completed_artifacts=("repo-list:v1",)), "ARTIFACT_INDEX"),
        (DeliveryFacts(expected_scope=REPOS), "HANDOFF_PACKAGE"),
        (DeliveryFacts(expected_scope=REPOS, can_hand_off=False), "SAFE_FAILURE"),
        (
            DeliveryFacts(expected_scope=REPOS, covered_scope=REPOS, report_verified=True, safety_blocked=True),
            "HANDOFF_PACKAGE",
        ),
    ],
)
def test_choose_rung_picks_the_best_rung_the_facts_support(facts: DeliveryFacts, rung: str) -> None:
    assert choose_rung(facts) is DegradationRung(rung)


def partial(**fields: object) -> PartialDelivery:
    base: dict[str, object] = {
        "original_goal": "assess the Payment SDK v2 migration across 12 repositories",
        "rung": DegradationRung.REPORT_WITH_GAPS,
        "reason_code": "SCOPE_INACCESSIBLE",
        "reason": "no read access to billing-worker",
        "done_scope": ACCESSIBLE,
        "missing_scope": ("billing-worker",),
        "verified_conclusions": (
            Conclusion(text="3 high-risk modules", risk=R.HIGH, confidence=C.HIGH, evidence_refs=("risk-matrix:v2",)),
        ),
        "undecidable": ("billing-worker migration risk",),
        "needed_to_continue": ("read access to billing-worker",),
        "budget_used": BudgetAmount(tool_calls=97, model_calls=28),
    }
    return PartialDelivery.model_validate({**base, **fields})


def test_partial_delivery_states_the_coverage_gap_as_part_of_the_result() -> None:
    p = partial()
    assert p.coverage_line() == "11 of 12 in scope covered; not covered: billing-worker"
    text = p.summary()
    assert "REPORT_WITH_GAPS" in text and "Needed to continue: read access to billing-worker" in text
    assert "complete" not in text.lower()


def test_partial_delivery_refuses_a_high_risk_conclusion_without_evidence() -> None:
    bare = Conclusion(text="refunds will break", risk=R.HIGH, confidence=C.MEDIUM)
    with pytest.raises(ValidationError, match="high-risk conclusions without evidence"):
        partial(verified_conclusions=(bare,))


def test_a_degraded_delivery_must_name_what_is_missing() -> None:
    with pytest.raises(ValidationError, match="must name its missing scope"):
        partial(missing_scope=(), undecidable=())
    with pytest.raises(ValidationError, match="full report cannot have missing scope"):
        partial(rung=DegradationRung.FULL_REPORT)


def handoff(**fields: object) -> HandoffPackage:
    base: dict[str, object] = {
        "reason_code": "REPEATED_FAILURE",
        "reason": "documentation search timed out 3 times; circuit open; no cached source",
        "goal": "assess the Payment SDK v2 migration",
        "plan_version": 2,
        "completed_items": ("W01", "W02"),
        "blocked_items": ("W05",),
        "impact": "breaking changes cannot be extracted; risk ranking would be unverified",
        "attempt_history": (
            AttemptSummary(
                work_item_id="W05",
                attempts=3,
                last_error_code="TIMEOUT",
                parameter_changes=("timeout 10s -> 30s",),
            ),
        ),
        "evidence_refs": ("ev-guide",),
        "artifact_refs": ("repo-list:v1",),
        "options": standard_options("about 20 more tool calls"),
        "resume_point": ResumePoint(
            checkpoint_seq=41,
            work_item_id="W05",
            plan_version=2,
            budget=BudgetLedger(limits=BudgetLimits(max_tool_calls=120)).charge(BudgetAmount(tool_calls=63)),
        ),
    }
    return HandoffPackage.model_validate({**base, **fields})


def test_handoff_question_says_what_happened_what_was_tried_impact_and_options_with_consequences() -> None:
    q = handoff().to_question()
    assert q.startswith("[REPEATED_FAILURE] documentation search timed out 3 times")
    assert "State: plan v2; completed: W01, W02; blocked: W05" in q
    assert "Tried: W05 3 attempt(s), last error TIMEOUT, changes: timeout 10s -> 30s" in q
    assert "Impact: breaking changes cannot be extracted" in q
    assert "continue_authorized: Authorise and continue (about 20 more tool calls) - work resumes" in q
    assert q.endswith("Answer with one of: continue_authorized, accept_partial, cancel")


def test_a_persons_answer_selects_exactly_one_option() -> None:
    pkg = handoff()
    assert pkg.option_ids == ("continue_authorized", "accept_partial", "cancel")
    assert pkg.select("  Accept_Partial\n").option_id == "accept_partial"
    for bad in ("yes", "1", "accept", "cancel please", ""):
        with pytest.raises(RequestRefusedError) as err:
            pkg.select(bad)
        assert err.value.code == "UNKNOWN_OPTION"


def test_options_must_be_unique_and_present() -> None:
    opt = DecisionOption(option_id="cancel", label="Cancel", consequence="run ends")
    with pytest.raises(ValidationError, match="duplicate option ids"):
        handoff(options=(opt, opt))
    with pytest.raises(ValidationError):
        handoff(options=())
    with pytest.raises(ValidationError):
        DecisionOption(option_id="Not An Id", label="x", consequence="y")


def test_handoff_becomes_a_pending_request_and_round_trips() -> None:
    pkg = handoff()
    at = datetime(2025, 1, 1, tzinfo=UTC)
    req = pkg.to_pending_request("handoff_001", RunStatus.RUNNING, at)
    assert (req.kind, req.question, req.state_before, req.guarded_action) == (
        "handoff",
        pkg.to_question(),
        RunStatus.RUNNING,
        None,
    )
    restored = HandoffPackage.model_validate_json(pkg.model_dump_json())
    assert restored == pkg and restored.resume_point.budget.used.tool_calls == 63
