"""Deterministic checks over the migration report, and model checks that can only be PASS/FAIL/UNKNOWN."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from stateward.verify import (
    ArtifactVersion,
    CheckContext,
    CheckSuite,
    CheckVerdict,
    ModelJudgement,
    Report,
    SensitivePattern,
    check_artifact_hash,
    check_claim_evidence,
    check_counts,
    check_coverage,
    check_duplicate_ids,
    check_evidence_exists,
    check_required_sections,
    check_schema,
    check_sensitive_content,
    failures,
    run_model_check,
)

PASS, FAIL, UNKNOWN = CheckVerdict.PASS, CheckVerdict.FAIL, CheckVerdict.UNKNOWN
Doc = Callable[..., dict[str, Any]]


def art(doc: dict[str, Any], version: int = 1) -> ArtifactVersion:
    return ArtifactVersion.create("migration-assessment", Report.model_validate(doc), version=version)


def test_repaired_scenario_report_passes_every_check(make_doc: Doc, suite: CheckSuite) -> None:
    results = suite.run(art(make_doc()))
    assert failures(results) == ()
    assert {r.name for r in results} == {
        "schema_valid",
        "artifact_hash",
        "required_sections",
        "count_consistency",
        "claims_have_evidence",
        "evidence_exists",
        "coverage",
        "duplicate_ids",
        "sensitive_content",
    }
    coverage = next(r for r in results if r.name == "coverage")
    assert coverage.detail == "11 of 12 analysed; not accessible: billing-worker"


def test_v1_fails_the_count_check_and_the_claim_evidence_check(v1_doc: dict[str, Any], suite: CheckSuite) -> None:
    failed = {r.name: r for r in failures(suite.run(art(v1_doc)))}
    assert set(failed) == {"count_consistency", "claims_have_evidence"}
    assert failed["count_consistency"].detail == "call_sites: states 36, lists 37"
    assert failed["claims_have_evidence"].blocks_partial  # a high-risk claim without evidence is never delivered


def test_stated_breaking_changes_must_equal_the_listed_ones(make_doc: Doc, ctx: CheckContext) -> None:
    doc = make_doc()
    doc["breaking_changes"] = doc["breaking_changes"][:7]  # says 8, lists 7
    result = check_counts(art(doc), ctx)
    assert result.verdict is FAIL
    assert "breaking_changes: states 8, lists 7" in result.detail


def test_stated_risk_split_must_equal_the_risk_table(make_doc: Doc, ctx: CheckContext) -> None:
    doc = make_doc()
    doc["module_risks"][3] = {**doc["module_risks"][3], "risk": "high"}  # table now 4 high / 4 medium
    result = check_counts(art(doc), ctx)
    assert result.verdict is FAIL
    assert "modules[high]: states 3, lists 4" in result.detail
    assert "modules[medium]: states 5, lists 4" in result.detail


def test_stated_repository_numbers_are_checked_against_coverage_and_scope(make_doc: Doc, ctx: CheckContext) -> None:
    doc = make_doc()
    doc["stated"] = {**doc["stated"], "repositories_accessible": 12, "repositories_expected": 11}
    detail = check_counts(art(doc), ctx).detail
    assert "repositories_accessible: states 12, lists 11" in detail
    assert "repositories_expected vs scope: states 11, lists 12" in detail


def test_missing_section_is_named(make_doc: Doc, ctx: CheckContext) -> None:
    doc = make_doc()
    doc["sections"] = [s for s in doc["sections"] if s["section_id"] != "gaps"]
    result = check_required_sections(art(doc), ctx)
    assert (result.verdict, result.detail) == (FAIL, "missing section gaps")


def test_claim_without_evidence_fails_and_only_blocks_partial_delivery_when_high_risk(
    make_doc: Doc, ctx: CheckContext
) -> None:
    doc = make_doc()
    doc["claims"][2] = {**doc["claims"][2], "evidence_ids": []}  # the none_found claim
    result = check_claim_evidence(art(doc), ctx)
    assert result.verdict is FAIL and not result.blocks_partial


def test_every_evidence_reference_must_exist_in_the_store(make_doc: Doc, ctx: CheckContext) -> None:
    doc = make_doc()
    doc["call_sites"][0] = {**doc["call_sites"][0], "evidence_ids": ["ev-invented"]}
    result = check_evidence_exists(art(doc), ctx)
    assert (result.verdict, result.detail) == (FAIL, "unknown evidence ev-invented")
    smaller_store = ctx.model_copy(update={"evidence_ids": ctx.evidence_ids - {"ev-guide"}})
    assert check_evidence_exists(art(make_doc()), smaller_store).verdict is FAIL


def test_coverage_needs_every_in_scope_repository_analysed_or_listed_as_not_accessible(
    make_doc: Doc, ctx: CheckContext
) -> None:
    doc = make_doc()
    doc["coverage"] = [c for c in doc["coverage"] if c["repository"] != "billing-worker"]  # silently dropped
    result = check_coverage(art(doc), ctx)
    assert (result.verdict, result.detail) == (FAIL, "billing-worker neither analysed nor listed as not accessible")
    doc["coverage"].append({"repository": "random-repo", "status": "ANALYZED"})
    assert "random-repo is not in scope" in check_coverage(art(doc), ctx).detail


def test_coverage_without_a_scope_is_unknown_not_pass(make_doc: Doc, ctx: CheckContext) -> None:
    assert check_coverage(art(make_doc()), ctx.model_copy(update={"in_scope": ()})).verdict is UNKNOWN


def test_duplicate_ids_are_found(make_doc: Doc, ctx: CheckContext) -> None:
    doc = make_doc()
    doc["claims"].append({**doc["claims"][0]})
    doc["call_sites"][1] = {**doc["call_sites"][1], "call_site_id": "cs-01"}
    result = check_duplicate_ids(art(doc), ctx)
    assert result.verdict is FAIL
    assert result.detail == "duplicate claim id c1; duplicate call_site id cs-01"


@pytest.mark.parametrize(
    ("leak", "kind"),
    [
        ("AKIAABCDEFGHIJKLMNOP", "aws_access_key"),
        ("contact alice@example.com", "email"),
        ("api_key = 'zx81-very-secret-value'", "secret_assignment"),
        ("-----BEGIN RSA PRIVATE KEY-----", "private_key"),
        ("Authorization: Bearer abcdefghijklmnopqrstuvwxyz012345", "bearer_token"),
    ],
)
def test_sensitive_content_is_flagged_without_echoing_the_secret(
    make_doc: Doc, ctx: CheckContext, leak: str, kind: str
) -> None:
    doc = make_doc()
    doc["sections"][0] = {**doc["sections"][0], "body": f"note: {leak}"}
    result = check_sensitive_content(art(doc), ctx)
    assert result.verdict is FAIL and result.security and not result.repairable
    assert kind in result.detail
    assert leak not in result.detail


def test_sensitive_patterns_are_configurable(make_doc: Doc, ctx: CheckContext) -> None:
    doc = make_doc()
    doc["sections"][0] = {**doc["sections"][0], "body": "owner: alice@example.com, ticket PAY-1234"}
    no_email = ctx.model_copy(update={"sensitive_patterns": (SensitivePattern(name="ticket", pattern=r"PAY-\d+"),)})
    result = check_sensitive_content(art(doc), no_email)
    assert (result.verdict, result.detail) == (FAIL, "matches ticket")
    assert check_sensitive_content(art(doc), ctx.model_copy(update={"sensitive_patterns": ()})).verdict is PASS


def test_artifact_hash_detects_changed_content_and_a_different_recorded_hash(make_doc: Doc, ctx: CheckContext) -> None:
    good = art(make_doc())
    assert check_artifact_hash(good, ctx.model_copy(update={"expected_sha256": good.sha256})).verdict is PASS
    tampered = good.model_copy(update={"content": good.content.replace("37", "38")})
    assert check_artifact_hash(tampered, ctx).verdict is FAIL
    other = ctx.model_copy(update={"expected_sha256": "0" * 64})
    result = check_artifact_hash(good, other)
    assert result.verdict is FAIL and result.security


def test_invalid_schema_fails_schema_and_makes_content_checks_unknown(suite: CheckSuite) -> None:
    broken = ArtifactVersion.create("migration-assessment", json.dumps({"title": "", "claims": "many"}))
    verdicts = {r.name: r.verdict for r in suite.run(broken)}
    assert verdicts["schema_valid"] is FAIL
    for name in ("required_sections", "count_consistency", "evidence_exists", "coverage", "duplicate_ids"):
        assert verdicts[name] is UNKNOWN
    assert check_schema(ArtifactVersion.create("x", "not json"), suite.context).blocks_partial


class _Judge:
    def __init__(self, name: str, answer: object) -> None:
        self.name = name
        self.answer = answer

    def judge(self, artifact: ArtifactVersion, context: CheckContext) -> ModelJudgement | Mapping[str, Any] | str:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer  # type: ignore[return-value]


@pytest.mark.parametrize(
    ("answer", "verdict"),
    [
        (ModelJudgement(verdict=FAIL, detail="migration order stated as certain"), FAIL),
        ("pass", PASS),
        (" UNKNOWN ", UNKNOWN),
        ("yes", UNKNOWN),
        ("PASS, mostly", UNKNOWN),
        ({"verdict": "MAYBE"}, UNKNOWN),
        ({"verdict": "FAIL", "detail": "causal claim from correlation"}, FAIL),
        (None, UNKNOWN),
        (1, UNKNOWN),
        (RuntimeError("model down"), UNKNOWN),
    ],
)
def test_model_check_results_are_coerced_to_pass_fail_or_unknown(
    make_doc: Doc, ctx: CheckContext, answer: object, verdict: CheckVerdict
) -> None:
    result = run_model_check(_Judge("semantic", answer), art(make_doc()), ctx)
    assert result.name == "semantic"
    assert result.verdict is verdict


def test_suite_runs_model_checks_after_program_checks(make_doc: Doc, ctx: CheckContext) -> None:
    suite = CheckSuite(context=ctx, model_checks=(_Judge("semantic", "UNKNOWN"),))
    results = suite.run(art(make_doc()))
    assert results[-1].name == "semantic"
    assert [r.name for r in failures(results)] == ["semantic"]  # UNKNOWN is not a pass


def test_context_accepts_evidence_as_a_mapping_or_ids() -> None:
    assert CheckContext.build({"ev-1": "doc"}).evidence_ids == CheckContext.build(["ev-1"]).evidence_ids
