"""The scripted report writer: a migration report drafted from the outputs this run recorded.

Every number, row and evidence id comes from the verified outputs the controller hands the report item
(``facts["inputs"]``: repository inventory, breaking changes, call sites, indirect usage, test gaps, risk
matrix, source check) - nothing from the fixtures. Like a model's first draft, the first version has three
faults a reviewer would catch: it miscounts the call sites it lists, one high-risk claim cites nothing,
and it states the migration order as the only safe one. Given the verifier's correction it writes them
correctly; the rest is unchanged.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any, Final

from stateward.planning import Confidence, FindingRisk
from stateward.verify import (
    BreakingChange,
    CallSite,
    Claim,
    CoverageStatus,
    ModuleRisk,
    Report,
    ReportSection,
    RepositoryCoverage,
    StatedCounts,
)
from stateward_demos.payment.reports import OVERCERTAIN_ORDER, REQUIRED_SECTIONS, TITLE

HEDGED_ORDER: Final = "Migrate in this order:"


def _load(inputs: dict[str, Any], name: str) -> dict[str, Any]:
    raw = inputs.get(name)
    if raw is None:
        return {}
    value = json.loads(raw) if isinstance(raw, str) else raw
    return value if isinstance(value, dict) else {}


def _claims(inputs: dict[str, Any], risks: list[ModuleRisk], first_draft: bool) -> list[Claim]:
    """High-risk modules (an official guide section and the code that hits it), unreadable repositories
    (unknown, not absent) and conflicts between sources (the official ones hold)."""
    changes = {c["change_id"]: c["evidence_id"] for c in _load(inputs, "breaking-changes").get("changes", [])}
    sites = _load(inputs, "direct-call-sites").get("call_sites", [])
    claims: list[Claim] = []
    for n, module in enumerate((m for m in risks if m.risk is FindingRisk.HIGH), start=1):
        hit = sorted({s["change_id"] for s in sites if s.get("module") == module.module})
        evidence = (*(changes[c] for c in hit if c in changes), *module.evidence_ids)
        claims.append(
            Claim(
                claim_id=f"c{n}",
                text=f"{module.module} is high risk: it calls {', '.join(hit) or 'changed APIs'}",
                risk=FindingRisk.HIGH,
                confidence=Confidence.HIGH,
                evidence_ids=() if first_draft and n == 1 else evidence,
            )
        )
    for repo in _load(inputs, "repository-inventory").get("repositories", []):
        if repo.get("status") != "ACCESSIBLE":
            claims.append(
                Claim(
                    claim_id=f"gap-{repo['name']}",
                    text=f"{repo['name']} could not be analysed ({repo['reason']}); its usage is unknown, not absent",
                    risk=FindingRisk.NONE_FOUND,
                    confidence=Confidence.LOW,
                    evidence_ids=(repo["evidence_id"],),
                )
            )
    for n, conflict in enumerate(_load(inputs, "breaking-changes-check").get("conflicts", []), start=1):
        claims.append(
            Claim(
                claim_id=f"conflict-{n}",
                text=f"sources disagree on {conflict['api']} ({conflict['official']} vs {conflict['informal']}); "
                f"{conflict['resolution']}",
                risk=FindingRisk.LOW,
                confidence=Confidence.HIGH,
                evidence_ids=tuple(conflict["evidence_ids"]),
            )
        )
    return claims


def _sections(inputs: dict[str, Any], report: Report, first_draft: bool) -> tuple[ReportSection, ...]:
    inventory = _load(inputs, "repository-inventory")
    by_risk = Counter(m.risk for m in report.module_risks)
    gaps = [m["module"] for m in _load(inputs, "test-gaps").get("modules", []) if m.get("gap")]
    unreadable = [r["name"] for r in inventory.get("repositories", []) if r.get("status") != "ACCESSIBLE"]
    order = " -> ".join(m.module for m in report.module_risks)
    bodies = {
        "summary": f"{len(report.call_sites)} v1 call sites hit {len(report.breaking_changes)} breaking changes; "
        f"{by_risk[FindingRisk.HIGH]} modules are high and {by_risk[FindingRisk.MEDIUM]} medium risk.",
        "scope": f"{inventory.get('expected')} repositories in {inventory.get('group')}; "
        f"{inventory.get('accessible')} accessible.",
        "breaking_changes": "From the official migration guide: "
        + "; ".join(f"{b.change_id} {b.title}" for b in report.breaking_changes),
        "call_sites": "Direct call sites found by each breaking change's search pattern, outside tests.",
        "indirect_usage": "; ".join(
            f"{u['repository']}/{u['file']}:{u['line']} via {' -> '.join(u['call_chain'][1:2])}"
            for u in _load(inputs, "indirect-api-usage").get("usages", [])
        )
        or "none found",
        "test_gaps": "No test covers: " + (", ".join(gaps) or "none") + ".",
        "risk_matrix": "Risk per module from the rule list (compute_risk_score).",
        "migration_order": f"{OVERCERTAIN_ORDER if first_draft else HEDGED_ORDER} {order}."
        + ("" if first_draft else " Recommended from the risk ranking; confirm with the owning teams."),
        "source_conflicts": "; ".join(c.text for c in report.claims if c.claim_id.startswith("conflict-"))
        or "none found",
        "gaps": (", ".join(unreadable) + " not accessible and not analysed.") if unreadable else "none",
    }
    return tuple(
        ReportSection(section_id=s, title=s.replace("_", " ").capitalize(), body=bodies[s]) for s in REQUIRED_SECTIONS
    )


def draft_report(inputs: dict[str, Any], *, first_draft: bool) -> Report:
    """The report from this run's recorded outputs; ``first_draft`` keeps the three drafting faults."""
    inventory = _load(inputs, "repository-inventory")
    changes = _load(inputs, "breaking-changes").get("changes", [])
    sites = _load(inputs, "direct-call-sites").get("call_sites", [])
    risks = sorted(
        (
            ModuleRisk(
                module=m["module"],
                repository=m["module"].partition("/")[0],
                risk=FindingRisk(m["risk"]),
                evidence_ids=tuple(m.get("evidence_ids", [])),
            )
            for m in _load(inputs, "risk-matrix").get("modules", [])
            if m.get("risk") != FindingRisk.NONE_FOUND.value
        ),
        key=lambda m: (-m.risk.rank, m.module),
    )
    report = Report(
        title=TITLE,
        breaking_changes=tuple(
            BreakingChange(
                change_id=c["change_id"], title=f"{c['old_api']} -> {c['new_api']}", evidence_ids=(c["evidence_id"],)
            )
            for c in changes
        ),
        call_sites=tuple(
            CallSite(
                call_site_id=f"cs-{i:02d}",
                repository=s["repository"],
                module=s.get("module") or "",
                location=f"{s['file']}:{s['line']}",
                evidence_ids=(s["evidence_id"],),
            )
            for i, s in enumerate(sites, start=1)
        ),
        module_risks=tuple(risks),
        coverage=tuple(
            RepositoryCoverage(repository=r["name"], status=CoverageStatus.ANALYZED)
            if r.get("status") == "ACCESSIBLE"
            else RepositoryCoverage(
                repository=r["name"], status=CoverageStatus.NOT_ACCESSIBLE, note=r.get("reason", "")
            )
            for r in inventory.get("repositories", [])
        ),
        stated=StatedCounts(
            repositories_expected=inventory.get("expected"),
            repositories_accessible=inventory.get("accessible"),
            repositories_analyzed=inventory.get("accessible"),
            breaking_changes=len(changes),
            call_sites=len(sites) - 1 if first_draft else len(sites),
            modules_by_risk=dict(Counter(m.risk for m in risks)),
        ),
    )
    report = report.model_copy(update={"claims": tuple(_claims(inputs, risks, first_draft))})
    return report.model_copy(update={"sections": _sections(inputs, report, first_draft)})
