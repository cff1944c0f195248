"""What a partial delivery and a handoff package say beyond the states (source 13, 14.1): the conclusions that
were verified and what they rest on, what continuing needs (every exhausted budget dimension named), and the
impact of stopping here. Read from the memo; deciding nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from stateward.controllers.plan_run.memo import PlanRunMemo
from stateward.controllers.plan_run.services import Services
from stateward.planning.budget import DIMENSIONS, BudgetAmount, BudgetLedger
from stateward.planning.delivery import Conclusion, Confidence, FindingRisk
from stateward.planning.patch import WorkItemState
from stateward.planning.plan import RiskLevel

_RISK = {RiskLevel.LOW: FindingRisk.LOW, RiskLevel.MEDIUM: FindingRisk.MEDIUM, RiskLevel.HIGH: FindingRisk.HIGH}


def _amount(value: float) -> str:
    return f"{value:g}"


def conclusions(memo: PlanRunMemo) -> tuple[tuple[Conclusion, ...], tuple[str, ...]]:
    """Each verified item's accepted artifact as a conclusion, at its item's risk, citing the evidence it
    was accepted on; and what cannot be delivered as verified: a high-risk artifact accepted without
    evidence (its item declared none needed) is stated as undecidable, never as a verified conclusion."""
    assert memo.plan is not None
    out: list[Conclusion] = []
    bare: list[str] = []
    for item in memo.plan.work_items:
        run = memo.items.get(item.work_item_id)
        if item.work_item_id not in memo.verified or run is None or run.output is None:
            continue
        refs = run.artifact.evidence_refs if run.artifact is not None else ()
        risk = _RISK[item.risk_level]
        if risk is FindingRisk.HIGH and not refs:
            bare.append(f"{item.work_item_id} {item.title} ({run.output}): high risk, accepted without evidence")
            continue
        out.append(
            Conclusion(
                text=f"{item.work_item_id} {item.title}: {run.output} passed its checks",
                risk=risk,
                # Checked against recorded evidence; how sure the finding itself is stays the report's to say.
                confidence=Confidence.MEDIUM,
                evidence_refs=refs,
            )
        )
    return tuple(out), tuple(bare)


def exhausted(ledger: BudgetLedger, to_continue: BudgetAmount | None) -> tuple[str, ...]:
    """Every budget dimension that is used up, or cannot carry what continuing needs, said with its figures;
    and every artifact whose reflections are spent while its item is unverified."""
    left = ledger.remaining()
    out: list[str] = []
    for d in DIMENSIONS:
        limit = ledger.limits.limit(d)
        if limit is None:
            continue
        used = getattr(ledger.used, d)
        need = 0 if to_continue is None else getattr(to_continue, d)
        available = getattr(left, d)
        if used >= limit or (available is not None and need > available):
            more = f"; continuing needs ~{_amount(need)} more" if need else ""
            out.append(f"budget {d} exhausted: {_amount(used)} of {_amount(limit)} used{more}")
    return tuple(out)


def reflections_spent(memo: PlanRunMemo, missing: Sequence[str]) -> tuple[str, ...]:
    """Artifacts of unfinished items that used every reflection the budget allows them."""
    limit = memo.ledger.limits.max_reflections_per_artifact
    if limit is None or memo.plan is None:
        return ()
    out = []
    for item in memo.plan.work_items:
        name = item.output_spec.artifact_type
        if item.work_item_id in missing and memo.ledger.reflections.get(name, 0) >= limit:
            out.append(f"budget reflections exhausted for {name}: {limit} of {limit} used")
    return tuple(out)


def impact(svc: Services, memo: PlanRunMemo, states: dict[str, WorkItemState], to_continue: BudgetAmount | None) -> str:
    """What stopping here leaves undone: the items not verified (high-risk ones named), whether the
    deliverable exists, and what the rest would cost."""
    assert memo.plan is not None
    missing = [w for w, s in states.items() if s is not WorkItemState.SUCCEEDED]
    if not missing:
        return "every work item is verified; nothing is left undone"
    high = [
        w.work_item_id for w in memo.plan.work_items if w.work_item_id in missing and w.risk_level is RiskLevel.HIGH
    ]
    parts = [f"{len(missing)} of {len(states)} work items not verified ({', '.join(missing)})"]
    if high:
        parts.append(f"high-risk items not done: {', '.join(high)}")
    deliverable = svc.config.deliverable
    if deliverable is not None:
        made = any(
            w.output_spec.artifact_type == deliverable and w.work_item_id in memo.verified for w in memo.plan.work_items
        )
        parts.append(f"the deliverable {deliverable} is {'verified' if made else 'not verified'}")
    if to_continue is not None:
        parts.append(
            f"finishing needs ~{to_continue.tool_calls} tool calls, {to_continue.model_calls} model calls, "
            f"{to_continue.tokens} tokens"
        )
    return "; ".join(parts)
