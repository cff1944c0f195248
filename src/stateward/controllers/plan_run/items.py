"""Executing work items: starting one against its reserved budget, its bounded local ReAct steps,
folding its observations into its tracker, verifying its output and ending its attempt."""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from stateward.controllers.base import provider_rejection
from stateward.controllers.plan_run import acceptance
from stateward.controllers.plan_run import facts as view
from stateward.controllers.plan_run.acceptance import findings_text
from stateward.controllers.plan_run.agent_items import agent_procedure, child_spend
from stateward.controllers.plan_run.attempts import end_attempt
from stateward.controllers.plan_run.memo import (
    DENIED,
    ITEM_INSTRUCTIONS,
    UNAVAILABLE,
    ArtifactFact,
    ItemRun,
    PlanRunMemo,
    start_item_guard,
    strings_in,
    tokens_of,
)
from stateward.controllers.plan_run.metering import charge_checks, metered_checker
from stateward.controllers.plan_run.services import DecideAgain, DeliverPartial, Services
from stateward.controllers.plan_support import (
    OUTPUT_TOOL,
    content_of,
    evidence_ids,
    output_ref,
    step_record,
)
from stateward.core.canonical import canonical_json, sha256_hex
from stateward.core.contract import (
    DecisionContext,
    Observation,
    OutcomeStatus,
    PlanOutcomeCode,
    Proposal,
    SignalFailure,
    WaitSpec,
)
from stateward.core.decision import ControlDecision, DecisionType, SignalSource, parse_decision
from stateward.core.errors import DecisionParseError, ErrorCode, RunError
from stateward.core.events import EventType, NewEvent
from stateward.core.model_io import ReplyContract
from stateward.core.state import RequestKind
from stateward.models.base import ModelRequest, Usage, complete
from stateward.planning.budget import BudgetAmount, BudgetError
from stateward.planning.delivery import Confidence, FindingRisk
from stateward.planning.patch import (
    AttemptFact,
    AttemptOutcome,
    WorkItemState,
)
from stateward.planning.plan import MODEL_TASK_TYPES, TaskType, WorkItem
from stateward.planning.progress import ProgressTracker, ReactDecisionSummary
from stateward.planning.stages import RunStage
from stateward.planning.termination import (
    FailureFact,
)
from stateward.verify.checks import CheckResult, CheckVerdict
from stateward.verify.item_checks import GOAL_REF_PREFIX
from stateward.verify.policy import PolicyDecision, VerificationOutcome
from stateward.verify.policy import decide as verification_decision


def ask_approval(svc: Services, item: WorkItem, memo: PlanRunMemo, notes: list[NewEvent]) -> Proposal:
    guard = (svc.config.approval_action or start_item_guard)(item, memo)
    question = (
        f"Work item {item.work_item_id} ({item.title}, risk {item.risk_level.value}) needs approval "
        f"before it runs: {guard.tool} {json.dumps(guard.args, sort_keys=True)}."
    )
    decision = ControlDecision(type=DecisionType.REQUEST_USER_INPUT, question=question)
    return view.propose(svc, decision, memo, notes, wait=WaitSpec(guard=guard, kind=RequestKind.APPROVAL))


def start(
    svc: Services,
    ctx: DecisionContext,
    memo: PlanRunMemo,
    notes: list[NewEvent],
    item: WorkItem,
    batch: int | None = None,
    first: bool = True,
) -> DeliverPartial | None:
    """Reserve the item's budget and put it in flight (in ``batch``); a partial delivery if the budget cannot
    carry it and it is its batch's ``first`` item (a later one just waits for the next batch)."""
    wid = item.work_item_id
    try:
        memo.ledger = memo.ledger.reserve(wid, BudgetAmount.from_estimate(item.estimated_cost))
    except BudgetError as exc:  # an item estimated above what is left never starts
        if not first:
            return None
        notes.append(
            NewEvent(
                type=EventType.WORK_ITEM_BLOCKED,
                payload={"work_item_id": wid, "code": exc.code, "message": exc.message},
            )
        )
        return DeliverPartial(PlanOutcomeCode.BUDGET_EXHAUSTED, exc.message)
    run = memo.items.setdefault(wid, ItemRun())
    attempt_id = f"{wid}#{len(run.attempts) + 1}"
    run.attempts.append(
        AttemptFact(outcome=AttemptOutcome.RUNNING, attempt_id=attempt_id, input_hash=input_hash(memo, item))
    )
    run.steps, run.absorbed, run.calls = [], 0, []  # a new attempt: none of its observations has been seen yet
    run.tracker = ProgressTracker.start(max(1, item.max_react_steps or svc.config.default_react_steps))
    memo.running.append(wid)
    notes.append(
        NewEvent(
            type=EventType.WORK_ITEM_STARTED,
            payload={
                "work_item_id": wid,
                "attempt": len(run.attempts),
                "reserved": memo.ledger.reserved[wid].model_dump(),
                **({} if batch is None else {"batch": batch}),
            },
        )
    )
    return None


