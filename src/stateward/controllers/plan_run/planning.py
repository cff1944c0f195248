"""Planning a plan run: research until the readiness contract holds, the plan the validator accepts,
and plan patches (replans) when the plan stalls or a measured fact changed what it assumed."""

from __future__ import annotations

from typing import Any

from stateward.controllers.base import provider_rejection
from stateward.controllers.plan_run import facts as view
from stateward.controllers.plan_run.memo import (
    ITEM_INSTRUCTIONS,
    PLAN_INSTRUCTIONS,
    PLAN_REVISIONS,
    PlanRunMemo,
    tokens_of,
)
from stateward.controllers.plan_run.services import DecideAgain, Reschedule, Services
from stateward.controllers.plan_support import (
    READINESS_TOOL,
    evidence_ids,
)
from stateward.controllers.replies import document_request
from stateward.core.contract import DecisionContext, OutcomeStatus, Proposal
from stateward.core.decision import ControlDecision, DecisionType, SignalSource
from stateward.core.errors import ErrorCode, RunError
from stateward.core.events import EventType, NewEvent
from stateward.core.model_io import ReplyContract
from stateward.models.base import ModelReply, Usage, complete
from stateward.planning.budget import BudgetAmount
from stateward.planning.patch import (
    PlanPatch,
    PlanPatchError,
    WorkItemState,
    apply_patch,
    load_patch,
)
from stateward.planning.plan import Plan, load_plan
from stateward.planning.readiness import evaluate_readiness, parse_evidence
from stateward.planning.stages import RunStage
from stateward.planning.validator import Verdict, validate_plan


def make_plan(svc: Services, ctx: DecisionContext, memo: PlanRunMemo) -> Proposal | DecideAgain:
    """The planner proposes; the validator decides. A REVISE verdict goes back to the planner with its
    issues, at most PLAN_REVISIONS times; a REJECT, or a plan still not accepted, is refused - never run."""
    usages: list[Usage] = []
    issues: list[dict[str, Any]] = []
    memo.enter(RunStage.PLAN, ctx.state.usage.steps + 1)
    for round_ in range(1 + PLAN_REVISIONS):
        reply = complete(
            svc.planner,
            document_request(
                ReplyContract.PLAN_DOCUMENT,
                purpose="plan",
                goal=svc.config.goal.objective,
                inventory=list(ctx.inventory),
                visible_actions=ctx.specs(tuple(ctx.actions)),
                facts={"goal": svc.config.goal.model_dump(mode="json"), "validator_issues": issues},
                instructions=PLAN_INSTRUCTIONS,
            ),
        )
        usages.append(reply.usage)
        rejected = provider_rejection(reply)
        if rejected is not None:
            return view.refused(rejected.code, rejected.message, reply.text, *usages)
        try:
            plan = load_plan(reply.text)
        except RunError as exc:
            return view.refused(exc.code, exc.message, reply.text, *usages)
        remaining = memo.ledger.remaining().to_plan_budget()
        report = validate_plan(
            plan, capabilities=svc.config.capabilities or set(ctx.actions), budget=remaining, goal=svc.config.goal
        )
        if report.verdict is Verdict.ACCEPT:
            break
        if report.verdict is Verdict.REJECT or round_ == PLAN_REVISIONS:
            found = "; ".join(f"{i.code}({i.work_item_id})" for i in report.issues[:5])
            return view.refused(f"PLAN_{report.verdict.value}", found, reply.text, *usages)
        issues = [i.model_dump(mode="json") for i in report.issues[:20]]
    memo.plan = plan
    memo.enter(RunStage.VALIDATE_PLAN, ctx.state.usage.steps + 1)  # the validator accepted it
    tokens = sum(tokens_of(u) for u in usages)
    memo.ledger = memo.ledger.charge(BudgetAmount(model_calls=len(usages), tokens=tokens))
    note = NewEvent(
        type=EventType.PLAN_RECORDED,
        payload={
            "plan_id": plan.plan_id,
            "plan_version": plan.version,
            "work_items": len(plan.work_items),
            "validator": report.verdict.value,
            "revisions": len(usages) - 1,
        },
    )
    return DecideAgain([note], tuple(usages))


