"""Delivering a plan run: the full delivery when the success criteria hold, a partial delivery at the
best verified rung otherwise, a handoff package when a person must choose, and that person's answer."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from stateward.controllers.plan_run import facts as view
from stateward.controllers.plan_run import handover
from stateward.controllers.plan_run.attempts import end_attempt
from stateward.controllers.plan_run.memo import (
    BudgetGrant,
    PlanRunMemo,
    SourceChoice,
    amount_text,
)
from stateward.controllers.plan_run.services import Services
from stateward.controllers.plan_support import (
    PARTIAL_ARTIFACT,
    PARTIAL_TOOL,
    evidence_ids,
)
from stateward.core.contract import DecisionContext, Observation, PlanOutcomeCode, Proposal, WaitSpec
from stateward.core.decision import ControlDecision, DecisionType
from stateward.core.errors import ErrorCode, RunError
from stateward.core.events import EventType, NewEvent
from stateward.core.state import Answer, RequestKind, chosen_option
from stateward.planning.budget import DIMENSIONS, BudgetAmount
from stateward.planning.delivery import (
    AttemptSummary,
    DecisionOption,
    DegradationRung,
    DeliveryFacts,
    HandoffPackage,
    PartialDelivery,
    ResumePoint,
    choose_rung,
    standard_options,
)
from stateward.planning.goal import RunFacts, assess_goal
from stateward.planning.outcome import (
    RunOutcome,
    completion_mode,
    criterion_texts,
)
from stateward.planning.patch import (
    AttemptOutcome,
    WorkItemState,
)
from stateward.planning.plan import Plan
from stateward.planning.stages import RunStage
from stateward.planning.termination import (
    TerminationReason,
)


def deliver_partial(
    svc: Services,
    ctx: DecisionContext,
    memo: PlanRunMemo,
    notes: list[NewEvent],
    code: str,
    detail: str,
    states: dict[str, WorkItemState],
    undecidable: tuple[str, ...] = (),
) -> Proposal:
    """Deliver the best rung the verified facts support, with its gaps and what continuing would cost."""
    memo.enter(RunStage.DELIVER, ctx.state.usage.steps + 1)
    plan = memo.plan
    assert plan is not None
    done = tuple(w for w, s in states.items() if s is WorkItemState.SUCCEEDED)
    missing = tuple(w for w, s in states.items() if s is not WorkItemState.SUCCEEDED)
    rung = choose_rung(delivery_facts(svc, memo, states))
    to_continue = estimate(plan, missing)
    conclusions, bare = handover.conclusions(memo)
    delivery = PartialDelivery(
        original_goal=svc.config.goal.objective,
        rung=rung,
        reason_code=code,
        reason=detail or code,
        done_scope=done,
        missing_scope=missing,
        verified_conclusions=conclusions,
        undecidable=(*undecidable, *memo.measurement.unresolved, *bare),
        needed_to_continue=(
            *(f"complete {w}" for w in missing),
            *([f"budget to continue: {amount_text(to_continue)}"] if missing else []),
            *handover.exhausted(view.live_ledger(memo), to_continue if missing else None),
            *handover.reflections_spent(memo, missing),
        ),
        budget_used=memo.ledger.used,
        artifact_refs=tuple(view.outputs(memo).values()),
    )
    memo.delivery = "partial"
    for wid in list(memo.running):
        end_attempt(memo, view.item(memo, wid), AttemptOutcome.FAILED, code, notes)
    report = report_ref(svc, memo)
    final = report or f"{PARTIAL_ARTIFACT}:v{ctx.state.artifacts.get(PARTIAL_ARTIFACT, 0) + 1}"
    record_outcome(svc, memo, rung, code, final, (*undecidable, *memo.measurement.unresolved), to_continue)
    decision = ControlDecision(
        type=DecisionType.EXECUTE_TOOL, action=PARTIAL_TOOL, args={"content": delivery.model_dump_json()}
    )
    return view.propose(svc, decision, memo, notes, visible=frozenset({PARTIAL_TOOL}))


def fail_safely(svc: Services, memo: PlanRunMemo, notes: list[NewEvent], code: str, reason: str) -> Proposal:
    """The ladder's lowest rung: nothing may be delivered (the goal rules it out, or a person ended the run),
    so nothing is; the outcome says so, with what stays open, and the run fails."""
    record_outcome(svc, memo, DegradationRung.SAFE_FAILURE, code, None, memo.measurement.unresolved, None)
    return view.propose(svc, ControlDecision(type=DecisionType.FAIL, reason=reason), memo, notes)


def finish(
    svc: Services, ctx: DecisionContext, memo: PlanRunMemo, notes: list[NewEvent], states: dict[str, WorkItemState]
) -> Proposal:
    """Every item verified: the goal's success criteria, not the item count, decide whether it is done."""
    memo.enter(RunStage.DELIVER, ctx.state.usage.steps + 1)
    goal = svc.config.goal
    assessment = assess_goal(goal, view.goal_facts(svc, ctx, memo))
    if assessment.unmet:
        texts = criterion_texts({c.criterion_id: c.description for c in goal.success_criteria}, assessment.unmet)
        detail = f"success criteria not met: {', '.join(assessment.unmet)}"
        return deliver_partial(svc, ctx, memo, notes, PlanOutcomeCode.SUCCESS_CRITERIA_UNMET, detail, states, texts)
    rung = choose_rung(delivery_facts(svc, memo, states))
    record_outcome(svc, memo, rung, PlanOutcomeCode.GOAL_MET, report_ref(svc, memo), memo.measurement.unresolved, None)
    memo.delivery = "accepted"
    reason = "success criteria met" + (" with open issues" if memo.measurement.unresolved else "")
    return view.propose(svc, ControlDecision(type=DecisionType.FINISH, reason=reason), memo, notes)


