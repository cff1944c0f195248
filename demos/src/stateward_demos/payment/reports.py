"""The migration-assessment reports of the scenario: v1 (as first drafted) and v2 (after one repair).

Both are built from :mod:`stateward_demos.payment.facts`, so every number and evidence id is what the
tools show. v1 carries the two defects ``tests/verify/conftest.py`` uses: it *states* 36 call sites while
listing 37, and its high-risk claim ``c2`` cites no evidence. v2 fixes exactly those and passes every
check in :data:`stateward.verify.DEFAULT_CHECKS` against :func:`check_context`.
"""

from __future__ import annotations

from collections import Counter
from typing import Final

from stateward.planning import Confidence, FindingRisk
from stateward.verify import (
    ArtifactVersion,
    BreakingChange,
    CallSite,
    CheckContext,
    Claim,
    CoverageStatus,
    ModuleRisk,
    Report,
    ReportSection,
    RepositoryCoverage,
    StatedCounts,
)
from stateward_demos.payment import facts
from stateward_demos.payment import fixtures as fx
from stateward_demos.payment.risk import score

TITLE: Final = "Payment SDK v2 migration assessment"
ARTIFACT: Final = "migration-assessment"
# The seven sections of tests/verify/conftest.py, plus the three the plan's "10 required sections" adds.
REQUIRED_SECTIONS: Final[tuple[str, ...]] = (
    "summary",
    "scope",
    "breaking_changes",
    "call_sites",
    "indirect_usage",
    "test_gaps",
    "risk_matrix",
    "migration_order",
    "source_conflicts",
    "gaps",
)


def _guide(section: str) -> str:
    return facts.doc_evidence_id(fx.GUIDE_ID, section)


def _notes(section: str) -> str:
    return facts.doc_evidence_id(fx.RELEASE_NOTES_ID, section)


def _site_evidence(module: str, change_id: str) -> str:
    return next(
        c.hit.evidence_id for c in facts.direct_call_sites() if c.hit.module == module and c.change_id == change_id
    )


def _module_risks() -> list[ModuleRisk]:
    risks = []
    for module in facts.known_modules():
        risk = score(facts.risk_inputs(module)).risk
        if risk is not FindingRisk.NONE_FOUND:
            risks.append(
                ModuleRisk(
                    module=module,
                    repository=module.partition("/")[0],
                    risk=risk,
                    evidence_ids=facts.module_call_site_evidence(module),
                )
            )
    return sorted(risks, key=lambda m: (-m.risk.rank, m.module))


def _claims() -> list[Claim]:
    wrapper_users = [u.hit.evidence_id for u in facts.indirect_usages() if u.via == "payments-core/gateway"]
    return [
        Claim(
            claim_id="c1",
            text="payments-core must migrate first: its gateway wrapper hits 7 of the 8 breaking changes "
            "and merchant-portal and admin-console reach paysdk through it",
            risk=FindingRisk.HIGH,
            confidence=Confidence.HIGH,
            evidence_ids=(_guide("checklist"), _site_evidence("payments-core/gateway", "BC1"), *wrapper_users),
        ),
        Claim(
            claim_id="c2",
            text="refund flow uses the removed sync capture API and no test covers it",
            risk=FindingRisk.HIGH,
            confidence=Confidence.HIGH,
            evidence_ids=(_guide("bc2"), _notes("removed"), _site_evidence("refund-service/refund", "BC2")),
        ),
        Claim(
            claim_id="c3",
            text="billing-worker could not be analysed (no read access); its usage is unknown, not absent",
            risk=FindingRisk.NONE_FOUND,
            confidence=Confidence.LOW,
            evidence_ids=(facts.access_evidence_id(fx.NO_ACCESS_REPO),),
        ),
        Claim(
            claim_id="c4",
            text="the engineering blog says capture_sync survives in v2; the official guide and release notes "
            "say it is removed, and the report follows the official sources",
            risk=FindingRisk.LOW,
            confidence=Confidence.HIGH,
            evidence_ids=(facts.doc_evidence_id(fx.BLOG_ID, "capture"), _guide("bc2"), _notes("removed")),
        ),
    ]