def ready(svc: Services, ctx: DecisionContext, memo: PlanRunMemo) -> bool:
    """Computed over the latest submitted evidence and the evidence the run really recorded."""
    contract = svc.config.readiness
    assert contract is not None
    submitted = [o for o in ctx.observations if o.action == READINESS_TOOL and o.status == OutcomeStatus.SUCCESS]
    if not submitted:
        return False
    recorded = frozenset(e for o in ctx.observations for e in evidence_ids(o.result))
    verdict = evaluate_readiness(contract, parse_evidence(str(submitted[-1].args.get("evidence", ""))), recorded)
    return verdict.ready


def research(svc: Services, ctx: DecisionContext, memo: PlanRunMemo) -> Proposal:
    contract = svc.config.readiness
    assert contract is not None
    if memo.research_steps >= svc.config.max_research_steps:
        decision = ControlDecision(type=DecisionType.FAIL, reason="readiness_not_reached")
        return view.propose(svc, decision, memo, [])
    memo.research_steps += 1
    submitted = [o for o in ctx.observations if o.action == READINESS_TOOL and o.status == OutcomeStatus.SUCCESS]
    gaps = None
    if submitted:
        recorded = frozenset(e for o in ctx.observations for e in evidence_ids(o.result))
        verdict = evaluate_readiness(contract, parse_evidence(str(submitted[-1].args.get("evidence", ""))), recorded)
        gaps = verdict.model_dump(mode="json")
    visible = (*(t for t in svc.config.research_tools if t in ctx.actions), READINESS_TOOL)
    reply = complete(
        svc.worker,
        ctx.request(
            purpose="decide",
            contract=ReplyContract.DECISION,
            goal=f"research for {contract.stage}: {svc.config.goal.objective}",
            inventory=list(ctx.inventory),
            visible_actions=ctx.specs(visible),
            facts={"readiness_contract": contract.model_dump(mode="json"), "readiness_gaps": gaps},
            instructions=ITEM_INSTRUCTIONS,
        ),
    )
    memo.ledger = memo.ledger.charge(BudgetAmount(model_calls=1, tokens=tokens_of(reply.usage)))
    note = NewEvent(type=EventType.READINESS_EVALUATED, payload={"stage": contract.stage, "verdict": gaps})
    return Proposal(
        signal=reply.text,
        source=SignalSource.MODEL,
        visible_actions=frozenset(visible),
        model_usage=(reply.usage,),
        memo=svc.seals.write(memo),
        notes=[note],
    )


def replan(
    svc: Services, ctx: DecisionContext, memo: PlanRunMemo, notes: list[NewEvent], states: dict[str, WorkItemState]
) -> DecideAgain | Usage | None:
    """Ask the planner for a patch when the plan cannot go on: the next step on the new plan; None when no
    replan is left; the planner call's usage when the patch was refused.

    A refused patch is recorded and did not help: the caller goes on to what a stuck plan gets without one
    (a handoff to a person), never a partial delivery decided by the planner's failure.
    """
    failed = {
        w: [a.error_class for a in memo.items[w].attempts]
        for w, s in states.items()
        if s in (WorkItemState.FAILED, WorkItemState.BLOCKED) and w in memo.items
    }
    attempt = patch(svc, ctx, memo, notes, {"failed": failed})
    if attempt is None:
        return None
    error, usage = attempt
    if error is not None:
        return usage  # the refused patch's model call, for the step that goes on without it
    return DecideAgain(notes, (usage,))


def replan_on_new_facts(
    svc: Services, ctx: DecisionContext, memo: PlanRunMemo, notes: list[NewEvent]
) -> DecideAgain | Reschedule | None:
    """A measured fact changed what the plan assumed (e.g. a repository turned out unreadable): the planner
    may patch the plan once per new fact. A refused patch is recorded and the plan in hand goes on."""
    new = [u for u in memo.measurement.unresolved if u not in memo.patched_for]
    if not new or memo.running:
        return None
    memo.patched_for.extend(new)
    attempt = patch(svc, ctx, memo, notes, {"new_facts": new})
    if attempt is None:
        return None
    error, usage = attempt
    if error is not None:
        return Reschedule(usage)
    return DecideAgain(notes, (usage,))