def start_batch(
    svc: Services,
    ctx: DecisionContext,
    memo: PlanRunMemo,
    notes: list[NewEvent],
    states: dict[str, WorkItemState],
) -> DeliverPartial | None:
    """Start the next batch (source 12: ``get_ready_items(limit=4)``): up to ``max_parallel`` ready items,
    in work-item id order, each reserved and its attempt recorded in this one step. The batch's items then
    take turns, one call per step and each step one transaction, and no new item starts until all of them
    ended: the same items in the same order on every run, and a crash between two of its calls loses or
    repeats nothing (the step that journalled a call is the one that recorded it). A partial delivery if
    not even the first ready item fits the budget; one that does not fit after others started waits for the
    next batch."""
    plan = memo.plan
    assert plan is not None
    ready = sorted(
        (w for w in plan.work_items if states[w.work_item_id] in (WorkItemState.READY, WorkItemState.RETRY_WAIT)),
        key=lambda w: w.work_item_id,
    )[: max(1, svc.config.max_parallel)]
    if not ready:
        return None
    memo.batches += 1
    memo.turn = 0
    for item in ready:
        refused = start(svc, ctx, memo, notes, item, batch=memo.batches, first=not memo.running)
        if refused is not None:
            return refused
    return None


def input_hash(memo: PlanRunMemo, item: WorkItem) -> str:
    """What an attempt starts from, hashed: the item, the plan version, the refs of the verified inputs it is
    handed and the findings it is told to fix. Two attempts with one hash were given the same thing."""
    upstream = sorted(view.upstream(memo, item))
    run = memo.items.get(item.work_item_id)
    given = {
        "work_item": item.model_dump(mode="json"),
        "plan_version": memo.plan.version if memo.plan else None,
        "inputs": [memo.items[w].output for w in upstream if w in memo.verified and w in memo.items],
        "correction": None if run is None else run.correction,
    }
    return sha256_hex(canonical_json(given))


def item_step(
    svc: Services, ctx: DecisionContext, memo: PlanRunMemo, wid: str, notes: list[NewEvent]
) -> Proposal | DecideAgain | DeliverPartial:
    memo.enter(RunStage.EXECUTE, ctx.state.usage.steps + 1)
    item = view.item(memo, wid)
    run = memo.items[wid]
    assert run.tracker is not None
    before = run.tracker.before_step(remaining=memo.ledger.remaining())
    if before.should_stop:
        end_attempt(memo, item, AttemptOutcome.FAILED, before.signal.value, notes)
        return DecideAgain(notes)
    visible = (*(c for c in item.required_capabilities if c in ctx.actions), OUTPUT_TOOL)
    mine = [o for o in ctx.observations if o.step in run.steps]
    request = item_request(svc, ctx, memo, item, mine, visible)
    if runs_as_code(item):
        return code_step(svc, ctx, memo, item, request, visible, notes)
    left = view.live_ledger(memo).remaining().tokens
    if left is not None and request.json_chars() // 4 > left:
        # The request alone would not fit what is left: do not send it (tokens are spent, not refunded).
        detail = f"the next model request needs ~{request.json_chars() // 4} tokens, {left} left"
        return DeliverPartial(PlanOutcomeCode.BUDGET_EXHAUSTED, detail)
    return model_step(svc, ctx, memo, item, request, mine, visible, notes)