def _sections(modules: list[ModuleRisk]) -> list[ReportSection]:
    sites = facts.direct_call_sites()
    by_risk = Counter(m.risk for m in modules)
    gaps = [m for m in modules if m.risk is not FindingRisk.LOW and facts.risk_inputs(m.module).covering_tests == 0]
    order = [m.module for m in modules]
    bodies = {
        "summary": f"{len(sites)} v1 call sites in {len({m.repository for m in modules})} repositories hit the "
        f"{len(facts.breaking_changes())} breaking changes; {by_risk[FindingRisk.HIGH]} modules are high and "
        f"{by_risk[FindingRisk.MEDIUM]} medium risk.",
        "scope": f"{len(fx.REPOSITORIES)} repositories in {fx.GROUP}; {len(facts.accessible_repositories())} "
        f"accessible; documentation spaces: {', '.join(fx.SPACES)}.",
        "breaking_changes": "BC1-BC8 from the official migration guide; each lists old API, new API and behaviour.",
        "call_sites": "Direct call sites found by each breaking change's search pattern, outside tests.",
        "indirect_usage": "; ".join(
            f"{u.hit.repository}/{u.hit.path}:{u.hit.line} via {u.via}" for u in facts.indirect_usages()
        ),
        "test_gaps": "No test covers: " + ", ".join(m.module for m in gaps) + ".",
        "risk_matrix": "Risk per module from the rule list H1, H2, M1, M2, L1 (compute_risk_score).",
        "migration_order": "Migrate in this order: " + " -> ".join(order) + ".",
        "source_conflicts": "The engineering blog (2025-09-02) contradicts the official guide on capture_sync; "
        "the guide and release notes are authoritative.",
        "gaps": f"{fx.NO_ACCESS_REPO} was not accessible and is not analysed.",
    }
    return [
        ReportSection(section_id=s, title=s.replace("_", " ").capitalize(), body=bodies[s]) for s in REQUIRED_SECTIONS
    ]


def report_v2() -> Report:
    """The repaired report: every stated number matches what it lists and every claim cites evidence."""
    sites = facts.direct_call_sites()
    modules = _module_risks()
    by_risk = Counter(m.risk for m in modules)
    return Report(
        title=TITLE,
        sections=tuple(_sections(modules)),
        claims=tuple(_claims()),
        breaking_changes=tuple(
            BreakingChange(
                change_id=bc.fields["change_id"],
                title=f"{bc.fields['old_api']} -> {bc.fields['new_api']}",
                evidence_ids=(_guide(bc.section_id),)
                + ((_notes("removed"),) if bc.fields["change_type"] == "removed" else ()),
            )
            for bc in facts.breaking_changes()
        ),
        call_sites=tuple(
            CallSite(
                call_site_id=f"cs-{i:02d}",
                repository=c.hit.repository,
                module=c.hit.module or "",
                location=f"{c.hit.path}:{c.hit.line}",
                evidence_ids=(c.hit.evidence_id,),
            )
            for i, c in enumerate(sites, start=1)
        ),
        module_risks=tuple(modules),
        coverage=tuple(
            RepositoryCoverage(repository=r, status=CoverageStatus.NOT_ACCESSIBLE, note=fx.NO_ACCESS_REASON)
            if r == fx.NO_ACCESS_REPO
            else RepositoryCoverage(repository=r, status=CoverageStatus.ANALYZED)
            for r in fx.REPOSITORIES
        ),
        stated=StatedCounts(
            repositories_expected=len(fx.REPOSITORIES),
            repositories_accessible=len(facts.accessible_repositories()),
            repositories_analyzed=len(facts.accessible_repositories()),
            breaking_changes=len(facts.breaking_changes()),
            call_sites=len(sites),
            modules_by_risk=dict(by_risk),
        ),
    )


# The first draft's wording: an ordering presented as the only safe one (the semantic check's finding).
OVERCERTAIN_ORDER = "Migrate in exactly this order; any other order will break payments:"


def report_v1() -> Report:
    """The first draft: states 36 call sites (37 listed), claim c2 (high risk) cites no evidence, and the
    migration order is stated as the only safe one."""
    v2 = report_v2()
    claims = tuple(c.model_copy(update={"evidence_ids": ()}) if c.claim_id == "c2" else c for c in v2.claims)
    stated = v2.stated.model_copy(update={"call_sites": len(v2.call_sites) - 1})
    sections = tuple(
        s.model_copy(update={"body": s.body.replace("Migrate in this order:", OVERCERTAIN_ORDER)})
        if s.section_id == "migration_order"
        else s
        for s in v2.sections
    )
    return v2.model_copy(update={"claims": claims, "stated": stated, "sections": sections})


def artifact_v1() -> ArtifactVersion:
    return ArtifactVersion.create(ARTIFACT, report_v1())


def artifact_v2() -> ArtifactVersion:
    """v2 as the repair of v1: a new version with its own hash and ``parent`` = ``migration-assessment:v1``."""
    return artifact_v1().next_version(report_v2())


def check_context() -> CheckContext:
    """What the checks compare a report with: the fixtures' evidence, the 12 in-scope repos, the sections."""
    return CheckContext.build(facts.all_evidence(), in_scope=fx.REPOSITORIES, required_sections=REQUIRED_SECTIONS)
