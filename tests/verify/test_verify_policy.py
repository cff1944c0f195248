"""After verification: ACCEPT, REPAIR_ONCE, DEGRADED_DELIVERY or HUMAN_HANDOFF, in a fixed precedence."""

from __future__ import annotations

from typing import Any

import pytest

from stateward.planning import Confidence, FindingRisk
from stateward.verify import CheckResult, CheckVerdict, VerificationOutcome, decide

OUT = VerificationOutcome
R, C = FindingRisk, Confidence


def res(name: str, verdict: str = "PASS", **flags: Any) -> CheckResult:
    return CheckResult(name=name, verdict=CheckVerdict(verdict), detail=f"{name} detail", **flags)


ALL_PASS = [res("schema_valid"), res("count_consistency"), res("coverage")]


def test_all_pass_is_accepted() -> None:
    d = decide(ALL_PASS, 0, 1, R.MEDIUM, C.HIGH)
    assert (d.outcome, d.reason_code, d.requires_approval) == (OUT.ACCEPT, "ALL_CHECKS_PASSED", False)


def test_high_risk_with_high_confidence_is_accepted_but_needs_approval() -> None:
    d = decide(ALL_PASS, 0, 1, R.HIGH, C.HIGH)
    assert d.outcome is OUT.ACCEPT and d.requires_approval


def test_high_risk_with_low_confidence_goes_to_a_person_even_when_every_check_passes() -> None:
    d = decide(ALL_PASS, 0, 1, R.HIGH, C.LOW)
    assert (d.outcome, d.reason_code) == (OUT.HUMAN_HANDOFF, "HIGH_RISK_LOW_CONFIDENCE")


@pytest.mark.parametrize("risk", [R.LOW, R.NONE_FOUND])
def test_low_confidence_cannot_be_accepted_as_safe(risk: FindingRisk) -> None:
    d = decide(ALL_PASS, 0, 1, risk, C.LOW)
    assert (d.outcome, d.reason_code) == (OUT.DEGRADED_DELIVERY, "INSUFFICIENT_CONFIDENCE")


def test_repairable_failure_with_reflections_left_is_repaired_once() -> None:
    d = decide([*ALL_PASS, res("claims_have_evidence", "FAIL")], 0, 1, R.HIGH, C.HIGH)
    assert (d.outcome, d.reason_code) == (OUT.REPAIR_ONCE, "REPAIRABLE_FAILURE")
    assert d.reasons == ("claims_have_evidence: claims_have_evidence detail",)


def test_repairable_failure_without_reflections_left_degrades() -> None:
    d = decide([*ALL_PASS, res("count_consistency", "FAIL")], 1, 1, R.MEDIUM, C.HIGH)
    assert (d.outcome, d.reason_code, d.reflections_used) == (OUT.DEGRADED_DELIVERY, "REFLECTIONS_EXHAUSTED", 1)


def test_failure_that_blocks_partial_delivery_goes_to_a_person_once_reflections_are_spent() -> None:
    failing = [*ALL_PASS, res("claims_have_evidence", "FAIL", blocks_partial=True)]
    assert decide(failing, 0, 1, R.HIGH, C.HIGH).outcome is OUT.REPAIR_ONCE
    d = decide(failing, 1, 1, R.HIGH, C.HIGH)
    assert (d.outcome, d.reason_code) == (OUT.HUMAN_HANDOFF, "NOT_DELIVERABLE")


def test_security_failure_goes_to_a_person_before_any_repair() -> None:
    results = [res("count_consistency", "FAIL"), res("sensitive_content", "FAIL", security=True, repairable=False)]
    d = decide(results, 0, 3, R.LOW, C.HIGH)
    assert (d.outcome, d.reason_code) == (OUT.HUMAN_HANDOFF, "SECURITY_ISSUE")


def test_unknown_is_never_accepted_and_does_not_trigger_a_repair() -> None:
    d = decide([*ALL_PASS, res("semantic", "UNKNOWN")], 0, 1, R.LOW, C.HIGH)
    assert (d.outcome, d.reason_code) == (OUT.DEGRADED_DELIVERY, "UNVERIFIABLE")
    blocked = decide([*ALL_PASS, res("coverage", "UNKNOWN", blocks_partial=True)], 0, 1, R.LOW, C.HIGH)
    assert blocked.outcome is OUT.HUMAN_HANDOFF


def test_unrepairable_failure_degrades_when_partial_delivery_is_possible() -> None:
    d = decide([res("coverage", "FAIL", repairable=False)], 0, 1, R.MEDIUM, C.HIGH)
    assert (d.outcome, d.reason_code) == (OUT.DEGRADED_DELIVERY, "UNREPAIRABLE_FAILURE")


def test_no_repair_is_allowed_when_the_limit_is_zero() -> None:
    assert decide([res("count_consistency", "FAIL")], 0, 0, R.LOW, C.HIGH).outcome is OUT.DEGRADED_DELIVERY