def model_step(
    svc: Services,
    ctx: DecisionContext,
    memo: PlanRunMemo,
    item: WorkItem,
    request: ModelRequest,
    mine: list[Observation],
    visible: tuple[str, ...],
    notes: list[NewEvent],
) -> Proposal | DecideAgain:
    """One step of an item a model runs: its worker's next call, charged to the attempt; a worker saying
    "done" (or asking to stop) ends its attempt, and a call outside the goal's scope is refused by name."""
    run = memo.items[item.work_item_id]
    assert run.tracker is not None
    reply = complete(svc.worker, request)
    run.model_calls += 1
    run.tokens += tokens_of(reply.usage)
    rejected = provider_rejection(reply)
    if rejected is not None:
        return worker_proposal(svc, memo, notes, rejected, visible, reply.usage)
    try:
        decision = parse_decision(reply.text)
    except DecisionParseError:
        decision = None  # the Runtime names the parse failure; we never guess
    if decision is not None and decision.type is not DecisionType.EXECUTE_TOOL:
        # A worker saying "done" (or asking to stop) ends its attempt; it never completes the item.
        end_attempt(memo, item, AttemptOutcome.FAILED, "MODEL_DECLARED_STOP", notes)
        return DecideAgain(notes, (reply.usage,))
    outside = out_of_scope(svc, decision)
    if outside is not None:
        # The goal's scope holds for what a call touches, not only for which tool it is.
        refused = SignalFailure(code=ErrorCode.OUT_OF_SCOPE_ARGUMENT, message=outside, raw=reply.text[:2000])
        return worker_proposal(svc, memo, notes, refused, visible, reply.usage)
    run.steps.append(ctx.state.usage.steps + 1)  # the observation of this step belongs to this item
    if decision is not None and decision.action:
        # What is kept of the decision: facts and a short stated reason (none when the model gave none),
        # never hidden reasoning. The call itself is recorded once, by this step's signal and tool attempt
        # (the decision is the item's at that step), the observations it saw by their steps, and the
        # objective once per attempt (its first decision, before any observation of its own).
        summary = ReactDecisionSummary(
            work_item_id=item.work_item_id,
            objective=None if mine else item.title,
            observation_refs=tuple(o.step for o in mine[-5:]),
            reason_summary=decision.reason[:280] if decision.reason else None,
            remaining_steps=run.tracker.remaining_steps(),
        )
        payload = summary.model_dump(mode="json", exclude_defaults=True)
        notes.append(NewEvent(type=EventType.REACT_DECISION, payload=payload))
    return worker_proposal(svc, memo, notes, reply.text, visible, reply.usage)


def worker_proposal(
    svc: Services,
    memo: PlanRunMemo,
    notes: list[NewEvent],
    signal: str | SignalFailure,
    visible: tuple[str, ...],
    usage: Usage,
) -> Proposal:
    """The worker's reply (or why it is refused) as the step's signal, its call reported with it."""
    return Proposal(
        signal=signal,
        source=SignalSource.MODEL,
        visible_actions=frozenset(visible),
        model_usage=(usage,),
        memo=svc.seals.write(memo),
        notes=notes,
    )


def item_request(
    svc: Services,
    ctx: DecisionContext,
    memo: PlanRunMemo,
    item: WorkItem,
    mine: list[Observation],
    visible: tuple[str, ...],
) -> ModelRequest:
    """The item's facts as its worker is shown them: the item, its attempt's observations, its verified
    inputs and the outputs so far, what to fix. A code-run item's procedure reads the same."""
    run = memo.items[item.work_item_id]
    assert run.tracker is not None
    return ModelRequest(
        purpose="decide",
        contract=ReplyContract.DECISION,
        goal=f"{item.work_item_id}: {item.title}",
        inventory=list(ctx.inventory),
        observations=[o.model_dump(mode="json") for o in mine],
        visible_actions=ctx.specs(visible),
        facts={
            "work_item": item.model_dump(mode="json"),
            "outputs": view.outputs(memo),
            "inputs": view.inputs(ctx, memo, item),
            "correction": run.correction,
            "goal_ref": f"{GOAL_REF_PREFIX}{svc.config.goal.goal_id}",
            "remaining_steps": run.tracker.remaining_steps(),
        },
        instructions=ITEM_INSTRUCTIONS,
        correction=ctx.state.correction,  # the Runtime refused the last proposal: say why, once
    )


def runs_as_code(item: WorkItem) -> bool:
    """Whether code runs the item, not a model: every item but a MODEL or LOCAL_REACT one (RULE, TOOL,
    VALIDATION, and what follows a person's or an event's answer: HUMAN, WAIT, TIMER, COMPENSATION)."""
    return item.task_type not in MODEL_TASK_TYPES


