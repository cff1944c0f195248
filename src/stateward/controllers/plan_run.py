"""Goal-driven plan execution: the plan orders the work, a bounded local ReAct explores each work item,
verification checks what comes out — and none of them can change the goal, reset the budget or skip
an approval.

Every step still leaves as one ControlDecision for ``Runtime.handle``. What the controller remembers
(the validated plan, per-item attempts, the budget ledger, the progress tracker) is its memo, committed
with the step. Work-item states are derived from recorded facts on every decision, never from a model
saying "done": an item completes when its declared output artifact was written by a successful tool
call, and a deliverable only counts once its checks pass.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from stateward.controllers.base import provider_rejection
from stateward.controllers.plan_support import (
    OUTPUT_TOOL,
    PARTIAL_ARTIFACT,
    PARTIAL_TOOL,
    READINESS_TOOL,
    content_of,
    evidence_ids,
    output_ref,
    step_record,
)
from stateward.core.canonical import action_digest
from stateward.core.contract import DecisionContext, Observation, Proposal, SignalFailure, WaitSpec
from stateward.core.decision import ControlDecision, DecisionType, SignalSource, parse_decision
from stateward.core.errors import DecisionParseError, ErrorCode, RunError
from stateward.core.events import EventType, NewEvent
from stateward.core.state import GuardedAction, RequestKind
from stateward.models.base import AnyModel, ModelRequest, Usage, complete
from stateward.planning.budget import BudgetAmount, BudgetError, BudgetLedger, BudgetLimits
from stateward.planning.delivery import (
    AttemptSummary,
    Confidence,
    DecisionOption,
    DegradationRung,
    DeliveryFacts,
    FindingRisk,
    HandoffPackage,
    PartialDelivery,
    ResumePoint,
    choose_rung,
    standard_options,
)
from stateward.planning.goal import GoalContract, RunFacts, assess_goal, check_constraints
from stateward.planning.outcome import (
    Measure,
    MeasureInput,
    Measurement,
    RunOutcome,
    completion_mode,
    criterion_texts,
)
from stateward.planning.patch import (
    AttemptFact,
    AttemptOutcome,
    ExecutionFacts,
    PlanPatchError,
    WorkItemState,
    apply_patch,
    derive_states,
    load_patch,
)
from stateward.planning.plan import Plan, WorkItem, load_plan
from stateward.planning.progress import ProgressTracker, ReactDecisionSummary, SelectedAction
from stateward.planning.readiness import ReadinessContract, evaluate_readiness, parse_evidence
from stateward.planning.termination import (
    FailureFact,
    TerminationDecision,
    TerminationReason,
    TerminationRecord,
    TerminationSnapshot,
)
from stateward.planning.termination import evaluate as evaluate_termination
from stateward.planning.validator import Verdict, validate_plan
from stateward.verify.checks import CheckResult
from stateward.verify.policy import VerificationOutcome
from stateward.verify.policy import decide as verification_decision

PLAN_INSTRUCTIONS = "Reply with one JSON plan document: plan_id, version, goal_id, milestones, work_items."
ITEM_INSTRUCTIONS = (
    "Work on this one work item only, with its tools. Reply with exactly one JSON decision: "
    '{"type": "EXECUTE_TOOL", "action": ..., "args": {...}}. The item is done when its output artifact is '
    "written; saying so does not make it done."
)
Verifier = Callable[[str], Sequence[CheckResult]]
PLAN_REVISIONS = 1  # a plan the validator says to REVISE goes back to the planner this many times
MAX_INPUT_CHARS = 200_000  # recorded outputs handed to one work item's model request, in all
# A verifier that also reads the run's evidence store: every evidence id the run's tool calls returned.
EvidenceVerifier = Callable[[str, frozenset[str]], Sequence[CheckResult]]
# Error codes saying a tool or its service is down (not that the call was wrong): a person can fix these.
UNAVAILABLE = frozenset({"TIMEOUT", "CIRCUIT_OPEN", "TOOL_UNAVAILABLE", "SERVICE_UNAVAILABLE", "RATE_LIMITED"})
ApprovalAction = Callable[[WorkItem, "PlanRunMemo"], GuardedAction]


class ItemRun(BaseModel):
    """What the controller recorded about one work item."""

    model_config = ConfigDict(extra="forbid")

    attempts: list[AttemptFact] = Field(default_factory=list)
    steps: list[int] = Field(default_factory=list)  # the steps whose observations belong to this attempt
    absorbed: int = 0  # how many of those observations the tracker has seen
    tracker: ProgressTracker | None = None
    output: str | None = None  # artifact ref of the accepted output
    correction: str | None = None  # what the last verification asked the worker to fix
    model_calls: int = 0
    tokens: int = 0  # tokens of this attempt's model calls, settled with the attempt


class PlanRunMemo(BaseModel):
    """A plan run's working memory in the run's state: its plan, each item's progress and its ledger."""

    model_config = ConfigDict(extra="forbid")

    plan: Plan | None = None
    items: dict[str, ItemRun] = Field(default_factory=dict)
    running: list[str] = Field(default_factory=list)  # items in flight, at most max_parallel
    turn: int = 0  # round robin over running items, so none starves
    verified: list[str] = Field(default_factory=list)
    ledger: BudgetLedger = BudgetLedger()
    failures: list[FailureFact] = Field(default_factory=list)
    no_progress_streak: int = 0
    history: list[dict[str, WorkItemState]] = Field(default_factory=list)
    delivery: str | None = None  # "accepted" | "partial"
    research_steps: int = 0
    handoff_request: str | None = None  # kept for snapshots written before awaiting_handoff
    awaiting_handoff: bool = False  # a handoff was asked: the next handoff answer is this run's choice
    deviations: list[str] = Field(default_factory=list)  # soft constraints already recorded as not holding
    started_at: datetime | None = None  # the run's first decision: elapsed time is charged from here
    measurement: Measurement = Measurement()  # goal metrics, re-measured when the verified set changes
    measured: int = -1  # len(verified) at the last measurement
    outcome: RunOutcome | None = None  # what the run delivered, once it delivers
    patched_for: list[str] = Field(default_factory=list)  # measured open issues the planner was asked about


