"""The payment case's program checks on its intermediate artifacts: what an item says must agree with what
its tools recorded in this run.

A worker that writes ``breaking-changes`` with a count it never read, or a coverage check claiming 12 of 12
repositories accessible when the run's access checks found 11, writes an artifact of the right type; these
checks are what refuse it (registered per artifact type in ``PlanRunConfig.checks``). Each reads only the
artifact, the evidence it cites and the run's recorded observations - never the fixtures behind the tools.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from stateward.verify import (
    ArtifactCheck,
    ArtifactCheckInput,
    AuthorityConflict,
    CheckResult,
    CheckVerdict,
    SourceStatement,
    named_evidence,
    verdict_of,
)

ACCESSIBLE: Final = "ACCESSIBLE"


def cited_ids_recorded(given: ArtifactCheckInput) -> CheckResult:
    """Every evidence id the artifact names in its content was returned by a tool call of this run."""
    named = list(dict.fromkeys(named_evidence(given.data)))
    unknown = [e for e in named if e not in given.recorded]
    return verdict_of(
        "evidence_ids_recorded",
        [f"evidence id {e!r} was never returned by a tool call of this run" for e in unknown],
        f"{len(named)} evidence ids, all recorded",
    )


def _listed(data: Any, key: str) -> list[Any]:
    value = data.get(key) if isinstance(data, dict) else None
    return value if isinstance(value, list) else []


def count_matches(list_key: str) -> ArtifactCheck:
    """The artifact's stated ``count`` equals the entries it lists under ``list_key``."""

    def stated_count_matches_entries(given: ArtifactCheckInput) -> CheckResult:
        data = given.data
        count = data.get("count") if isinstance(data, dict) else None
        entries = _listed(data, list_key)
        findings = [] if count == len(entries) else [f"count says {count!r}, {len(entries)} {list_key} listed"]
        return verdict_of("stated_count_matches_entries", findings, f"{len(entries)} {list_key}")

    return stated_count_matches_entries


def breaking_changes_match_sources(given: ArtifactCheckInput) -> CheckResult:
    """Every listed change is cited by a section of a document the artifact cites as read (a ``get_document``
    result), with the same change id; and the count is the number of change sections those reads returned."""
    name = "changes_match_cited_documents"
    sections: dict[str, Mapping[str, Any]] = {}
    for obs in given.cited("get_document"):
        result = obs.result if isinstance(obs.result, dict) else {}
        for section in result.get("sections") or ():
            fields = section.get("fields") if isinstance(section, dict) else None
            if isinstance(fields, dict) and "change_id" in fields:
                sections[str(section.get("evidence_id"))] = fields
    if not sections:
        return verdict_of(name, ["the artifact cites no document read that lists a breaking change"])
    findings: list[str] = []
    changes = _listed(given.data, "changes")
    for change in changes:
        if not isinstance(change, dict):
            findings.append("a change that is not an object")
            continue
        source = sections.get(str(change.get("evidence_id")))
        if source is None:
            findings.append(f"change {change.get('change_id')!r} cites no section of a cited document read")
        elif source.get("change_id") != change.get("change_id"):
            findings.append(f"change {change.get('change_id')!r} cites the section of {source.get('change_id')!r}")
    count = given.data.get("count") if isinstance(given.data, dict) else None
    if count != len(sections):
        findings.append(f"count says {count!r}; the cited documents list {len(sections)} breaking changes")
    return verdict_of(name, findings, f"{len(changes)} changes, each cited")


def _access_results(given: ArtifactCheckInput) -> dict[str, str]:
    """Repository -> status, from every access check this run recorded (the latest one per repository)."""
    out: dict[str, str] = {}
    for result in given.recorded_results("check_repository_access"):
        if isinstance(result, dict) and isinstance(result.get("repository"), str):
            out[result["repository"]] = str(result.get("status"))
    return out


def coverage_matches_access_checks(given: ArtifactCheckInput) -> CheckResult:
    """The coverage check's accessible count and its not-accessible list are what the run's access checks
    found; what it analysed is at most what was accessible, and its ratio is analysed / accessible."""
    name = "coverage_matches_access_checks"
    access = _access_results(given)
    if not access:
        return CheckResult(name=name, verdict=CheckVerdict.UNKNOWN, detail="no access check recorded in this run")
    data = given.data if isinstance(given.data, dict) else {}
    accessible = sum(1 for s in access.values() if s == ACCESSIBLE)
    closed = sorted(r for r, s in access.items() if s != ACCESSIBLE)
    findings: list[str] = []
    if data.get("accessible") != accessible:
        findings.append(f"accessible says {data.get('accessible')!r}; the run's access checks found {accessible}")
    if sorted(map(str, _listed(data, "not_accessible"))) != closed:
        findings.append(f"not_accessible says {_listed(data, 'not_accessible')}; the access checks found {closed}")
    analysed = data.get("analysed")
    if not isinstance(analysed, int) or isinstance(analysed, bool) or not 0 <= analysed <= accessible:
        findings.append(f"analysed {analysed!r} is not a count of at most {accessible} accessible repositories")
    elif accessible and abs(float(data.get("ratio", -1)) - analysed / accessible) > 1e-9:
        findings.append(f"ratio says {data.get('ratio')!r}; analysed / accessible is {analysed / accessible:.4f}")
    return verdict_of(name, findings, f"{accessible} accessible, {len(closed)} not")


