"""What a plan run reads from what was recorded: work-item states, goal facts, the live ledger,
the inputs a work item is handed; and how its proposals are shaped."""

from __future__ import annotations

from stateward.controllers.plan_run.memo import (
    MAX_INPUT_CHARS,
    ItemRun,
    PlanRunMemo,
    start_item_guard,
)
from stateward.controllers.plan_run.services import Services
from stateward.controllers.plan_support import (
    content_of,
    evidence_ids,
)
from stateward.core.contract import DecisionContext, OutcomeStatus, Proposal, SignalFailure, WaitSpec
from stateward.core.decision import ControlDecision, SignalSource
from stateward.core.events import EventType, NewEvent
from stateward.models.base import Usage
from stateward.planning.budget import BudgetAmount, BudgetLedger
from stateward.planning.goal import BudgetPredicate, CriterionEffect, RunFacts, check_constraints
from stateward.planning.outcome import (
    MeasureInput,
)
from stateward.planning.patch import (
    ExecutionFacts,
    WorkItemState,
    derive_states,
)
from stateward.planning.plan import WorkItem


def facts(svc: Services, ctx: DecisionContext, memo: PlanRunMemo) -> ExecutionFacts:
    approved = set(ctx.state.granted)  # ever approved: an item stays approved after its call used the grant
    plan = memo.plan
    assert plan is not None
    gate = svc.config.approval_action or start_item_guard
    return ExecutionFacts(
        attempts={wid: tuple(run.attempts) for wid, run in memo.items.items()},
        verified=tuple(memo.verified),
        # An approval can only concern an item whose inputs exist: its dependencies are verified.
        approved=tuple(
            w.work_item_id
            for w in plan.work_items
            if w.approval_required and set(w.dependencies) <= set(memo.verified) and gate(w, memo).digest in approved
        ),
        remaining_budget=memo.ledger.remaining().to_plan_budget(),
        authorized_attempts=dict(memo.authorized_attempts),
    )


def goal_facts(svc: Services, ctx: DecisionContext, memo: PlanRunMemo) -> RunFacts:
    """What the goal contract is checked against: the runtime's own counters, the elapsed time charged
    and the metrics measured from verified outputs (an unmeasured metric stays absent: neither met nor
    violated)."""
    usage = ctx.state.usage
    measure(svc, ctx, memo)
    return RunFacts(
        tool_calls=usage.tool_attempts,
        model_calls=usage.model_calls,
        tokens=usage.input_tokens + usage.output_tokens,
        elapsed_seconds=int(memo.ledger.used.elapsed_seconds),
        capabilities_used=tuple(sorted({o.action for o in ctx.observations})),
        artifacts=verified_types(memo),
        metrics=memo.measurement.metrics,
        unaffordable=unaffordable(svc, memo),
    )


def unaffordable(svc: Services, memo: PlanRunMemo) -> tuple[str, ...] | None:
    """Artifact types the budget left cannot reach: the unfinished, unreserved items making one and their
    unfinished, unreserved dependencies cost more (at the plan's estimates) than what remains."""
    goal = svc.config.goal
    criteria = (*goal.success_criteria, *goal.failure_criteria)
    asking = [c for c in criteria if isinstance(c.predicate, BudgetPredicate)]
    if memo.plan is None or not asking:
        return None  # nothing asks for it: not measured, so no step pays for it
    degrading = all(c in goal.failure_criteria and c.on_met is CriterionEffect.DEGRADE for c in asking)
    if degrading and facts_pending(svc, memo):
        # A DEGRADE criterion delivers the confirmed facts (source 15.4): met before they are confirmed, it
        # would deliver less than the budget can still carry. Until then the shortfall is not measured.
        return None
    items = {w.work_item_id: w for w in memo.plan.work_items}
    left = memo.ledger.remaining()
    out: list[str] = []
    for item in memo.plan.work_items:
        if item.work_item_id in memo.verified:
            continue
        need, todo, seen = BudgetAmount(), [item.work_item_id], set()
        while todo:
            wid = todo.pop()
            if wid in seen or wid in memo.verified or wid not in items:
                continue
            seen.add(wid)
            if wid not in memo.ledger.reserved:  # a reserved item's budget is already set aside
                need = need + BudgetAmount.from_estimate(items[wid].estimated_cost)
            todo.extend(items[wid].dependencies)
        if not left.covers(need):
            out.append(item.output_spec.artifact_type)
    return tuple(sorted(set(out)))


def facts_pending(svc: Services, memo: PlanRunMemo) -> bool:
    """Whether an item of the plan making a confirmed-fact artifact (``fact_artifacts``) is not verified yet."""
    assert memo.plan is not None
    return any(
        w.output_spec.artifact_type in svc.config.fact_artifacts and w.work_item_id not in memo.verified
        for w in memo.plan.work_items
    )


def measure(svc: Services, ctx: DecisionContext, memo: PlanRunMemo) -> None:
    """Re-measure the goal's metrics when the set of verified outputs changed (not on every step)."""
    if svc.config.measure is None or memo.plan is None or memo.measured == len(memo.verified):
        return
    outputs = verified_contents(ctx, memo)
    recorded = frozenset(e for o in ctx.observations for e in evidence_ids(o.result))
    memo.measurement = svc.config.measure(MeasureInput(outputs=outputs, recorded_evidence=recorded))
    memo.measured = len(memo.verified)