def code_step(
    svc: Services,
    ctx: DecisionContext,
    memo: PlanRunMemo,
    item: WorkItem,
    request: ModelRequest,
    visible: tuple[str, ...],
    notes: list[NewEvent],
) -> Proposal | DecideAgain:
    """One step of an item run as code: its procedure's next call, proposed to the Runtime like a model's
    (visible actions, scope, gateway) with the signal source ``rule``, and no model call. An item with no
    procedure, or whose procedure fails or proposes anything but a call, ends its attempt by name."""
    procedure = svc.config.procedures.get(item.output_spec.artifact_type)
    if procedure is None and item.task_type is TaskType.AGENT:
        procedure = agent_procedure  # another agent does the item: a call of its agent tool (agent_items.py)
    if procedure is None:
        end_attempt(memo, item, AttemptOutcome.FAILED, ErrorCode.NO_PROCEDURE.value, notes)
        return DecideAgain(notes)
    try:
        raw = procedure(request)
        decision = raw if isinstance(raw, ControlDecision) else ControlDecision.model_validate(raw)
    except (ValidationError, RunError, ValueError, KeyError, TypeError) as exc:
        notes.append(
            NewEvent(
                type=EventType.WORK_ITEM_BLOCKED,
                payload={
                    "work_item_id": item.work_item_id,
                    "code": ErrorCode.PROCEDURE_FAILED.value,
                    "message": f"{type(exc).__name__}: {str(exc)[:300]}",
                },
            )
        )
        decision = None
    if decision is None or decision.type is not DecisionType.EXECUTE_TOOL:
        end_attempt(memo, item, AttemptOutcome.FAILED, ErrorCode.PROCEDURE_FAILED.value, notes)
        return DecideAgain(notes)
    outside = out_of_scope(svc, decision)
    signal: ControlDecision | SignalFailure = decision
    if outside is not None:
        signal = SignalFailure(code=ErrorCode.OUT_OF_SCOPE_ARGUMENT, message=outside, raw=decision.model_dump_json())
    else:
        memo.items[item.work_item_id].steps.append(ctx.state.usage.steps + 1)
    return Proposal(
        signal=signal,
        source=SignalSource.RULE,
        visible_actions=frozenset(visible),
        memo=svc.seals.write(memo),
        notes=notes,
    )


def out_of_scope(svc: Services, decision: ControlDecision | None) -> str | None:
    """Why a proposed call's arguments reach outside the goal's scope (an ``out_of_scope`` name, or a path
    under one, as any string argument), or None."""
    fenced = svc.config.goal.scope.out_of_scope
    if decision is None or not fenced or not decision.args:
        return None
    for key, value in strings_in(decision.args):
        for name in fenced:
            if value == name or value.startswith((f"{name}/", f"{name}:")):
                return f"argument {key}={value!r} is outside the goal's scope ({name})"
    return None


def absorb(
    svc: Services, ctx: DecisionContext, memo: PlanRunMemo, wid: str, notes: list[NewEvent], charged: list[Usage]
) -> None:
    """Fold a running item's new observations into its tracker; complete or stop it on facts. Model calls
    made meanwhile (a deliverable's model checks) go into ``charged``, for the step's proposal."""
    item = view.item(memo, wid)
    run = memo.items[wid]
    assert run.tracker is not None
    mine = [o for o in ctx.observations if o.step in run.steps]
    for obs in mine[run.absorbed :]:
        run.absorbed += 1
        if (child := child_spend(obs)) is not None:
            memo.ledger = memo.ledger.charge(child)  # a child run's spend is the plan's (agent_items.py)
        if obs.evidence_id is not None:
            run.calls.append(obs.evidence_id)
        run.tracker, verdict = run.tracker.observe(step_record(obs), remaining=memo.ledger.remaining())
        if obs.status != OutcomeStatus.SUCCESS and obs.error_code:
            memo.failures.append(FailureFact(action=obs.action, error_code=obs.error_code))
            if obs.error_code in UNAVAILABLE and obs.action not in memo.unavailable:
                memo.unavailable = sorted({*memo.unavailable, obs.action})
            if obs.error_code in DENIED:
                what = f"{obs.action} {json.dumps(obs.args, sort_keys=True)[:200]}"
                memo.denied = sorted({*memo.denied, what})[:20]
        output = output_ref(obs, item.output_spec.artifact_type)
        if output is not None:
            accept_output(svc, ctx, memo, item, output, obs, notes, charged)
            return
        if verdict.should_stop:
            end_attempt(
                memo,
                item,
                AttemptOutcome.FAILED,
                verdict.signal.value,
                notes,
                partial=run.tracker.partial_result(verdict).model_dump(mode="json"),
            )
            return