@dataclass(frozen=True)
class PlanRunConfig:
    """How a plan run runs its goal: the goal contract, budget limits, the deliverable and its verifier, approval
    binding, capabilities, readiness and parallelism."""

    goal: GoalContract
    budget: BudgetLimits = field(default_factory=BudgetLimits)
    deliverable: str | None = None  # artifact type checked with bounded reflection before it counts
    verifier: Verifier | None = None
    evidence_verifier: EvidenceVerifier | None = None  # preferred over ``verifier``: checks against recorded evidence
    default_react_steps: int = 4
    deliverable_risk: FindingRisk = FindingRisk.LOW
    deliverable_confidence: Confidence = Confidence.MEDIUM
    approval_action: ApprovalAction | None = None  # the exact action an approval-gated item's approval admits
    capabilities: frozenset[str] = field(default_factory=frozenset)
    readiness: ReadinessContract | None = None  # research must satisfy it before a plan is made
    research_tools: tuple[str, ...] = ()
    max_research_steps: int = 8
    max_parallel: int = 1  # work items in flight at once; their steps interleave, each one transaction
    measure: Measure | None = None  # the goal's metrics, measured from verified outputs and recorded evidence
    fact_artifacts: frozenset[str] = frozenset()  # verified outputs that are confirmed fact lists (a rung)
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))  # charges elapsed time


def _tokens(usage: Usage) -> int:
    return usage.input_tokens + usage.output_tokens


def _strings(value: Any, path: str = "") -> list[tuple[str, str]]:
    """Every string inside ``value`` (dicts and lists walked), with its dotted path."""
    if isinstance(value, str):
        return [(path, value)]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in _strings(v, f"{path}.{k}" if path else str(k))]
    if isinstance(value, list | tuple):
        return [s for i, v in enumerate(value) for s in _strings(v, f"{path}[{i}]")]
    return []


def _amount_text(amount: BudgetAmount) -> str:
    return f"{amount.tool_calls} tool calls, {amount.model_calls} model calls, {amount.tokens} tokens"


def start_item_guard(item: WorkItem, memo: PlanRunMemo) -> GuardedAction:
    """By default an approval admits starting exactly this item of exactly this plan version."""
    version = memo.plan.version if memo.plan else None
    args = {"work_item_id": item.work_item_id}
    return GuardedAction(
        tool="start_work_item", args=args, plan_version=version, digest=action_digest("start_work_item", args, version)
    )