def patch(
    svc: Services, ctx: DecisionContext, memo: PlanRunMemo, notes: list[NewEvent], why: dict[str, Any]
) -> tuple[str | None, Usage] | None:
    """Ask the planner for a patch and apply it if it holds: (None, usage) when it became the new plan
    version, (reason, usage) when it was refused, None when no replan is left.

    A patch must name a reason other than a transient failure, cite evidence, keep every succeeded
    item, pass the validator and fit ``max_replans``; approvals bound to the old version do not carry
    over to a changed item, because its guard names the plan version.
    """
    plan = memo.plan
    assert plan is not None
    limit = memo.ledger.limits.max_replans
    if not limit or memo.ledger.used.replans >= limit:
        return None
    reply = complete(
        svc.planner,
        document_request(
            ReplyContract.PLAN_PATCH,
            purpose="replan",
            goal=svc.config.goal.objective,
            inventory=list(ctx.inventory),
            observations=[o.model_dump(mode="json") for o in ctx.observations[-20:]],
            visible_actions=ctx.specs(tuple(ctx.actions)),
            facts={"plan": plan.model_dump(mode="json"), **why, "verified": list(memo.verified)},
            instructions="Reply with one JSON plan patch: base_version, reason, evidence_ids, changed/added/"
            "removed items and kept_completed.",
        ),
    )
    memo.ledger = memo.ledger.charge(BudgetAmount(replans=1, model_calls=1, tokens=tokens_of(reply.usage)))
    try:
        change, new_plan = checked_patch(svc, ctx, memo, plan, reply, limit)
    except RunError as exc:
        notes.append(
            NewEvent(
                type=EventType.PLAN_RECORDED,
                payload={"refused_patch": exc.code, "message": exc.message, "plan_version": plan.version},
            )
        )
        return exc.message, reply.usage
    adopt(ctx, memo, change, new_plan, notes)
    return None, reply.usage


def checked_patch(
    svc: Services, ctx: DecisionContext, memo: PlanRunMemo, plan: Plan, reply: ModelReply, limit: int
) -> tuple[PlanPatch, Plan]:
    """The planner's patch and the plan it makes, once it holds (PlanPatchError, or the RunError that
    refused it, otherwise)."""
    if reply.rejection_code is not None:
        raise PlanPatchError(
            reply.rejection_message or reply.rejection_code, code=ErrorCode.parse(reply.rejection_code)
        )
    patch = load_patch(reply.text)
    new_plan = apply_patch(plan, patch, set(memo.verified), memo.ledger.used.replans - 1, limit)
    report = validate_plan(
        new_plan,
        capabilities=svc.config.capabilities or set(ctx.actions),
        goal=svc.config.goal,
        completed=memo.verified,
        budget=memo.ledger.remaining().to_plan_budget(),
    )
    if report.verdict is not Verdict.ACCEPT:
        raise PlanPatchError(
            f"patched plan is {report.verdict.value}: "
            + "; ".join(f"{i.code}({i.work_item_id})" for i in report.issues[:5])
        )
    return patch, new_plan


def adopt(ctx: DecisionContext, memo: PlanRunMemo, patch: PlanPatch, new_plan: Plan, notes: list[NewEvent]) -> None:
    """The patched plan becomes the run's plan: redefined items start afresh, the stall window and the
    failures seen so far are the old plan's."""
    redefined = {w.work_item_id for w in (*patch.changed_items, *patch.added_items)} | set(patch.removed_items)
    memo.items = {w: run for w, run in memo.items.items() if w not in redefined}
    memo.plan = new_plan
    memo.enter(RunStage.PLAN, ctx.state.usage.steps + 1)
    memo.enter(RunStage.VALIDATE_PLAN, ctx.state.usage.steps + 1)  # a patch holds only once validated
    memo.history.clear()
    memo.failures.clear()
    notes.append(
        NewEvent(
            type=EventType.PLAN_RECORDED,
            payload={
                "plan_id": new_plan.plan_id,
                "plan_version": new_plan.version,
                "base_version": patch.base_version,
                "reason": patch.reason.value,
                "evidence_ids": list(patch.evidence_ids),
                "kept_completed": list(patch.kept_completed),
                "summary": patch.summary,
                "work_items": len(new_plan.work_items),
                "validator": "ACCEPT",
            },
        )
    )
