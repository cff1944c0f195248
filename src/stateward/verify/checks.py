"""Deterministic checks over a report artifact, plus a hook for model checks that can only say PASS/FAIL/UNKNOWN.

Program checks come first because they are cheap, repeatable and cannot be talked out of a result: schema,
required sections, count consistency, claims backed by evidence, evidence that exists, coverage, duplicate
ids, sensitive content and the artifact hash. A model check judges what a program cannot (speculation
written as fact, over-certain recommendations); whatever it returns is coerced to a verdict and anything
unrecognised - including an exception - becomes UNKNOWN. UNKNOWN is never PASS.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from stateward.core.canonical import sha256_hex
from stateward.planning.delivery import FindingRisk
from stateward.verify.report import ArtifactVersion, CoverageStatus, Report


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CheckVerdict(StrEnum):
    """How one check ended: PASS, FAIL, or UNKNOWN when the evidence cannot decide (never read as PASS)."""

    PASS = "PASS"
    FAIL = "FAIL"
    UNKNOWN = "UNKNOWN"  # evidence insufficient to judge; never treated as PASS


class SourceStatement(_Frozen):
    """What one authoritative source says about a key, and the evidence id of the observation it was read in."""

    source: str
    evidence_id: str
    statement: str


class AuthorityConflict(_Frozen):
    """Two authoritative sources that disagree about one key (e.g. a rule's value): a fact a check found in
    the recorded evidence, for a person to settle - neither the worker nor a model may pick one."""

    key: str
    statements: tuple[SourceStatement, SourceStatement]

    @property
    def sources(self) -> tuple[str, str]:
        """The two sources' names, in the order the check found them."""
        return self.statements[0].source, self.statements[1].source


class CheckResult(_Frozen):
    """One check's outcome.

    ``repairable``: rewriting the artifact can fix it. ``security``: a person must look before anything
    is delivered. ``blocks_partial``: the artifact cannot even be delivered in degraded form.
    """

    name: str
    verdict: CheckVerdict
    detail: str = ""
    findings: tuple[str, ...] = ()  # what exactly failed, one entry each (shown to the next attempt)
    repairable: bool = True
    security: bool = False
    blocks_partial: bool = False
    conflict: AuthorityConflict | None = None  # a FAIL because two authorities disagree: a person chooses


class SensitivePattern(_Frozen):
    """A named pattern of content that must not appear in a delivered artifact (a key, a token)."""

    name: str
    pattern: str


DEFAULT_SENSITIVE_PATTERNS: tuple[SensitivePattern, ...] = (
    SensitivePattern(name="aws_access_key", pattern=r"\bAKIA[0-9A-Z]{16}\b"),
    SensitivePattern(name="private_key", pattern=r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    SensitivePattern(name="api_key_sk", pattern=r"\bsk-[A-Za-z0-9_-]{20,}"),
    SensitivePattern(name="github_token", pattern=r"\bgh[pousr]_[A-Za-z0-9]{30,}"),
    SensitivePattern(name="bearer_token", pattern=r"(?i)\bbearer\s+[A-Za-z0-9._~+/-]{20,}"),
    SensitivePattern(
        name="secret_assignment",
        pattern=r"(?i)\b(api[_-]?key|secret|token|password|passwd)\b\s*[:=]\s*['\"]?[^\s'\"]{8,}",
    ),
    SensitivePattern(name="email", pattern=r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b"),
)


class CheckContext(_Frozen):
    """What the checks compare the artifact with; all of it comes from the run's records."""

    evidence_ids: frozenset[str] = frozenset()
    in_scope: tuple[str, ...] = ()  # e.g. the 12 repositories the goal names
    required_sections: tuple[str, ...] = ()
    sensitive_patterns: tuple[SensitivePattern, ...] = DEFAULT_SENSITIVE_PATTERNS
    expected_sha256: str | None = None  # the hash the store recorded for this version

    @classmethod
    def build(cls, evidence: Iterable[str] | Mapping[str, Any] = (), **fields: Any) -> CheckContext:
        """Accepts the evidence store as ids or as a mapping keyed by id."""
        return cls(evidence_ids=frozenset(evidence), **fields)


CheckFn = Callable[[ArtifactVersion, CheckContext], CheckResult]


def _parse(artifact: ArtifactVersion) -> Report | None:
    try:
        return artifact.report()
    except ValidationError:
        return None


def _unknown(name: str) -> CheckResult:
    return CheckResult(name=name, verdict=CheckVerdict.UNKNOWN, detail="artifact is not a valid report")


def _result(name: str, problems: Sequence[str], ok: str = "", **flags: bool) -> CheckResult:
    if problems:
        return CheckResult(name=name, verdict=CheckVerdict.FAIL, detail="; ".join(problems), **flags)
    return CheckResult(name=name, verdict=CheckVerdict.PASS, detail=ok)


# --------------------------------------------------------------------------- deterministic checks


def check_schema(artifact: ArtifactVersion, ctx: CheckContext) -> CheckResult:
    """Fail an artifact whose content does not parse as the report schema."""
    try:
        artifact.report()
    except ValidationError as exc:
        errors = [f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}" for e in exc.errors()[:3]]
        return _result(
            "schema_valid", [f"{exc.error_count()} schema error(s): {'; '.join(errors)}"], blocks_partial=True
        )
    return _result("schema_valid", [])


def check_required_sections(artifact: ArtifactVersion, ctx: CheckContext) -> CheckResult:
    """Fail a report that lacks a section its output spec requires."""
    report = _parse(artifact)
    if report is None:
        return _unknown("required_sections")
    present = {s.section_id for s in report.sections}
    missing = [s for s in ctx.required_sections if s not in present]
    return _result("required_sections", [f"missing section {s}" for s in missing])


def check_counts(artifact: ArtifactVersion, ctx: CheckContext) -> CheckResult:
    """Every number the report states must equal what it lists (e.g. "8 breaking changes" lists 8)."""
    report = _parse(artifact)
    if report is None:
        return _unknown("count_consistency")
    st = report.stated
    analyzed = sum(1 for c in report.coverage if c.status is CoverageStatus.ANALYZED)
    by_risk = Counter(m.risk for m in report.module_risks)
    pairs: list[tuple[str, int | None, int]] = [
        ("breaking_changes", st.breaking_changes, len(report.breaking_changes)),
        ("call_sites", st.call_sites, len(report.call_sites)),
        ("repositories_expected", st.repositories_expected, len(report.coverage)),
        ("repositories_analyzed", st.repositories_analyzed, analyzed),
        ("repositories_accessible", st.repositories_accessible, analyzed),
    ]
    pairs += [(f"modules[{risk.value}]", n, by_risk.get(risk, 0)) for risk, n in st.modules_by_risk.items()]
    if ctx.in_scope:
        pairs.append(("repositories_expected vs scope", st.repositories_expected, len(ctx.in_scope)))
    problems = [
        f"{name}: states {said}, lists {listed}" for name, said, listed in pairs if said is not None and said != listed
    ]
    return _result("count_consistency", problems)


def check_claim_evidence(artifact: ArtifactVersion, ctx: CheckContext) -> CheckResult:
    """Every key claim cites evidence; a high-risk claim without it must never be delivered, even degraded."""
    report = _parse(artifact)
    if report is None:
        return _unknown("claims_have_evidence")
    bare = [c for c in report.claims if not c.evidence_ids]
    high = any(c.risk is FindingRisk.HIGH for c in bare)
    problems = [f"claim {c.claim_id} ({c.risk.value} risk) has no evidence" for c in bare]
    return _result("claims_have_evidence", problems, blocks_partial=high)


def check_evidence_exists(artifact: ArtifactVersion, ctx: CheckContext) -> CheckResult:
    """Fail a report whose claims cite evidence the run never recorded."""
    report = _parse(artifact)
    if report is None:
        return _unknown("evidence_exists")
    dangling = [e for e in report.evidence_refs() if e not in ctx.evidence_ids]
    return _result("evidence_exists", [f"unknown evidence {e}" for e in dangling])


def check_coverage(artifact: ArtifactVersion, ctx: CheckContext) -> CheckResult:
    """Every in-scope item is analysed or explicitly listed as not accessible; nothing outside scope."""
    report = _parse(artifact)
    if report is None:
        return _unknown("coverage")
    if not ctx.in_scope:
        return CheckResult(name="coverage", verdict=CheckVerdict.UNKNOWN, detail="no scope to compare with")
    listed = {c.repository: c.status for c in report.coverage}
    problems = [f"{r} neither analysed nor listed as not accessible" for r in ctx.in_scope if r not in listed]
    problems += [f"{r} is not in scope" for r in listed if r not in set(ctx.in_scope)]
    analyzed = sum(1 for r in ctx.in_scope if listed.get(r) is CoverageStatus.ANALYZED)
    gaps = [r for r in ctx.in_scope if listed.get(r) is CoverageStatus.NOT_ACCESSIBLE]
    ok = f"{analyzed} of {len(ctx.in_scope)} analysed" + (f"; not accessible: {', '.join(gaps)}" if gaps else "")
    return _result("coverage", problems, ok)


def check_duplicate_ids(artifact: ArtifactVersion, ctx: CheckContext) -> CheckResult:
    """Fail a report that uses one id for two different findings."""
    report = _parse(artifact)
    if report is None:
        return _unknown("duplicate_ids")
    groups = {
        "section": [s.section_id for s in report.sections],
        "claim": [c.claim_id for c in report.claims],
        "breaking_change": [b.change_id for b in report.breaking_changes],
        "call_site": [c.call_site_id for c in report.call_sites],
        "module": [m.module for m in report.module_risks],
        "repository": [c.repository for c in report.coverage],
    }
    problems = [
        f"duplicate {kind} id {i}" for kind, ids in groups.items() for i, n in sorted(Counter(ids).items()) if n > 1
    ]
    return _result("duplicate_ids", problems)


def check_sensitive_content(artifact: ArtifactVersion, ctx: CheckContext) -> CheckResult:
    """Names the kind of secret found, never the secret itself."""
    hits = [p.name for p in ctx.sensitive_patterns if re.search(p.pattern, artifact.content)]
    return _result(
        "sensitive_content",
        [f"matches {name}" for name in hits],
        repairable=False,
        security=True,
        blocks_partial=True,
    )


def check_artifact_hash(artifact: ArtifactVersion, ctx: CheckContext) -> CheckResult:
    """The content is what was hashed when the version was made (and what the store recorded)."""
    actual = sha256_hex(artifact.content)
    problems = []
    if actual != artifact.sha256:
        problems.append(f"{artifact.ref} content does not match its hash")
    if ctx.expected_sha256 is not None and ctx.expected_sha256 != artifact.sha256:
        problems.append(f"{artifact.ref} hash differs from the recorded one")
    return _result("artifact_hash", problems, repairable=False, security=True, blocks_partial=True)


DEFAULT_CHECKS: tuple[CheckFn, ...] = (
    check_schema,
    check_artifact_hash,
    check_required_sections,
    check_counts,
    check_claim_evidence,
    check_evidence_exists,
    check_coverage,
    check_duplicate_ids,
    check_sensitive_content,
)


# --------------------------------------------------------------------------- model checks


class ModelJudgement(_Frozen):
    """What a model check returned: a verdict and its reasons, parsed strictly from the model's text."""

    verdict: CheckVerdict
    detail: str = Field(default="", max_length=2000)


class ModelCheck(Protocol):
    """A semantic check backed by a model. Its answer is coerced: only PASS, FAIL or UNKNOWN survive."""

    name: str

    def judge(self, artifact: ArtifactVersion, context: CheckContext) -> ModelJudgement | Mapping[str, Any] | str:
        """Judge the artifact; the answer is parsed into a verdict, and anything unparsable is UNKNOWN."""


def run_model_check(check: ModelCheck, artifact: ArtifactVersion, ctx: CheckContext) -> CheckResult:
    """Run ``check``; an exception, an unknown verdict or a malformed answer is UNKNOWN, never PASS."""
    try:
        raw = check.judge(artifact, ctx)
    except Exception as exc:  # a failing judge says nothing about the artifact
        code = getattr(exc, "code", None)  # a named error says why (e.g. BUDGET_EXCEEDED: the call was not made)
        why = type(exc).__name__ if code is None else f"{code}: {str(exc)[:500]}"
        return CheckResult(name=check.name, verdict=CheckVerdict.UNKNOWN, detail=f"model check failed: {why}")
    judgement = _coerce(raw)
    if judgement is None:
        return CheckResult(name=check.name, verdict=CheckVerdict.UNKNOWN, detail="unrecognised model verdict")
    return CheckResult(name=check.name, verdict=judgement.verdict, detail=judgement.detail)


def _coerce(raw: object) -> ModelJudgement | None:
    if isinstance(raw, ModelJudgement):
        return raw
    if isinstance(raw, str):
        word = raw.strip().upper()
        return ModelJudgement(verdict=CheckVerdict(word)) if word in CheckVerdict.__members__ else None
    if isinstance(raw, Mapping):
        try:
            return ModelJudgement.model_validate(dict(raw))
        except ValidationError:
            return None
    return None


# --------------------------------------------------------------------------- suites


@dataclass(frozen=True)
class CheckSuite:
    """The required checks for one kind of artifact: run together, every time, on every version."""

    context: CheckContext
    checks: tuple[CheckFn, ...] = DEFAULT_CHECKS
    model_checks: tuple[ModelCheck, ...] = field(default=())

    def run(self, artifact: ArtifactVersion) -> tuple[CheckResult, ...]:
        """Run every rule check and model check on the artifact, in order."""
        results = [check(artifact, self.context) for check in self.checks]
        results += [run_model_check(m, artifact, self.context) for m in self.model_checks]
        return tuple(results)


def failures(results: Iterable[CheckResult]) -> tuple[CheckResult, ...]:
    """Results that are not PASS (FAIL and UNKNOWN alike)."""
    return tuple(r for r in results if r.verdict is not CheckVerdict.PASS)