def record_outcome(
    svc: Services,
    memo: PlanRunMemo,
    rung: DegradationRung,
    code: str,
    final: str | None,
    unresolved: tuple[str, ...],
    to_continue: BudgetAmount | None,
) -> None:
    goal = svc.config.goal
    facts = RunFacts(metrics=memo.measurement.metrics, artifacts=view.verified_types(memo))
    assessment = assess_goal(goal, facts)
    memo.outcome = RunOutcome(
        completion_mode=completion_mode(rung, unresolved),
        rung=rung,
        reason_code=code,
        plan_version=memo.plan.version if memo.plan else None,
        final_artifact=final,
        unresolved_issues=unresolved,
        criteria_met=assessment.met,
        criteria_unmet=assessment.unmet,
        metrics=memo.measurement.metrics,
        budget_used=memo.ledger.used,
        budget_to_continue=to_continue,
    )


def delivery_facts(svc: Services, memo: PlanRunMemo, states: dict[str, WorkItemState]) -> DeliveryFacts:
    """Only verified outputs count: the report if its checks passed, fact lists if their items were verified."""
    unresolved = memo.measurement.unresolved
    return DeliveryFacts(
        expected_scope=(*states, *unresolved),
        covered_scope=tuple(w for w, s in states.items() if s is WorkItemState.SUCCEEDED),
        report_verified=report_ref(svc, memo) is not None,
        verified_facts=sum(1 for t in view.verified_types(memo) if t in svc.config.fact_artifacts),
        completed_artifacts=tuple(view.outputs(memo).values()),
    )


def report_ref(svc: Services, memo: PlanRunMemo) -> str | None:
    """The verified deliverable's artifact ref, if the deliverable passed verification."""
    if svc.config.deliverable is None or memo.plan is None:
        return None
    for item in memo.plan.work_items:
        if item.output_spec.artifact_type == svc.config.deliverable and item.work_item_id in memo.verified:
            return memo.items[item.work_item_id].output
    return None


def estimate(plan: Plan, missing: Sequence[str]) -> BudgetAmount:
    """What the unfinished items would still need, from the plan's own estimates."""
    total = BudgetAmount()
    for item in plan.work_items:
        if item.work_item_id in missing:
            total = total + BudgetAmount.from_estimate(item.estimated_cost)
    return total


def handoff(
    svc: Services,
    ctx: DecisionContext,
    memo: PlanRunMemo,
    notes: list[NewEvent],
    code: str,
    detail: str,
    states: dict[str, WorkItemState],
) -> Proposal:
    memo.enter(RunStage.HUMAN_APPROVAL, ctx.state.usage.steps + 1)
    package = handoff_package(svc, ctx, memo, code, detail, states, handoff_options(code, memo))
    memo.awaiting_handoff = True  # the Runtime mints the request id; the answer says its kind
    notes.append(NewEvent(type=EventType.HANDOFF_RECORDED, payload=package.model_dump(mode="json")))
    decision = ControlDecision(type=DecisionType.REQUEST_USER_INPUT, question=package.to_question())
    return view.propose(svc, decision, memo, notes, wait=WaitSpec(kind=RequestKind.HANDOFF, options=package.option_ids))