class PlanRunController:
    """Runs a Goal Contract through a validated plan DAG: items start when their dependencies are verified, their
    approval is granted and their budget fits; each item is a bounded local ReAct; deliverables are verified; the
    run degrades or hands off instead of looping."""

    mode = "plan_run"

    def __init__(self, planner: AnyModel, worker: AnyModel, config: PlanRunConfig):
        self.planner = planner
        self.worker = worker
        self.config = config

    # -- the decision ---------------------------------------------------------------------------
    def decide(self, ctx: DecisionContext) -> Proposal:
        memo = (
            PlanRunMemo.model_validate(ctx.state.memo)
            if ctx.state.memo
            else PlanRunMemo(ledger=BudgetLedger(limits=self.config.budget))
        )
        self._tick(memo)
        if memo.plan is None:
            return self._before_plan(ctx, memo)
        notes: list[NewEvent] = []
        if memo.awaiting_handoff or memo.handoff_request is not None:
            outcome = self._after_handoff(ctx, memo, notes)
            if outcome is not None:
                return outcome
        for wid in list(memo.running):
            self._absorb(ctx, memo, wid, notes)
        states = self._states(ctx, memo)
        if not memo.running:
            # A running item's own tracker bounds its local loop (NO_PROGRESS / STEP_LIMIT); counting each of
            # its steps here would read any loop longer than the stall window as a stalled plan.
            memo.history = [*memo.history[-9:], states]
        facts = self._goal_facts(ctx, memo)
        self._record_deviations(facts, memo, notes)
        verdict = evaluate_termination(
            TerminationSnapshot(
                step=ctx.state.usage.steps,
                budget=self._live_ledger(memo),
                no_progress_streak=memo.no_progress_streak,
                failures=tuple(memo.failures[-10:]),
                state_history=tuple(memo.history),
                goal=self.config.goal,
                facts=facts,
                next_estimate=self._next_estimate(memo, states),
            )
        )
        if verdict.stops and memo.delivery is None:
            stopped = self._stop(ctx, memo, notes, verdict, states)
            if stopped is not None:
                return stopped
        if memo.delivery == "partial" or memo.delivery == "accepted":
            return self._propose(
                ControlDecision(type=DecisionType.FINISH, reason=f"delivery {memo.delivery}"), memo, notes
            )
        return self._schedule(ctx, memo, notes, states)

    def _before_plan(self, ctx: DecisionContext, memo: PlanRunMemo) -> Proposal:
        """No plan yet: stop if the goal already rules it out, research until ready, then plan."""
        stopped = self._stopped_before_planning(ctx, memo)
        if stopped is not None:
            return stopped
        if self.config.readiness is not None and not self._ready(ctx, memo):
            return self._research(ctx, memo)
        return self._make_plan(ctx, memo)

    def _stop(
        self,
        ctx: DecisionContext,
        memo: PlanRunMemo,
        notes: list[NewEvent],
        verdict: TerminationRecord,
        states: dict[str, WorkItemState],
    ) -> Proposal | None:
        """The termination service said stop: fail, hand off or deliver what is done (a PAUSE is the
        Runtime's, not the controller's)."""
        notes.append(NewEvent(type=EventType.TERMINATION_RECORDED, payload=verdict.model_dump(mode="json")))
        if verdict.decision is TerminationDecision.FAIL:
            return self._propose(
                ControlDecision(type=DecisionType.FAIL, reason=verdict.reason.value.lower()), memo, notes
            )
        if verdict.decision is TerminationDecision.HANDOFF:
            return self._handoff(ctx, memo, notes, verdict.reason.value, verdict.detail, states)
        if verdict.decision is TerminationDecision.DEGRADE:
            return self._deliver_partial(ctx, memo, notes, verdict.reason.value, verdict.detail, states)
        return None

    def _stopped_before_planning(self, ctx: DecisionContext, memo: PlanRunMemo) -> Proposal | None:
        """Research spends budget too: the goal's constraints hold there as well. With no plan yet there
        is nothing to hand over, so a broken hard constraint fails the run."""
        verdict = evaluate_termination(
            TerminationSnapshot(step=ctx.state.usage.steps, goal=self.config.goal, facts=self._goal_facts(ctx, memo))
        )
        if not verdict.stops:
            return None
        notes = [NewEvent(type=EventType.TERMINATION_RECORDED, payload=verdict.model_dump(mode="json"))]
        return self._propose(ControlDecision(type=DecisionType.FAIL, reason=verdict.reason.value.lower()), memo, notes)

    # -- planning ---------------------------------------------------------------------------------
    def _make_plan(self, ctx: DecisionContext, memo: PlanRunMemo) -> Proposal:
        """The planner proposes; the validator decides. A REVISE verdict goes back to the planner with its
        issues, at most PLAN_REVISIONS times; a REJECT, or a plan still not accepted, is refused - never run."""
        usages: list[Usage] = []
        issues: list[dict[str, Any]] = []
        for round_ in range(1 + PLAN_REVISIONS):
            reply = complete(
                self.planner,
                ModelRequest(
                    purpose="plan",
                    goal=self.config.goal.objective,
                    inventory=list(ctx.inventory),
                    visible_actions=ctx.specs(tuple(ctx.actions)),
                    facts={"goal": self.config.goal.model_dump(mode="json"), "validator_issues": issues},
                    instructions=PLAN_INSTRUCTIONS,
                ),
            )
            usages.append(reply.usage)
            rejected = provider_rejection(reply)
            if rejected is not None:
                return self._refused(rejected.code, rejected.message, reply.text, *usages)
            try:
                plan = load_plan(reply.text)
            except RunError as exc:
                return self._refused(exc.code, exc.message, reply.text, *usages)
            remaining = memo.ledger.remaining().to_plan_budget()
            report = validate_plan(
                plan, capabilities=self.config.capabilities or set(ctx.actions), budget=remaining, goal=self.config.goal
            )
            if report.verdict is Verdict.ACCEPT:
                break
            if report.verdict is Verdict.REJECT or round_ == PLAN_REVISIONS:
                found = "; ".join(f"{i.code}({i.work_item_id})" for i in report.issues[:5])
                return self._refused(f"PLAN_{report.verdict.value}", found, reply.text, *usages)
            issues = [i.model_dump(mode="json") for i in report.issues[:20]]
        memo.plan = plan
        tokens = sum(_tokens(u) for u in usages)
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
        proposal = self.decide_with(ctx, memo, [note])
        return Proposal(
            signal=proposal.signal,
            source=proposal.source,
            visible_actions=proposal.visible_actions,
            model_usage=(*usages, *proposal.model_usage),
            memo=proposal.memo,
            notes=proposal.notes,
            wait=proposal.wait,
        )

    # -- research, until the readiness contract holds ---------------------------------------------------
    def _ready(self, ctx: DecisionContext, memo: PlanRunMemo) -> bool:
        """Computed over the latest submitted evidence and the evidence the run really recorded."""
        contract = self.config.readiness
        assert contract is not None
        submitted = [o for o in ctx.observations if o.action == READINESS_TOOL and o.status == "SUCCESS"]
        if not submitted:
            return False
        recorded = frozenset(e for o in ctx.observations for e in evidence_ids(o.result))
        verdict = evaluate_readiness(contract, parse_evidence(str(submitted[-1].args.get("evidence", ""))), recorded)
        return verdict.ready

    def _research(self, ctx: DecisionContext, memo: PlanRunMemo) -> Proposal:
        contract = self.config.readiness
        assert contract is not None
        if memo.research_steps >= self.config.max_research_steps:
            decision = ControlDecision(type=DecisionType.FAIL, reason="readiness_not_reached")
            return self._propose(decision, memo, [])
        memo.research_steps += 1
        submitted = [o for o in ctx.observations if o.action == READINESS_TOOL and o.status == "SUCCESS"]
        gaps = None
        if submitted:
            recorded = frozenset(e for o in ctx.observations for e in evidence_ids(o.result))
            verdict = evaluate_readiness(
                contract, parse_evidence(str(submitted[-1].args.get("evidence", ""))), recorded
            )
            gaps = verdict.model_dump(mode="json")
        visible = (*(t for t in self.config.research_tools if t in ctx.actions), READINESS_TOOL)
        reply = complete(
            self.worker,
            ctx.request(
                purpose="decide",
                goal=f"research for {contract.stage}: {self.config.goal.objective}",
                inventory=list(ctx.inventory),
                visible_actions=ctx.specs(visible),
                facts={"readiness_contract": contract.model_dump(mode="json"), "readiness_gaps": gaps},
                instructions=ITEM_INSTRUCTIONS,
            ),
        )
        memo.ledger = memo.ledger.charge(BudgetAmount(model_calls=1, tokens=_tokens(reply.usage)))
        note = NewEvent(type=EventType.READINESS_EVALUATED, payload={"stage": contract.stage, "verdict": gaps})
        return Proposal(
            signal=reply.text,
            source=SignalSource.MODEL,
            visible_actions=frozenset(visible),
            model_usage=(reply.usage,),
            memo=memo.model_dump(mode="json"),
            notes=[note],
        )

    def decide_with(self, ctx: DecisionContext, memo: PlanRunMemo, notes: list[NewEvent]) -> Proposal:
        """Continue deciding in the same step once a plan was recorded."""
        inner = self.decide(
            DecisionContext(
                state=ctx.state.model_copy(update={"memo": memo.model_dump(mode="json")}),
                observations=ctx.observations,
                inventory=ctx.inventory,
                actions=ctx.actions,
            )
        )
        return Proposal(
            signal=inner.signal,
            source=inner.source,
            visible_actions=inner.visible_actions,
            model_usage=inner.model_usage,
            memo=inner.memo,
            notes=[*notes, *inner.notes],
            wait=inner.wait,
        )

    # -- facts ------------------------------------------------------------------------------------
    def _facts(self, ctx: DecisionContext, memo: PlanRunMemo) -> ExecutionFacts:
        approved = set(ctx.state.granted)  # ever approved: an item stays approved after its call used the grant
        plan = memo.plan
        assert plan is not None
        gate = self.config.approval_action or start_item_guard
        return ExecutionFacts(
            attempts={wid: tuple(run.attempts) for wid, run in memo.items.items()},
            verified=tuple(memo.verified),
            # An approval can only concern an item whose inputs exist: its dependencies are verified.
            approved=tuple(
                w.work_item_id
                for w in plan.work_items
                if w.approval_required
                and set(w.dependencies) <= set(memo.verified)
                and gate(w, memo).digest in approved
            ),
            remaining_budget=memo.ledger.remaining().to_plan_budget(),
        )

    def _goal_facts(self, ctx: DecisionContext, memo: PlanRunMemo) -> RunFacts:
        """What the goal contract is checked against: the runtime's own counters, the elapsed time charged
        and the metrics measured from verified outputs (an unmeasured metric stays absent: neither met nor
        violated)."""
        usage = ctx.state.usage
        self._measure(ctx, memo)
        return RunFacts(
            tool_calls=usage.tool_attempts,
            model_calls=usage.model_calls,
            tokens=usage.input_tokens + usage.output_tokens,
            elapsed_seconds=int(memo.ledger.used.elapsed_seconds),
            capabilities_used=tuple(sorted({o.action for o in ctx.observations})),
            artifacts=self._verified_types(memo),
            metrics=memo.measurement.metrics,
        )

    def _measure(self, ctx: DecisionContext, memo: PlanRunMemo) -> None:
        """Re-measure the goal's metrics when the set of verified outputs changed (not on every step)."""
        if self.config.measure is None or memo.plan is None or memo.measured == len(memo.verified):
            return
        outputs = self._verified_contents(ctx, memo)
        recorded = frozenset(e for o in ctx.observations for e in evidence_ids(o.result))
        memo.measurement = self.config.measure(MeasureInput(outputs=outputs, recorded_evidence=recorded))
        memo.measured = len(memo.verified)

    def _verified_contents(
        self, ctx: DecisionContext, memo: PlanRunMemo, only: set[str] | None = None
    ) -> dict[str, str]:
        """The content of verified outputs (of the items in ``only``, if given), by artifact type, as recorded."""
        wanted = [w for w in memo.verified if only is None or w in only]
        refs = {memo.items[w].output for w in wanted if w in memo.items and memo.items[w].output}
        return {
            ref.rpartition(":v")[0]: content_of(o)
            for o in ctx.observations
            if o.status == "SUCCESS"
            for ref in o.artifacts
            if ref in refs
        }

    def _inputs(self, ctx: DecisionContext, memo: PlanRunMemo, item: WorkItem) -> dict[str, str]:
        """What a work item is handed to work from: the recorded outputs of the items it depends on, directly
        or not, up to MAX_INPUT_CHARS in all (what does not fit is left out, never cut mid-document)."""
        assert memo.plan is not None
        deps = {w.work_item_id: w.dependencies for w in memo.plan.work_items}
        upstream: set[str] = set()
        todo = list(item.dependencies)
        while todo:
            wid = todo.pop()
            if wid not in upstream:
                upstream.add(wid)
                todo.extend(deps.get(wid, ()))
        out: dict[str, str] = {}
        used = 0
        for name, content in self._verified_contents(ctx, memo, upstream).items():
            if used + len(content) > MAX_INPUT_CHARS:
                continue
            out[name] = content
            used += len(content)
        return out

    def _tick(self, memo: PlanRunMemo) -> None:
        """Charge wall-clock time since the run's first decision; kept in the ledger, so it survives pauses and
        other processes and never goes back."""
        now = self.config.clock()
        if memo.started_at is None:
            memo.started_at = now
        elapsed = max((now - memo.started_at).total_seconds(), 0.0)
        charged = memo.ledger.used.elapsed_seconds
        if elapsed > charged:
            memo.ledger = memo.ledger.charge(BudgetAmount(elapsed_seconds=elapsed - charged))

    @staticmethod
    def _spent(run: ItemRun) -> BudgetAmount:
        """What the current attempt of an item has spent so far; starting it was one attempt."""
        tools = run.tracker.steps_taken if run.tracker else 0
        return BudgetAmount(tool_calls=tools, model_calls=run.model_calls, tokens=run.tokens, attempts=1)

    def _live_ledger(self, memo: PlanRunMemo) -> BudgetLedger:
        """The ledger as if every running attempt settled now: the budget rule sees spending as it happens,
        not only when an attempt ends."""
        ledger = memo.ledger
        for wid in memo.running:
            if wid in ledger.reserved and wid in memo.items:
                ledger = ledger.settle(wid, self._spent(memo.items[wid]))
        return ledger

    def _record_deviations(self, facts: RunFacts, memo: PlanRunMemo, notes: list[NewEvent]) -> None:
        """A soft constraint that stops holding is recorded once, with the facts it was judged on."""
        for violation in check_constraints(self.config.goal, facts):
            if violation.hard or violation.constraint_id in memo.deviations:
                continue
            memo.deviations.append(violation.constraint_id)
            payload = {**violation.model_dump(mode="json"), "facts": facts.model_dump(mode="json")}
            notes.append(NewEvent(type=EventType.CONSTRAINT_DEVIATION_RECORDED, payload=payload))

    def _next_estimate(self, memo: PlanRunMemo, states: dict[str, WorkItemState]) -> BudgetAmount | None:
        plan = memo.plan
        assert plan is not None
        for item in plan.work_items:
            if (
                states.get(item.work_item_id) in (WorkItemState.READY, WorkItemState.BLOCKED)
                and item.work_item_id not in memo.ledger.reserved
            ):
                return BudgetAmount.from_estimate(item.estimated_cost)
        return None

    # -- scheduling ---------------------------------------------------------------------------------
    def _schedule(
        self, ctx: DecisionContext, memo: PlanRunMemo, notes: list[NewEvent], states: dict[str, WorkItemState]
    ) -> Proposal:
        replanned = self._replan_on_new_facts(ctx, memo, notes)
        if replanned is not None:
            return replanned
        plan = memo.plan
        assert plan is not None
        waiting: WorkItem | None = None
        for item in plan.work_items:  # plan order: the oldest ready item goes first, none starves
            if len(memo.running) >= max(1, self.config.max_parallel):
                break
            state = states[item.work_item_id]
            if state is WorkItemState.WAITING_FOR_APPROVAL and waiting is None:
                waiting = item
            elif state in (WorkItemState.READY, WorkItemState.RETRY_WAIT) and item.work_item_id not in memo.running:
                refused = self._start(ctx, memo, notes, item)
                if refused is not None:
                    return refused
        if memo.running:
            wid = memo.running[memo.turn % len(memo.running)]
            memo.turn += 1
            return self._item_step(ctx, memo, wid, notes)
        if waiting is not None:  # nothing else can move: now the run really waits for the person
            return self._ask_approval(waiting, memo, notes)
        if all(s is WorkItemState.SUCCEEDED for s in states.values()):
            return self._finish(ctx, memo, notes, states)
        stuck = sorted(w for w, s in states.items() if s is not WorkItemState.SUCCEEDED)
        replanned = self._replan(ctx, memo, notes, states)
        if replanned is not None:
            return replanned
        down = sorted({f.action for f in memo.failures if f.error_code in UNAVAILABLE})
        if down and memo.delivery is None:
            # A source the plan needs is down and the fallbacks did not replace it: a person has to restore
            # it or accept less - delivering as if the gap were final would hide a fixable cause.
            detail = f"cannot proceed: {stuck}; unavailable after retries and fallbacks: {', '.join(down)}"
            return self._handoff(ctx, memo, notes, "DEPENDENCY_UNAVAILABLE", detail, states)
        return self._deliver_partial(ctx, memo, notes, "PLAN_STALLED", f"cannot proceed: {stuck}", states)

    def _replan(
        self, ctx: DecisionContext, memo: PlanRunMemo, notes: list[NewEvent], states: dict[str, WorkItemState]
    ) -> Proposal | None:
        """Ask the planner for a patch when the plan cannot go on; None when it may not or did not help.

        A refused patch ends the run with a partial delivery (the plan in hand cannot go on either).
        """
        failed = {
            w: [a.error_class for a in memo.items[w].attempts]
            for w, s in states.items()
            if s in (WorkItemState.FAILED, WorkItemState.BLOCKED) and w in memo.items
        }
        attempt = self._patch(ctx, memo, notes, {"failed": failed})
        if attempt is None:
            return None
        error, usage = attempt
        if error is not None:
            return self._with_usage(self._deliver_partial(ctx, memo, notes, "REPLAN_REFUSED", error, states), usage)
        return self._with_usage(self.decide_with(ctx, memo, notes), usage)

    def _replan_on_new_facts(self, ctx: DecisionContext, memo: PlanRunMemo, notes: list[NewEvent]) -> Proposal | None:
        """A measured fact changed what the plan assumed (e.g. a repository turned out unreadable): the planner
        may patch the plan once per new fact. A refused patch is recorded and the plan in hand goes on."""
        new = [u for u in memo.measurement.unresolved if u not in memo.patched_for]
        if not new or memo.running:
            return None
        memo.patched_for.extend(new)
        attempt = self._patch(ctx, memo, notes, {"new_facts": new})
        if attempt is None:
            return None
        error, usage = attempt
        if error is not None:
            return self._with_usage(self._schedule(ctx, memo, notes, self._states(ctx, memo)), usage)
        return self._with_usage(self.decide_with(ctx, memo, notes), usage)

    def _patch(
        self, ctx: DecisionContext, memo: PlanRunMemo, notes: list[NewEvent], why: dict[str, Any]
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
            self.planner,
            ModelRequest(
                purpose="replan",
                goal=self.config.goal.objective,
                inventory=list(ctx.inventory),
                observations=[o.model_dump(mode="json") for o in ctx.observations[-20:]],
                visible_actions=ctx.specs(tuple(ctx.actions)),
                facts={"plan": plan.model_dump(mode="json"), **why, "verified": list(memo.verified)},
                instructions="Reply with one JSON plan patch: base_version, reason, evidence_ids, changed/added/"
                "removed items and kept_completed.",
            ),
        )
        memo.ledger = memo.ledger.charge(BudgetAmount(replans=1, model_calls=1, tokens=_tokens(reply.usage)))
        try:
            if reply.rejection_code is not None:
                raise PlanPatchError(
                    reply.rejection_message or reply.rejection_code, code=ErrorCode.parse(reply.rejection_code)
                )
            patch = load_patch(reply.text)
            new_plan = apply_patch(plan, patch, set(memo.verified), memo.ledger.used.replans - 1, limit)
            report = validate_plan(
                new_plan,
                capabilities=self.config.capabilities or set(ctx.actions),
                goal=self.config.goal,
                completed=memo.verified,
                budget=memo.ledger.remaining().to_plan_budget(),
            )
            if report.verdict is not Verdict.ACCEPT:
                raise PlanPatchError(
                    f"patched plan is {report.verdict.value}: "
                    + "; ".join(f"{i.code}({i.work_item_id})" for i in report.issues[:5])
                )
        except RunError as exc:
            notes.append(
                NewEvent(
                    type=EventType.PLAN_RECORDED,
                    payload={"refused_patch": exc.code, "message": exc.message, "plan_version": plan.version},
                )
            )
            return exc.message, reply.usage
        redefined = {w.work_item_id for w in (*patch.changed_items, *patch.added_items)} | set(patch.removed_items)
        memo.items = {w: run for w, run in memo.items.items() if w not in redefined}
        memo.plan = new_plan
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
        return None, reply.usage

    def _ask_approval(self, item: WorkItem, memo: PlanRunMemo, notes: list[NewEvent]) -> Proposal:
        guard = (self.config.approval_action or start_item_guard)(item, memo)
        question = (
            f"Work item {item.work_item_id} ({item.title}, risk {item.risk_level.value}) needs approval "
            f"before it runs: {guard.tool} {json.dumps(guard.args, sort_keys=True)}."
        )
        decision = ControlDecision(type=DecisionType.REQUEST_USER_INPUT, question=question)
        return self._propose(decision, memo, notes, wait=WaitSpec(guard=guard, kind=RequestKind.APPROVAL))

    def _start(self, ctx: DecisionContext, memo: PlanRunMemo, notes: list[NewEvent], item: WorkItem) -> Proposal | None:
        """Reserve the item's budget and put it in flight; a partial delivery if the budget cannot carry it."""
        wid = item.work_item_id
        try:
            memo.ledger = memo.ledger.reserve(wid, BudgetAmount.from_estimate(item.estimated_cost))
        except BudgetError as exc:  # an item estimated above what is left never starts
            notes.append(
                NewEvent(
                    type=EventType.WORK_ITEM_BLOCKED,
                    payload={"work_item_id": wid, "code": exc.code, "message": exc.message},
                )
            )
            return self._deliver_partial(ctx, memo, notes, "BUDGET_EXHAUSTED", exc.message, self._states(ctx, memo))
        run = memo.items.setdefault(wid, ItemRun())
        run.attempts.append(AttemptFact(outcome=AttemptOutcome.RUNNING))
        run.steps, run.absorbed = [], 0  # a new attempt: none of its observations has been seen yet
        run.tracker = ProgressTracker.start(max(1, item.max_react_steps or self.config.default_react_steps))
        memo.running.append(wid)
        notes.append(
            NewEvent(
                type=EventType.WORK_ITEM_STARTED,
                payload={
                    "work_item_id": wid,
                    "attempt": len(run.attempts),
                    "reserved": memo.ledger.reserved[wid].model_dump(),
                },
            )
        )
        return None

    # -- one local ReAct step of the current item ---------------------------------------------------
    def _item_step(self, ctx: DecisionContext, memo: PlanRunMemo, wid: str, notes: list[NewEvent]) -> Proposal:
        item = self._item(memo, wid)
        run = memo.items[wid]
        assert run.tracker is not None
        before = run.tracker.before_step(remaining=memo.ledger.remaining())
        if before.should_stop:
            self._end_attempt(memo, item, AttemptOutcome.FAILED, before.signal.value, notes)
            return self.decide_with(ctx, memo, notes)
        visible = (*(c for c in item.required_capabilities if c in ctx.actions), OUTPUT_TOOL)
        mine = [o for o in ctx.observations if o.step in run.steps]
        request = ModelRequest(
            purpose="decide",
            goal=f"{item.work_item_id}: {item.title}",
            inventory=list(ctx.inventory),
            observations=[o.model_dump(mode="json") for o in mine],
            visible_actions=ctx.specs(visible),
            facts={
                "work_item": item.model_dump(mode="json"),
                "outputs": self._outputs(memo),
                "inputs": self._inputs(ctx, memo, item),
                "correction": run.correction,
                "remaining_steps": run.tracker.remaining_steps(),
            },
            instructions=ITEM_INSTRUCTIONS,
            correction=ctx.state.correction,  # the Runtime refused the last proposal: say why, once
        )
        left = self._live_ledger(memo).remaining().tokens
        if left is not None and request.json_chars() // 4 > left:
            # The request alone would not fit what is left: do not send it (tokens are spent, not refunded).
            detail = f"the next model request needs ~{request.json_chars() // 4} tokens, {left} left"
            return self._deliver_partial(ctx, memo, notes, "BUDGET_EXHAUSTED", detail, self._states(ctx, memo))
        reply = complete(self.worker, request)
        run.model_calls += 1
        run.tokens += _tokens(reply.usage)
        rejected = provider_rejection(reply)
        if rejected is not None:
            return Proposal(
                signal=rejected,
                source=SignalSource.MODEL,
                visible_actions=frozenset(visible),
                model_usage=(reply.usage,),
                memo=memo.model_dump(mode="json"),
                notes=notes,
            )
        try:
            decision = parse_decision(reply.text)
        except DecisionParseError:
            decision = None  # the Runtime names the parse failure; we never guess
        if decision is not None and decision.type is not DecisionType.EXECUTE_TOOL:
            # A worker saying "done" (or asking to stop) ends its attempt; it never completes the item.
            self._end_attempt(memo, item, AttemptOutcome.FAILED, "MODEL_DECLARED_STOP", notes)
            return self._with_usage(self.decide_with(ctx, memo, notes), reply.usage)
        outside = self._out_of_scope(decision)
        if outside is not None:
            # The goal's scope holds for what a call touches, not only for which tool it is.
            return Proposal(
                signal=SignalFailure(code=ErrorCode.OUT_OF_SCOPE_ARGUMENT, message=outside, raw=reply.text[:2000]),
                source=SignalSource.MODEL,
                visible_actions=frozenset(visible),
                model_usage=(reply.usage,),
                memo=memo.model_dump(mode="json"),
                notes=notes,
            )
        run.steps.append(ctx.state.usage.steps + 1)  # the observation of this step belongs to this item
        if decision is not None and decision.action:
            # What is kept of the decision: facts and a short stated reason, never hidden reasoning.
            summary = ReactDecisionSummary(
                decision_id=f"{item.work_item_id}:{ctx.state.usage.steps + 1}",
                work_item_id=item.work_item_id,
                objective=item.title,
                observation_refs=tuple(f"step:{o.step}" for o in mine[-5:]),
                selected_action=SelectedAction(tool=decision.action, arguments=decision.args or {}),
                reason_summary=(decision.reason or "no reason given")[:280],
                remaining_steps=run.tracker.remaining_steps(),
            )
            notes.append(NewEvent(type=EventType.REACT_DECISION, payload=summary.model_dump(mode="json")))
        return Proposal(
            signal=reply.text,
            source=SignalSource.MODEL,
            visible_actions=frozenset(visible),
            model_usage=(reply.usage,),
            memo=memo.model_dump(mode="json"),
            notes=notes,
        )

    def _out_of_scope(self, decision: ControlDecision | None) -> str | None:
        """Why a proposed call's arguments reach outside the goal's scope (an ``out_of_scope`` name, or a path
        under one, as any string argument), or None."""
        fenced = self.config.goal.scope.out_of_scope
        if decision is None or not fenced or not decision.args:
            return None
        for key, value in _strings(decision.args):
            for name in fenced:
                if value == name or value.startswith((f"{name}/", f"{name}:")):
                    return f"argument {key}={value!r} is outside the goal's scope ({name})"
        return None

    def _absorb(self, ctx: DecisionContext, memo: PlanRunMemo, wid: str, notes: list[NewEvent]) -> None:
        """Fold a running item's new observations into its tracker; complete or stop it on facts."""
        item = self._item(memo, wid)
        run = memo.items[wid]
        assert run.tracker is not None
        mine = [o for o in ctx.observations if o.step in run.steps]
        for obs in mine[run.absorbed :]:
            run.absorbed += 1
            run.tracker, verdict = run.tracker.observe(step_record(obs), remaining=memo.ledger.remaining())
            if obs.status != "SUCCESS" and obs.error_code:
                memo.failures.append(FailureFact(action=obs.action, error_code=obs.error_code))
            output = output_ref(obs, item.output_spec.artifact_type)
            if output is not None:
                self._complete(ctx, memo, item, output, obs, notes)
                return
            if verdict.should_stop:
                self._end_attempt(
                    memo,
                    item,
                    AttemptOutcome.FAILED,
                    verdict.signal.value,
                    notes,
                    partial=run.tracker.partial_result(verdict).model_dump(mode="json"),
                )
                return

    def _complete(
        self, ctx: DecisionContext, memo: PlanRunMemo, item: WorkItem, ref: str, obs: Observation, notes: list[NewEvent]
    ) -> None:
        run = memo.items[item.work_item_id]
        has_verifier = self.config.verifier is not None or self.config.evidence_verifier is not None
        checked = item.output_spec.artifact_type == self.config.deliverable and has_verifier
        if checked and not self._verify_deliverable(ctx, memo, item, ref, obs, notes):
            return
        run.output = ref
        memo.verified.append(item.work_item_id)
        memo.no_progress_streak = 0
        self._end_attempt(memo, item, AttemptOutcome.COMPLETED, None, notes)

    def _verify_deliverable(
        self, ctx: DecisionContext, memo: PlanRunMemo, item: WorkItem, ref: str, obs: Observation, notes: list[NewEvent]
    ) -> bool:
        """Every check on every version; at most the budgeted repairs; UNKNOWN never passes. An evidence
        verifier checks the cited evidence against what the run recorded, not against what exists."""
        content = content_of(obs)
        if self.config.evidence_verifier is not None:
            recorded = frozenset(e for o in ctx.observations for e in evidence_ids(o.result))
            results = list(self.config.evidence_verifier(content, recorded))
        else:
            assert self.config.verifier is not None
            results = list(self.config.verifier(content))
        name = item.output_spec.artifact_type
        used = memo.ledger.reflections.get(name, 0)
        limit = memo.ledger.limits.max_reflections_per_artifact
        policy = verification_decision(
            results,
            used,
            1 if limit is None else limit,
            self.config.deliverable_risk,
            self.config.deliverable_confidence,
        )
        notes.append(
            NewEvent(
                type=EventType.VERIFICATION_RECORDED,
                payload={
                    "artifact": ref,
                    "outcome": policy.outcome.value,
                    "reason_code": policy.reason_code,
                    "checks": [{"name": r.name, "verdict": r.verdict.value, "detail": r.detail} for r in results],
                },
            )
        )
        if policy.outcome is VerificationOutcome.ACCEPT:
            return True
        run = memo.items[item.work_item_id]
        if policy.outcome is VerificationOutcome.REPAIR_ONCE:
            memo.ledger = memo.ledger.record_reflection(name)
            # The fresh tracker below restarts the step count: charge the drafting loop's tool calls now, or
            # settling the item would record only the repair's calls and the ledger would under-count.
            spent = run.tracker.steps_taken if run.tracker else 0
            memo.ledger = memo.ledger.charge(BudgetAmount(tool_calls=spent))
            run.correction = "; ".join(policy.reasons)
            run.tracker = ProgressTracker.start(max(1, item.max_react_steps or self.config.default_react_steps))
            run.steps, run.absorbed = [], 0  # the repair is a fresh local loop that must write a new version
            return False
        self._end_attempt(memo, item, AttemptOutcome.FAILED, f"VERIFICATION_{policy.outcome.value}", notes)
        return False

    def _end_attempt(
        self,
        memo: PlanRunMemo,
        item: WorkItem,
        outcome: AttemptOutcome,
        error: str | None,
        notes: list[NewEvent],
        partial: dict[str, Any] | None = None,
    ) -> None:
        run = memo.items[item.work_item_id]
        run.attempts[-1] = AttemptFact(outcome=outcome, error_class=error)
        memo.ledger = memo.ledger.settle(item.work_item_id, self._spent(run))
        run.model_calls = run.tokens = 0
        # The attempt's loop state is spent: keeping it would make every later step rewrite it.
        run.tracker, run.steps, run.absorbed = None, [], 0
        if error == "NO_PROGRESS":
            memo.no_progress_streak += 1
        memo.running = [w for w in memo.running if w != item.work_item_id]
        notes.append(
            NewEvent(
                type=EventType.WORK_ITEM_ENDED,
                payload={
                    "work_item_id": item.work_item_id,
                    "outcome": outcome.value,
                    "error": error,
                    "partial": partial,
                    "output": run.output,
                },
            )
        )

    # -- delivering -------------------------------------------------------------------------------
    def _deliver_partial(
        self,
        ctx: DecisionContext,
        memo: PlanRunMemo,
        notes: list[NewEvent],
        code: str,
        detail: str,
        states: dict[str, WorkItemState],
        undecidable: tuple[str, ...] = (),
    ) -> Proposal:
        """Deliver the best rung the verified facts support, with its gaps and what continuing would cost."""
        plan = memo.plan
        assert plan is not None
        done = tuple(w for w, s in states.items() if s is WorkItemState.SUCCEEDED)
        missing = tuple(w for w, s in states.items() if s is not WorkItemState.SUCCEEDED)
        rung = choose_rung(self._delivery_facts(memo, states))
        to_continue = self._estimate(plan, missing)
        delivery = PartialDelivery(
            original_goal=self.config.goal.objective,
            rung=rung,
            reason_code=code,
            reason=detail or code,
            done_scope=done,
            missing_scope=missing,
            undecidable=(*undecidable, *memo.measurement.unresolved),
            needed_to_continue=(
                *(f"complete {w}" for w in missing),
                *([f"budget to continue: {_amount_text(to_continue)}"] if missing else []),
            ),
            budget_used=memo.ledger.used,
            artifact_refs=tuple(self._outputs(memo).values()),
        )
        memo.delivery = "partial"
        for wid in list(memo.running):
            self._end_attempt(memo, self._item(memo, wid), AttemptOutcome.FAILED, code, notes)
        report = self._report_ref(memo)
        final = report or f"{PARTIAL_ARTIFACT}:v{ctx.state.artifacts.get(PARTIAL_ARTIFACT, 0) + 1}"
        self._record_outcome(memo, rung, code, final, (*undecidable, *memo.measurement.unresolved), to_continue)
        decision = ControlDecision(
            type=DecisionType.EXECUTE_TOOL, action=PARTIAL_TOOL, args={"content": delivery.model_dump_json()}
        )
        return self._propose(decision, memo, notes, visible=frozenset({PARTIAL_TOOL}))

    def _finish(
        self, ctx: DecisionContext, memo: PlanRunMemo, notes: list[NewEvent], states: dict[str, WorkItemState]
    ) -> Proposal:
        """Every item verified: the goal's success criteria, not the item count, decide whether it is done."""
        goal = self.config.goal
        assessment = assess_goal(goal, self._goal_facts(ctx, memo))
        if assessment.unmet:
            texts = criterion_texts({c.criterion_id: c.description for c in goal.success_criteria}, assessment.unmet)
            detail = f"success criteria not met: {', '.join(assessment.unmet)}"
            return self._deliver_partial(ctx, memo, notes, "SUCCESS_CRITERIA_UNMET", detail, states, texts)
        rung = choose_rung(self._delivery_facts(memo, states))
        self._record_outcome(memo, rung, "GOAL_MET", self._report_ref(memo), memo.measurement.unresolved, None)
        memo.delivery = "accepted"
        reason = "success criteria met" + (" with open issues" if memo.measurement.unresolved else "")
        return self._propose(ControlDecision(type=DecisionType.FINISH, reason=reason), memo, notes)

    def _record_outcome(
        self,
        memo: PlanRunMemo,
        rung: DegradationRung,
        code: str,
        final: str | None,
        unresolved: tuple[str, ...],
        to_continue: BudgetAmount | None,
    ) -> None:
        goal = self.config.goal
        facts = RunFacts(metrics=memo.measurement.metrics, artifacts=self._verified_types(memo))
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

    def _delivery_facts(self, memo: PlanRunMemo, states: dict[str, WorkItemState]) -> DeliveryFacts:
        """Only verified outputs count: the report if its checks passed, fact lists if their items were verified."""
        unresolved = memo.measurement.unresolved
        return DeliveryFacts(
            expected_scope=(*states, *unresolved),
            covered_scope=tuple(w for w, s in states.items() if s is WorkItemState.SUCCEEDED),
            report_verified=self._report_ref(memo) is not None,
            verified_facts=sum(1 for t in self._verified_types(memo) if t in self.config.fact_artifacts),
            completed_artifacts=tuple(self._outputs(memo).values()),
        )

    def _report_ref(self, memo: PlanRunMemo) -> str | None:
        """The verified deliverable's artifact ref, if the deliverable passed verification."""
        if self.config.deliverable is None or memo.plan is None:
            return None
        for item in memo.plan.work_items:
            if item.output_spec.artifact_type == self.config.deliverable and item.work_item_id in memo.verified:
                return memo.items[item.work_item_id].output
        return None

    def _verified_types(self, memo: PlanRunMemo) -> tuple[str, ...]:
        outputs = self._outputs(memo)
        return tuple(sorted({outputs[w].rpartition(":v")[0] for w in memo.verified if w in outputs}))

    @staticmethod
    def _estimate(plan: Plan, missing: Sequence[str]) -> BudgetAmount:
        """What the unfinished items would still need, from the plan's own estimates."""
        total = BudgetAmount()
        for item in plan.work_items:
            if item.work_item_id in missing:
                total = total + BudgetAmount.from_estimate(item.estimated_cost)
        return total

    def _handoff(
        self,
        ctx: DecisionContext,
        memo: PlanRunMemo,
        notes: list[NewEvent],
        code: str,
        detail: str,
        states: dict[str, WorkItemState],
    ) -> Proposal:
        plan = memo.plan
        assert plan is not None
        package = HandoffPackage(
            reason_code=code,
            reason=detail or code,
            goal=self.config.goal.objective,
            plan_version=plan.version,
            completed_items=tuple(w for w, s in states.items() if s is WorkItemState.SUCCEEDED),
            blocked_items=tuple(w for w, s in states.items() if s in (WorkItemState.BLOCKED, WorkItemState.FAILED)),
            artifact_refs=tuple(self._outputs(memo).values()),
            attempt_history=tuple(
                AttemptSummary(
                    work_item_id=wid,
                    attempts=len(run.attempts),
                    last_error_code=run.attempts[-1].error_class if run.attempts else None,
                )
                for wid, run in memo.items.items()
            ),
            evidence_refs=tuple(dict.fromkeys(e for o in ctx.observations for e in evidence_ids(o.result))),
            options=self._handoff_options(code),
            resume_point=ResumePoint(
                checkpoint_seq=ctx.state.usage.steps,
                work_item_id=memo.running[0] if memo.running else None,
                plan_version=plan.version,
                budget=memo.ledger,
            ),
        )
        memo.awaiting_handoff = True  # the Runtime mints the request id; the answer says its kind
        notes.append(NewEvent(type=EventType.HANDOFF_RECORDED, payload=package.model_dump(mode="json")))
        decision = ControlDecision(type=DecisionType.REQUEST_USER_INPUT, question=package.to_question())
        return self._propose(decision, memo, notes, wait=WaitSpec(kind=RequestKind.HANDOFF, options=package.option_ids))

    @staticmethod
    def _handoff_options(code: str) -> tuple[DecisionOption, ...]:
        """No one at a handoff can authorise past a hard constraint of the goal: only ending is offered."""
        options = standard_options()
        if code == TerminationReason.HARD_CONSTRAINT_VIOLATED.value:
            return tuple(o for o in options if o.option_id != "continue_authorized")
        return options

    def _after_handoff(self, ctx: DecisionContext, memo: PlanRunMemo, notes: list[NewEvent]) -> Proposal | None:
        """A person chose an option: it is the only way a handed-off run moves on."""
        answer = ctx.state.last_answer
        if answer is None:
            return None
        # Escalation keeps the kind, so an escalated handoff's answer is taken as well.
        taken = answer.kind is RequestKind.HANDOFF if memo.awaiting_handoff else answer.answers(memo.handoff_request)
        if not taken:
            return None
        choice = (answer.text or "").strip().lower()
        memo.handoff_request, memo.awaiting_handoff = None, False
        notes.append(NewEvent(type=EventType.HANDOFF_ANSWERED, payload={"option": choice, "by": answer.by}))
        if choice == "cancel":
            return self._propose(ControlDecision(type=DecisionType.FAIL, reason="cancelled_at_handoff"), memo, notes)
        if choice == "accept_partial":
            return self._deliver_partial(
                ctx, memo, notes, "ACCEPTED_PARTIAL", "a person accepted the partial scope", self._states(ctx, memo)
            )
        memo.failures.clear()
        memo.no_progress_streak = 0
        memo.history.clear()
        return None

    # -- helpers ------------------------------------------------------------------------------------
    @staticmethod
    def _item(memo: PlanRunMemo, wid: str) -> WorkItem:
        assert memo.plan is not None
        return next(w for w in memo.plan.work_items if w.work_item_id == wid)

    def _states(self, ctx: DecisionContext, memo: PlanRunMemo) -> dict[str, WorkItemState]:
        assert memo.plan is not None
        return derive_states(memo.plan, self._facts(ctx, memo))

    def _outputs(self, memo: PlanRunMemo) -> dict[str, str]:
        return {wid: run.output for wid, run in memo.items.items() if run.output}

    def _propose(
        self,
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
            memo=memo.model_dump(mode="json"),
            notes=notes,
            wait=wait,
        )

    @staticmethod
    def _refused(code: str, message: str, raw: str, *usages: Usage) -> Proposal:
        return Proposal(
            signal=SignalFailure(code=code, message=message, raw=raw[:2000]),
            source=SignalSource.PLAN_STEP,
            visible_actions=frozenset(),
            model_usage=usages,
        )

    @staticmethod
    def _with_usage(proposal: Proposal, usage: Usage) -> Proposal:
        return Proposal(
            signal=proposal.signal,
            source=proposal.source,
            visible_actions=proposal.visible_actions,
            model_usage=(usage, *proposal.model_usage),
            memo=proposal.memo,
            notes=proposal.notes,
            wait=proposal.wait,
        )