def inventory_matches_listing(given: ArtifactCheckInput) -> CheckResult:
    """The inventory lists the repositories the run's listing returned, and counts the accessible ones as the
    run's access checks found them."""
    name = "inventory_matches_listing"
    listings = given.recorded_results("list_repositories")
    if not listings or not isinstance(listings[-1], dict):
        return CheckResult(name=name, verdict=CheckVerdict.UNKNOWN, detail="no repository listing recorded")
    listed = [r.get("name") for r in listings[-1].get("repositories") or () if isinstance(r, dict)]
    data = given.data if isinstance(given.data, dict) else {}
    rows = [r.get("name") for r in _listed(data, "repositories") if isinstance(r, dict)]
    access = _access_results(given)
    accessible = sum(1 for r in listed if access.get(str(r)) == ACCESSIBLE)
    findings: list[str] = []
    if sorted(map(str, rows)) != sorted(map(str, listed)) or data.get("found") != len(listed):
        findings.append(f"lists {len(rows)} (found {data.get('found')!r}); the run's listing returned {len(listed)}")
    if data.get("accessible") != accessible:
        findings.append(f"accessible says {data.get('accessible')!r}; the run's access checks found {accessible}")
    return verdict_of(name, findings, f"{len(listed)} repositories, {accessible} accessible")


def official_rules_agree(given: ArtifactCheckInput) -> CheckResult:
    """The official documents the artifact cites as read state one value per rule. Two that disagree are a
    CONFLICT no rewrite can settle (the result names both sources and their statements), unless a person
    already chose the source that holds for that rule (``chosen_sources``, a recorded fact of the run)."""
    name = "official_rules_agree"
    said: dict[str, dict[str, SourceStatement]] = {}
    for obs in given.cited("get_document"):
        result = obs.result if isinstance(obs.result, dict) else {}
        if result.get("authority") != "official":
            continue
        for section in result.get("sections") or ():
            fields = section.get("fields") if isinstance(section, dict) else None
            if isinstance(fields, dict) and "rule" in fields:
                statement = SourceStatement(
                    source=str(result.get("doc_id")),
                    evidence_id=str(section.get("evidence_id")),
                    statement=f"{fields['rule']} = {fields.get('value')}",
                )
                said.setdefault(str(fields["rule"]), {}).setdefault(statement.source, statement)
    settled: list[str] = []
    for rule, by_source in sorted(said.items()):
        values = {s.statement for s in by_source.values()}
        if len(values) < 2:
            continue
        chosen = given.chosen_sources.get(rule)
        if chosen in by_source:
            settled.append(f"{rule}: {chosen} holds (a person's choice)")
            continue
        first, second = list(by_source.values())[:2]
        detail = f"official sources disagree on {rule}: {first.source} vs {second.source}"
        conflict = AuthorityConflict(key=rule, statements=(first, second))
        findings = (f"{s.source} ({s.evidence_id}): {s.statement}" for s in (first, second))
        return CheckResult(
            name=name, verdict=CheckVerdict.FAIL, detail=detail, findings=tuple(findings), conflict=conflict
        )
    return verdict_of(name, [], "; ".join(settled) or f"{len(said)} rules, each stated one way")


def payment_checks(authorities: bool = False) -> dict[str, Sequence[ArtifactCheck]]:
    """The checks the payment case registers, per artifact type (every one also checks its evidence ids).
    ``authorities``: also check that the official sources W05 read agree on every rule they state."""
    return {
        **({"migration-sources": (official_rules_agree,)} if authorities else {}),
        "repository-inventory": (cited_ids_recorded, inventory_matches_listing),
        "effective-scope": (cited_ids_recorded,),
        "breaking-changes": (cited_ids_recorded, count_matches("changes"), breaking_changes_match_sources),
        "breaking-changes-check": (cited_ids_recorded,),
        "direct-call-sites": (cited_ids_recorded, count_matches("call_sites")),
        "indirect-api-usage": (cited_ids_recorded, count_matches("usages")),
        "coverage-check": (coverage_matches_access_checks,),
        "test-gaps": (cited_ids_recorded,),
        "risk-matrix": (cited_ids_recorded,),
        "risk-review": (cited_ids_recorded,),
    }