def unknown_outcome_package(
    svc: Services, ctx: DecisionContext, memo: PlanRunMemo, observation: Observation, question: str
) -> NewEvent:
    """The handoff package recorded with the Runtime's reconciliation request (see the controller's
    ``reconciliation_notes``): its options are the request's two answers, with what each does."""
    states = view.states(svc, ctx, memo)
    item = next((w for w in memo.running if observation.step in memo.items[w].steps), None)
    detail = f"the outcome of {observation.action} is unknown" + (f" (work item {item})" if item else "")
    options = (
        DecisionOption(
            option_id="approve",
            label="It happened",
            consequence="the call is recorded as succeeded, confirmed by you (your confirmation is its evidence); "
            "the item goes on from the resume point",
        ),
        DecisionOption(
            option_id="reject",
            label="It did not happen",
            consequence=question.rpartition("'It did not happen' ")[2] or "the call is recorded NOT_EXECUTED",
        ),
    )
    package = handoff_package(svc, ctx, memo, PlanOutcomeCode.UNKNOWN_OUTCOME, detail, states, options, item)
    return NewEvent(type=EventType.HANDOFF_RECORDED, payload=package.model_dump(mode="json"))


def handoff_package(
    svc: Services,
    ctx: DecisionContext,
    memo: PlanRunMemo,
    code: str,
    detail: str,
    states: dict[str, WorkItemState],
    options: tuple[DecisionOption, ...],
    resume_item: str | None = None,
) -> HandoffPackage:
    """The source's handoff package (14.1): why, the state reached, attempts, evidence, options with their
    consequences, the impact of stopping here and where work resumes."""
    plan = memo.plan
    assert plan is not None
    missing = tuple(w for w, s in states.items() if s is not WorkItemState.SUCCEEDED)
    return HandoffPackage(
        reason_code=code,
        reason=detail or code,
        goal=svc.config.goal.objective,
        plan_version=plan.version,
        impact=handover.impact(svc, memo, states, estimate(plan, missing) if missing else None),
        completed_items=tuple(w for w, s in states.items() if s is WorkItemState.SUCCEEDED),
        blocked_items=tuple(w for w, s in states.items() if s in (WorkItemState.BLOCKED, WorkItemState.FAILED)),
        artifact_refs=tuple(view.outputs(memo).values()),
        attempt_history=tuple(
            AttemptSummary(
                work_item_id=wid,
                attempts=len(run.attempts),
                last_error_code=run.attempts[-1].error_class if run.attempts else None,
            )
            for wid, run in memo.items.items()
        ),
        evidence_refs=tuple(dict.fromkeys(e for o in ctx.observations for e in evidence_ids(o.result))),
        options=options,
        resume_point=ResumePoint(
            checkpoint_seq=ctx.state.usage.steps,
            # The item work resumes from: the one named, the running one, else the first that failed.
            work_item_id=resume_item
            or (
                memo.running[0]
                if memo.running
                else next((w for w, s in states.items() if s is WorkItemState.FAILED), None)
            ),
            plan_version=plan.version,
            budget=memo.ledger,
        ),
    )


def nothing_runnable(
    svc: Services,
    ctx: DecisionContext,
    memo: PlanRunMemo,
    notes: list[NewEvent],
    stuck: Sequence[str],
    states: dict[str, WorkItemState],
) -> Proposal:
    """Work remains and nothing can run: a person chooses (continue with new attempts, accept the partial
    result, or cancel) - a verification's HUMAN_HANDOFF (high risk at low confidence) by its own reason.
    A run a person already answered (or that delivered) is not asked again for the same stall."""
    if memo.delivery is not None:
        return deliver_partial(
            svc, ctx, memo, notes, PlanOutcomeCode.PLAN_STALLED, f"cannot proceed: {list(stuck)}", states
        )
    if memo.verification_handoff is not None:
        code, why = memo.verification_handoff
        memo.verification_handoff = None
        return handoff(svc, ctx, memo, notes, code, why[:600], states)
    return handoff(svc, ctx, memo, notes, PlanOutcomeCode.NO_RUNNABLE_WORK, f"cannot proceed: {list(stuck)}", states)