def verified_contents(ctx: DecisionContext, memo: PlanRunMemo, only: set[str] | None = None) -> dict[str, str]:
    """The content of verified outputs (of the items in ``only``, if given), by artifact type, as recorded."""
    wanted = [w for w in memo.verified if only is None or w in only]
    refs = {memo.items[w].output for w in wanted if w in memo.items and memo.items[w].output}
    return {
        ref.rpartition(":v")[0]: content_of(o)
        for o in ctx.observations
        if o.status == OutcomeStatus.SUCCESS
        for ref in o.artifacts
        if ref in refs
    }


def upstream(memo: PlanRunMemo, item: WorkItem) -> set[str]:
    """The items ``item`` depends on, directly or not."""
    assert memo.plan is not None
    deps = {w.work_item_id: w.dependencies for w in memo.plan.work_items}
    seen: set[str] = set()
    todo = list(item.dependencies)
    while todo:
        wid = todo.pop()
        if wid not in seen:
            seen.add(wid)
            todo.extend(deps.get(wid, ()))
    return seen


def inputs(ctx: DecisionContext, memo: PlanRunMemo, item: WorkItem) -> dict[str, str]:
    """What a work item is handed to work from: the recorded outputs of the items it depends on, directly
    or not, up to MAX_INPUT_CHARS in all (what does not fit is left out, never cut mid-document)."""
    above = upstream(memo, item)
    out: dict[str, str] = {}
    used = 0
    for name, content in verified_contents(ctx, memo, above).items():
        if used + len(content) > MAX_INPUT_CHARS:
            continue
        out[name] = content
        used += len(content)
    return out


def tick(svc: Services, memo: PlanRunMemo) -> None:
    """Charge wall-clock time since the run's first decision; kept in the ledger, so it survives pauses and
    other processes and never goes back."""
    now = svc.config.clock()
    if memo.started_at is None:
        memo.started_at = now
    elapsed = max((now - memo.started_at).total_seconds(), 0.0)
    charged = memo.ledger.used.elapsed_seconds
    if elapsed > charged:
        memo.ledger = memo.ledger.charge(BudgetAmount(elapsed_seconds=elapsed - charged))


def spent(run: ItemRun) -> BudgetAmount:
    """What the current attempt of an item has spent so far; starting it was one attempt."""
    tools = run.tracker.steps_taken if run.tracker else 0
    return BudgetAmount(tool_calls=tools, model_calls=run.model_calls, tokens=run.tokens, attempts=1)


def live_ledger(memo: PlanRunMemo) -> BudgetLedger:
    """The ledger as if every running attempt settled now: the budget rule sees spending as it happens,
    not only when an attempt ends."""
    ledger = memo.ledger
    for wid in memo.running:
        if wid in ledger.reserved and wid in memo.items:
            ledger = ledger.settle(wid, spent(memo.items[wid]))
    return ledger


def record_deviations(svc: Services, facts: RunFacts, memo: PlanRunMemo, notes: list[NewEvent]) -> None:
    """A soft constraint that stops holding is recorded once, with the facts it was judged on."""
    for violation in check_constraints(svc.config.goal, facts):
        if violation.hard or violation.constraint_id in memo.deviations:
            continue
        memo.deviations.append(violation.constraint_id)
        payload = {**violation.model_dump(mode="json"), "facts": facts.model_dump(mode="json")}
        notes.append(NewEvent(type=EventType.CONSTRAINT_DEVIATION_RECORDED, payload=payload))


def next_estimate(memo: PlanRunMemo, states: dict[str, WorkItemState]) -> BudgetAmount | None:
    plan = memo.plan
    assert plan is not None
    for item in plan.work_items:
        if (
            states.get(item.work_item_id) in (WorkItemState.READY, WorkItemState.BLOCKED)
            and item.work_item_id not in memo.ledger.reserved
        ):
            return BudgetAmount.from_estimate(item.estimated_cost)
    return None


def verified_types(memo: PlanRunMemo) -> tuple[str, ...]:
    made = outputs(memo)
    return tuple(sorted({made[w].rpartition(":v")[0] for w in memo.verified if w in made}))


def item(memo: PlanRunMemo, wid: str) -> WorkItem:
    assert memo.plan is not None
    return next(w for w in memo.plan.work_items if w.work_item_id == wid)


def states(svc: Services, ctx: DecisionContext, memo: PlanRunMemo) -> dict[str, WorkItemState]:
    assert memo.plan is not None
    return derive_states(memo.plan, facts(svc, ctx, memo))


def outputs(memo: PlanRunMemo) -> dict[str, str]:
    return {wid: run.output for wid, run in memo.items.items() if run.output}


def propose(
    svc: Services,
    decision: ControlDecision,
    memo: PlanRunMemo,
    notes: list[NewEvent],
    *,
    wait: WaitSpec | None = None,
    visible: frozenset[str] = frozenset(),
) -> Proposal:
    return Proposal(
        signal=decision,
        source=SignalSource.PLAN_STEP,
        visible_actions=visible,
        memo=svc.seals.write(memo),
        notes=notes,
        wait=wait,
    )


def refused(code: str, message: str, raw: str, *usages: Usage) -> Proposal:
    return Proposal(
        signal=SignalFailure(code=code, message=message, raw=raw[:2000]),
        source=SignalSource.PLAN_STEP,
        visible_actions=frozenset(),
        model_usage=usages,
    )


def with_usage(proposal: Proposal, usage: Usage) -> Proposal:
    return Proposal(
        signal=proposal.signal,
        source=proposal.source,
        visible_actions=proposal.visible_actions,
        model_usage=(usage, *proposal.model_usage),
        memo=proposal.memo,
        notes=proposal.notes,
        wait=proposal.wait,
    )