def accept_output(
    svc: Services,
    ctx: DecisionContext,
    memo: PlanRunMemo,
    item: WorkItem,
    ref: str,
    obs: Observation,
    notes: list[NewEvent],
    charged: list[Usage],
) -> None:
    """The item's artifact was written: it succeeds only if it passes every check (see ``verify_output``)."""
    verdict = verify_output(svc, ctx, memo, item, ref, obs, notes, charged)
    if verdict is None:
        return
    accepted, summary = verdict
    run = memo.items[item.work_item_id]
    run.output, run.artifact = ref, accepted
    memo.verified.append(item.work_item_id)
    memo.no_progress_streak = 0
    end_attempt(memo, item, AttemptOutcome.COMPLETED, None, notes, verification=summary)


def deliverable_results(
    svc: Services,
    ctx: DecisionContext,
    memo: PlanRunMemo,
    item: WorkItem,
    obs: Observation,
    charged: list[Usage],
) -> list[CheckResult]:
    """The deliverable's own verifier. An evidence verifier checks the cited evidence against what the run
    recorded, not against what exists."""
    content = content_of(obs)
    if svc.config.evidence_verifier is not None:
        recorded = frozenset(e for o in ctx.observations for e in evidence_ids(o.result))
        checker = metered_checker(svc, memo)
        results = list(svc.config.evidence_verifier(content, recorded, checker))
        if checker is not None:
            charge_checks(memo, item, checker, charged)
        return results
    if svc.config.verifier is not None:
        return list(svc.config.verifier(content))
    return []


def verify_output(
    svc: Services,
    ctx: DecisionContext,
    memo: PlanRunMemo,
    item: WorkItem,
    ref: str,
    obs: Observation,
    notes: list[NewEvent],
    charged: list[Usage],
) -> tuple[ArtifactFact, dict[str, Any] | None] | None:
    """Every check on every version of every item's artifact: its schema, its evidence, the checks registered
    for its type (and the deliverable's verifier); at most the budgeted repairs; UNKNOWN never passes. The
    accepted artifact's record, or None (repairing, or the attempt failed with the findings).

    A verification that did not pass, the one after it and the deliverable's are ``verification_recorded``
    events with every check; an intermediate artifact that passed everything at once is said so on its item's
    ``work_item_ended`` (how many checks passed, how many evidence refs it cites, the risk it backs),
    which is returned with the record: the trace stays within its bound however many items a plan has."""
    results, fact = acceptance.judge(svc, ctx, memo, item, ref, obs, charged)
    deliverable = item.output_spec.artifact_type == svc.config.deliverable
    if deliverable:  # the run's VERIFY stage is the deliverable's; an item's own checks are part of its work
        memo.enter(RunStage.VERIFY, ctx.state.usage.steps + 1)
        results += deliverable_results(svc, ctx, memo, item, obs, charged)
    policy = verification_policy(svc, memo, item, results, deliverable)
    run = memo.items[item.work_item_id]
    backs = acceptance.backs_risk(memo, item).value
    if policy.outcome is VerificationOutcome.ACCEPT and not deliverable and run.correction is None:
        run.correction = None
        summary: dict[str, Any] = {"evidence": len(fact.evidence_refs)}  # every check passed
        if not fact.evidence_refs:  # the audit's question: does an artifact resting on nothing back high risk?
            summary["backs_risk"] = backs
        return fact, summary
    notes.append(
        NewEvent(
            type=EventType.VERIFICATION_RECORDED,
            payload={
                "artifact": ref,
                "work_item_id": item.work_item_id,
                "outcome": policy.outcome.value,
                "reason_code": policy.reason_code,
                "checks": [check_record(r) for r in results],
                "evidence_refs": list(fact.evidence_refs),
                "schema_version": fact.schema_version,
                "source_attempt": fact.source_attempt,
                "backs_risk": backs,
            },
        )
    )
    if policy.outcome is VerificationOutcome.ACCEPT:
        run.correction = None
        return fact, None
    not_accepted(svc, memo, item, ref, results, policy, deliverable, notes)
    return None