def when_stuck(
    svc: Services,
    ctx: DecisionContext,
    memo: PlanRunMemo,
    notes: list[NewEvent],
    stuck: list[str],
    states: dict[str, WorkItemState],
) -> Proposal:
    """Nothing can run and no patch helped: a person decides - to grant the access whose lack left the scope
    short, to restore a source that is down, or what to do when nothing is runnable."""
    if memo.denied and memo.delivery is None:
        # Source 14: missing permission left the scope short; a person can grant it or accept less.
        detail = f"cannot proceed: {stuck}; refused for missing permission: {'; '.join(memo.denied)}"
        return handoff(svc, ctx, memo, notes, PlanOutcomeCode.SCOPE_SHORTFALL, detail[:600], states)
    down = memo.unavailable
    if down and memo.delivery is None:
        # A source the plan needs is down and the fallbacks did not replace it: a person has to restore
        # it or accept less - delivering as if the gap were final would hide a fixable cause.
        detail = f"cannot proceed: {stuck}; unavailable after retries and fallbacks: {', '.join(down)}"
        code = PlanOutcomeCode.DEPENDENCY_UNAVAILABLE
        return handoff(svc, ctx, memo, notes, code, detail, states)
    return nothing_runnable(svc, ctx, memo, notes, stuck, states)


def handoff_options(code: str, memo: PlanRunMemo | None = None) -> tuple[DecisionOption, ...]:
    """No one at a handoff can authorise past a hard constraint of the goal: only ending is offered.
    Conflicting authorities: continuing means choosing one of the two sources (``choose_a`` / ``choose_b``)."""
    options = standard_options()
    if code == TerminationReason.HARD_CONSTRAINT_VIOLATED.value:
        return tuple(o for o in options if o.option_id != "continue_authorized")
    conflict = memo.authority_conflict if memo is not None else None
    if code == PlanOutcomeCode.CONFLICTING_AUTHORITIES and conflict is not None:
        chosen = tuple(
            DecisionOption(
                option_id=f"{CHOOSE_PREFIX}{side}",
                label=f"Follow {s.source} on {conflict.key}: {s.statement}"[:300],
                consequence=f"your choice is recorded as a fact of the run; the item is attempted again with "
                f"{s.source} as the authority on {conflict.key} (the budget already spent still counted)",
            )
            for side, s in zip(SIDES, conflict.statements, strict=True)
        )
        return (*chosen, *(o for o in options if o.option_id != "continue_authorized"))
    return options


CHOOSE_PREFIX = "choose_"  # a conflicting-authorities answer naming the source that holds: choose_a, choose_b
SIDES = ("a", "b")  # the conflict's first and second source


def choose_source(ctx: DecisionContext, memo: PlanRunMemo, choice: str) -> dict[str, object] | None:
    """A ``choose_a`` / ``choose_b`` answer to conflicting authorities: the chosen source recorded as a fact (who,
    when, for which key). None if it names neither source (or there is no conflict to settle)."""
    conflict, answer = memo.authority_conflict, ctx.state.last_answer
    if conflict is None or answer is None or not choice.startswith(CHOOSE_PREFIX):
        return None
    side = choice.removeprefix(CHOOSE_PREFIX)
    if side not in SIDES:
        return None
    source = conflict.sources[SIDES.index(side)]
    memo.source_choices[conflict.key] = SourceChoice(
        key=conflict.key, source=source, by=answer.by, at=answer.at, request_id=answer.request_id
    )
    memo.authority_conflict = None
    return {"key": conflict.key, "source": source, "by": answer.by, "at": answer.at.isoformat()}


