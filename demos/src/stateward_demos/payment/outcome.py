"""The payment goal's metrics, measured from what the run recorded, and the final summary read from the store.

:func:`measure` is the goal's measuring function: it reads only verified outputs and the evidence ids the
run's tool calls returned, never the fixtures, so a run that did not read something cannot claim it.
:func:`final_summary` is the source's final state (status, completion mode, plan version, coverage,
unresolved issues, final artifact) plus the case's counts, each read back from a recorded artifact.
"""

from __future__ import annotations

import json
from typing import Any

from stateward import RunState, Runtime
from stateward.planning import EvidenceRequirement, GoalContract, MeasureInput, Measurement

INVENTORY = "repository-inventory"
USAGE = "api-usage-inventory"
SOURCES = "migration-sources"
CHANGES = "breaking-changes"
DIRECT = "direct-call-sites"
INDIRECT = "indirect-api-usage"
RISK = "risk-matrix"
REPORT = "migration-assessment"
# Verified outputs that are confirmed fact lists: enough for the FACTS_AND_RISK_CANDIDATES rung.
FACT_ARTIFACTS = frozenset({INVENTORY, CHANGES, DIRECT, INDIRECT, USAGE})


def _load(outputs: dict[str, str], name: str) -> Any:
    text = outputs.get(name)
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def _is_authoritative(evidence_id: str, official_docs: frozenset[str]) -> bool:
    return evidence_id.startswith("ev:doc:") and evidence_id[len("ev:doc:") :].split("#", 1)[0] in official_docs


def unsupported_claims(
    report: Any, requirement: EvidenceRequirement, official_docs: frozenset[str], recorded: frozenset[str]
) -> int:
    """High-risk claims whose *recorded* evidence does not meet the requirement: at least N authoritative
    sources (an official document section) and M independent ones (any other recorded source, e.g. code)."""
    count = 0
    for claim in report.get("claims", []) if isinstance(report, dict) else []:
        if claim.get("risk") != "high":
            continue
        cited = [e for e in claim.get("evidence_ids", []) if e in recorded]
        authoritative = sum(1 for e in cited if _is_authoritative(e, official_docs))
        independent = len(cited) - authoritative
        if authoritative < requirement.min_authoritative_sources or independent < requirement.min_independent_sources:
            count += 1
    return count


def make_measure(goal: GoalContract) -> Any:
    """The goal's measuring function, reading its evidence requirement for high-risk claims from the contract."""
    requirement = next(
        (r for r in goal.evidence_requirements if r.applies_to == "high_risk_claim"),
        EvidenceRequirement(requirement_id="default", applies_to="high_risk_claim"),
    )

    def measure(given: MeasureInput) -> Measurement:
        metrics: dict[str, float] = {}
        unresolved: list[str] = []
        inventory = _load(given.outputs, INVENTORY)
        if isinstance(inventory, dict) and inventory.get("expected"):
            metrics["accessible_repository_ratio"] = inventory["accessible"] / inventory["expected"]
            unresolved += [
                f"{r['name']}: no access ({r['reason']})"
                for r in inventory.get("repositories", [])
                if r.get("status") != "ACCESSIBLE"
            ]
            usage = _load(given.outputs, USAGE)
            if isinstance(usage, dict) and inventory.get("accessible"):
                metrics["analysed_to_accessible_ratio"] = len(usage.get("repositories", {})) / inventory["accessible"]
        sources = _load(given.outputs, SOURCES)
        official: frozenset[str] = frozenset()
        if isinstance(sources, dict):
            official = frozenset(s["doc_id"] for s in sources.get("sources", []) if s.get("authority") == "official")
            metrics["authoritative_sources"] = float(len(official))
            metrics["authority_conflicts"] = float(len(sources.get("official_conflicts", [])))
        report = _load(given.outputs, REPORT)
        if report is not None:
            metrics["unsupported_high_risk_claims"] = float(
                unsupported_claims(report, requirement, official, given.recorded_evidence)
            )
        return Measurement(metrics=metrics, unresolved=tuple(unresolved))

    return measure


def _artifact_json(runtime: Runtime, run_id: str, name: str) -> Any:
    found = [a for a in runtime.artifacts(run_id) if a.name == name]
    return json.loads(found[-1].content) if found else None


def _counts(runtime: Runtime, run_id: str) -> dict[str, Any]:
    inventory = _artifact_json(runtime, run_id, INVENTORY) or {}
    usage = _artifact_json(runtime, run_id, USAGE) or {}
    changes = _artifact_json(runtime, run_id, CHANGES) or {}
    direct = _artifact_json(runtime, run_id, DIRECT) or {}
    indirect = _artifact_json(runtime, run_id, INDIRECT) or {}
    matrix = _artifact_json(runtime, run_id, RISK) or {}
    risks = [m.get("risk") for m in matrix.get("modules", [])]
    return {
        "coverage": {
            "expected": inventory.get("expected"),
            "accessible": inventory.get("accessible"),
            "analysed": len(usage["repositories"]) if "repositories" in usage else None,
        },
        "breaking_changes": changes.get("count"),
        "call_sites": direct.get("count"),
        "indirect_usages": indirect.get("count"),
        "risk": {"high": risks.count("high"), "medium": risks.count("medium")} if matrix else None,
    }


def final_summary(runtime: Runtime, state: RunState) -> dict[str, Any]:
    """The source's final state, read back from the store: what the run recorded, not what a script meant."""
    outcome = state.memo.get("outcome") or {}
    plan = state.memo.get("plan") or {}
    pending = state.pending
    versions = [a.version for a in runtime.artifacts(state.run_id) if a.name == REPORT]
    return {
        "status": state.status.value,
        "completion_mode": outcome.get("completion_mode"),
        "rung": outcome.get("rung"),
        "plan_version": plan.get("version"),
        # The global stages the run went through (first entries, in order) and the one it is in now.
        "stages": list(dict.fromkeys(e["stage"] for e in state.memo.get("stages", []))),
        "stage": (state.memo.get("stages") or [{"stage": None}])[-1]["stage"],
        **_counts(runtime, state.run_id),
        "report_versions": [f"{REPORT}:v{v}" for v in versions],
        "final_artifact": outcome.get("final_artifact"),
        # Once delivered, the outcome's list; before that, what the measurements have found open so far.
        "unresolved_issues": list(
            outcome.get("unresolved_issues", (state.memo.get("measurement") or {}).get("unresolved", []))
        ),
        "budget_to_continue": outcome.get("budget_to_continue"),
        "pending": None
        if pending is None
        else {
            "request_id": pending.request_id,
            "kind": pending.kind.value,
            "action": None
            if pending.guarded_action is None
            else {"tool": pending.guarded_action.tool, "args": pending.guarded_action.args},
        },
    }