def verification_policy(
    svc: Services, memo: PlanRunMemo, item: WorkItem, results: list[CheckResult], deliverable: bool
) -> PolicyDecision:
    """What the checks' results mean for the artifact, given the repairs it has left and the risk it carries."""
    used = memo.ledger.reflections.get(item.output_spec.artifact_type, 0)
    limit = memo.ledger.limits.max_reflections_per_artifact
    risk, confidence = (
        (svc.config.deliverable_risk, svc.config.deliverable_confidence)
        if deliverable
        else (FindingRisk.LOW, Confidence.HIGH)  # an intermediate artifact is judged on its checks alone
    )
    return verification_decision(results, used, 1 if limit is None else limit, risk, confidence)


def not_accepted(
    svc: Services,
    memo: PlanRunMemo,
    item: WorkItem,
    ref: str,
    results: list[CheckResult],
    policy: PolicyDecision,
    deliverable: bool,
    notes: list[NewEvent],
) -> None:
    """The artifact did not pass: the next version is told what to fix, within the budgeted repairs (a fresh
    local loop), or the attempt fails - a person deciding if the policy says so."""
    run = memo.items[item.work_item_id]
    name = item.output_spec.artifact_type
    run.correction = findings_text(results) or "; ".join(policy.reasons)
    conflict = next((r.conflict for r in results if r.verdict is CheckVerdict.FAIL and r.conflict), None)
    if conflict is not None:  # authorities disagree: no retry or repair can settle it, a person chooses
        memo.authority_conflict = conflict
        said = "; ".join(f"{s.source} ({s.evidence_id}) says {s.statement!r}" for s in conflict.statements)
        memo.verification_handoff = (PlanOutcomeCode.CONFLICTING_AUTHORITIES, f"{ref}: on {conflict.key}: {said}")
        end_attempt(memo, item, AttemptOutcome.FAILED, PlanOutcomeCode.CONFLICTING_AUTHORITIES, notes)
        return
    if policy.outcome is VerificationOutcome.REPAIR_ONCE:
        memo.ledger = memo.ledger.record_reflection(name)
        # The fresh tracker below restarts the step count: charge the drafting loop's tool calls now, or
        # settling the item would record only the repair's calls and the ledger would under-count.
        spent = run.tracker.steps_taken if run.tracker else 0
        memo.ledger = memo.ledger.charge(BudgetAmount(tool_calls=spent))
        run.tracker = ProgressTracker.start(max(1, item.max_react_steps or svc.config.default_react_steps))
        run.steps, run.absorbed = [], 0  # the repair is a fresh local loop that must write a new version
        return
    if policy.outcome is VerificationOutcome.HUMAN_HANDOFF:  # a person decides, not a partial delivery
        memo.verification_handoff = (policy.reason_code, f"{ref}: " + "; ".join(policy.reasons))
    end_attempt(memo, item, AttemptOutcome.FAILED, failure_code(results, policy, deliverable), notes)


def failure_code(results: list[CheckResult], policy: PolicyDecision, deliverable: bool) -> str:
    """The error class of an attempt whose artifact was refused: a named evidence error if that is what
    failed, else CHECK_FAILED for an intermediate artifact (the deliverable keeps the policy's outcome)."""
    if deliverable:
        return f"VERIFICATION_{policy.outcome.value}"
    for r in results:
        for finding in r.findings:
            for code in (ErrorCode.EVIDENCE_UNRESOLVED, ErrorCode.EVIDENCE_MISSING):
                if finding.startswith(code.value):
                    return code.value
    return ErrorCode.CHECK_FAILED.value


def check_record(result: CheckResult) -> dict[str, Any]:
    """A check's result as a verification event keeps it: a PASS by its name and verdict, anything else with
    its detail and findings (what the next attempt is told to fix)."""
    record: dict[str, Any] = {"name": result.name, "verdict": result.verdict.value}
    if result.verdict is not CheckVerdict.PASS or result.detail:
        record["detail"] = result.detail
    if result.findings:
        record["findings"] = list(result.findings)
    if result.conflict is not None:
        record["conflict"] = result.conflict.model_dump(mode="json")
    return record