def after_handoff(svc: Services, ctx: DecisionContext, memo: PlanRunMemo, notes: list[NewEvent]) -> Proposal | None:
    """A person chose an option: it is the only way a handed-off run moves on."""
    answer = ctx.state.last_answer
    if answer is None:
        return None
    # Escalation keeps the kind, so an escalated handoff's answer is taken as well.
    taken = answer.kind is RequestKind.HANDOFF if memo.awaiting_handoff else answer.answers(memo.handoff_request)
    if not taken:
        return None
    choice = chosen_option(answer.text)
    memo.handoff_request, memo.awaiting_handoff = None, False
    answered: dict[str, object] = {"option": choice, "by": answer.by}
    if choice.startswith(CHOOSE_PREFIX):
        chosen = choose_source(ctx, memo, choice)
        if chosen is None:  # names no source of the conflict: nothing recorded, the person is asked again
            answered["refused"] = {"code": ErrorCode.INVALID_ARGUMENT.value, "message": f"no such source: {choice}"}
            notes.append(NewEvent(type=EventType.HANDOFF_ANSWERED, payload=answered))
            states = view.states(svc, ctx, memo)
            code, why = PlanOutcomeCode.CONFLICTING_AUTHORITIES, f"{choice!r} names neither conflicting source"
            return handoff(svc, ctx, memo, notes, code, why, states)
        answered["source_choice"] = chosen
        answered["grant"] = authorize_continue(svc, ctx, memo)
    if choice == "continue_authorized":
        refused, extra = grant_budget(svc, memo, answer)
        if refused is not None:  # nothing granted, nothing re-attempted: the person is asked again
            answered["refused"] = {"code": ErrorCode.BUDGET_GRANT_REFUSED.value, "message": refused}
            notes.append(NewEvent(type=EventType.HANDOFF_ANSWERED, payload=answered))
            states = view.states(svc, ctx, memo)
            return handoff(svc, ctx, memo, notes, ErrorCode.BUDGET_GRANT_REFUSED.value, refused, states)
        grant = authorize_continue(svc, ctx, memo)
        if extra is not None:
            grant["extra_budget"] = extra.model_dump(mode="json", exclude_defaults=True)
        answered["grant"] = grant
    notes.append(NewEvent(type=EventType.HANDOFF_ANSWERED, payload=answered))
    if choice == "cancel":
        return fail_safely(svc, memo, notes, PlanOutcomeCode.CANCELLED_AT_HANDOFF, "cancelled_at_handoff")
    if choice == "accept_partial":
        return deliver_partial(
            svc,
            ctx,
            memo,
            notes,
            PlanOutcomeCode.ACCEPTED_PARTIAL,
            "a person accepted the partial scope",
            view.states(svc, ctx, memo),
        )
    memo.failures.clear()
    memo.no_progress_streak = 0
    memo.history.clear()
    return None


def grant_budget(svc: Services, memo: PlanRunMemo, answer: Answer) -> tuple[str | None, BudgetAmount | None]:
    """The extra budget a continue_authorized answer names (``extra_budget``), granted by that person and
    recorded (who, when, how much): the limits rise, what was spent stays. (None, the grant) - or (why it is
    refused, None): an unknown or unlimited dimension, or more than ``max_budget_grant`` with the earlier
    grants (by default at most the configured limits again). (None, None) when the answer names none."""
    extra_raw = extra_budget_of(answer.text)
    if extra_raw is None:
        return None, None
    try:
        extra = BudgetAmount.model_validate(extra_raw)
        ledger = memo.ledger.granted(extra)
    except ValidationError as exc:
        first = exc.errors()[0]
        return f"extra_budget is not a budget amount: {first['msg']} at {first['loc']}", None
    except RunError as exc:
        return exc.message, None
    limits = svc.config.budget
    cap = svc.config.max_budget_grant or BudgetAmount.model_validate({d: limits.limit(d) or 0 for d in DIMENSIONS})
    total = sum((g.extra for g in memo.grants), extra)
    over = [d for d in DIMENSIONS if getattr(total, d) > getattr(cap, d)]
    if over:
        said = ", ".join(f"{d} {getattr(total, d):g} of at most {getattr(cap, d):g}" for d in over)
        return f"grants past their maximum: {said}", None
    memo.ledger = ledger
    memo.grants.append(BudgetGrant(by=answer.by, at=answer.at, request_id=answer.request_id, extra=extra))
    return None, extra


def authorize_continue(svc: Services, ctx: DecisionContext, memo: PlanRunMemo) -> dict[str, object]:
    """continue_authorized: each failed item (the resume point's among them) may make one more attempt, a
    grant by the person who answered, recorded with who and when. The budget already spent stays counted."""
    answer = ctx.state.last_answer
    assert answer is not None
    states = view.states(svc, ctx, memo)
    failed = [w for w, s in states.items() if s is WorkItemState.FAILED]
    for wid in failed:
        memo.authorized_attempts[wid] = len(memo.items[wid].attempts) + 1
    return {
        "by": answer.by,
        "at": answer.at.isoformat(),
        "reattempt": {w: memo.authorized_attempts[w] for w in failed},
    }


def extra_budget_of(text: str | None) -> Any:
    """The ``extra_budget`` an answer written as a JSON object names, or None."""
    raw = (text or "").strip()
    if not raw.startswith("{"):
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    return data.get("extra_budget") if isinstance(data, dict) else None
