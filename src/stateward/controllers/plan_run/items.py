"""Executing work items: starting one against its reserved budget, its bounded local ReAct steps,
folding its observations into its tracker, verifying its output and ending its attempt."""

from __future__ import annotations

import json
from typing import Any

from stateward.controllers.base import provider_rejection
from stateward.controllers.plan_run.acceptance import findings_text
from stateward.controllers.plan_run.memo import (
    ITEM_INSTRUCTIONS,
    ArtifactFact,
    ItemRun,
    PlanRunMemo,
    start_item_guard,
    strings_in,
    tokens_of,
)
from stateward.controllers.plan_run.metering import MeteredModel
from stateward.controllers.plan_run.part import Part
from stateward.controllers.plan_support import (
    OUTPUT_TOOL,
    content_of,
    evidence_ids,
    output_ref,
    step_record,
)
from stateward.core.canonical import canonical_json, sha256_hex
from stateward.core.contract import DecisionContext, Observation, Proposal, SignalFailure, WaitSpec
from stateward.core.decision import ControlDecision, DecisionType, SignalSource, parse_decision
from stateward.core.errors import DecisionParseError, ErrorCode
from stateward.core.events import EventType, NewEvent
from stateward.core.model_io import ReplyContract
from stateward.core.state import RequestKind
from stateward.models.base import ModelRequest, Usage, complete
from stateward.planning.budget import BudgetAmount, BudgetError
from stateward.planning.delivery import Confidence, FindingRisk
from stateward.planning.patch import (
    AttemptFact,
    AttemptOutcome,
)
from stateward.planning.plan import WorkItem
from stateward.planning.progress import ProgressTracker, ReactDecisionSummary
from stateward.planning.stages import RunStage
from stateward.planning.termination import (
    FailureFact,
)
from stateward.verify.checks import CheckResult, CheckVerdict
from stateward.verify.item_checks import GOAL_REF_PREFIX
from stateward.verify.policy import PolicyDecision, VerificationOutcome
from stateward.verify.policy import decide as verification_decision


class ItemSteps(Part):
    """One work item at a time: a bounded local ReAct loop whose completion is read from recorded facts."""

    def ask_approval(self, item: WorkItem, memo: PlanRunMemo, notes: list[NewEvent]) -> Proposal:
        guard = (self.config.approval_action or start_item_guard)(item, memo)
        question = (
            f"Work item {item.work_item_id} ({item.title}, risk {item.risk_level.value}) needs approval "
            f"before it runs: {guard.tool} {json.dumps(guard.args, sort_keys=True)}."
        )
        decision = ControlDecision(type=DecisionType.REQUEST_USER_INPUT, question=question)
        return self.owner.view.propose(decision, memo, notes, wait=WaitSpec(guard=guard, kind=RequestKind.APPROVAL))

    def start(self, ctx: DecisionContext, memo: PlanRunMemo, notes: list[NewEvent], item: WorkItem) -> Proposal | None:
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
            return self.owner.delivery.deliver_partial(
                ctx, memo, notes, "BUDGET_EXHAUSTED", exc.message, self.owner.view.states(ctx, memo)
            )
        run = memo.items.setdefault(wid, ItemRun())
        attempt_id = f"{wid}#{len(run.attempts) + 1}"
        run.attempts.append(
            AttemptFact(outcome=AttemptOutcome.RUNNING, attempt_id=attempt_id, input_hash=self.input_hash(memo, item))
        )
        run.steps, run.absorbed, run.calls = [], 0, []  # a new attempt: none of its observations has been seen yet
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

    def input_hash(self, memo: PlanRunMemo, item: WorkItem) -> str:
        """What an attempt starts from, hashed: the item, the plan version, the refs of the verified inputs it is
        handed and the findings it is told to fix. Two attempts with one hash were given the same thing."""
        upstream = sorted(self.owner.acceptance.upstream(memo, item))
        run = memo.items.get(item.work_item_id)
        given = {
            "work_item": item.model_dump(mode="json"),
            "plan_version": memo.plan.version if memo.plan else None,
            "inputs": [memo.items[w].output for w in upstream if w in memo.verified and w in memo.items],
            "correction": None if run is None else run.correction,
        }
        return sha256_hex(canonical_json(given))

    def item_step(self, ctx: DecisionContext, memo: PlanRunMemo, wid: str, notes: list[NewEvent]) -> Proposal:
        memo.enter(RunStage.EXECUTE, ctx.state.usage.steps + 1)
        item = self.owner.view.item(memo, wid)
        run = memo.items[wid]
        assert run.tracker is not None
        before = run.tracker.before_step(remaining=memo.ledger.remaining())
        if before.should_stop:
            self.end_attempt(memo, item, AttemptOutcome.FAILED, before.signal.value, notes)
            return self.owner.decide_with(ctx, memo, notes)
        visible = (*(c for c in item.required_capabilities if c in ctx.actions), OUTPUT_TOOL)
        mine = [o for o in ctx.observations if o.step in run.steps]
        request = ModelRequest(
            purpose="decide",
            contract=ReplyContract.DECISION,
            goal=f"{item.work_item_id}: {item.title}",
            inventory=list(ctx.inventory),
            observations=[o.model_dump(mode="json") for o in mine],
            visible_actions=ctx.specs(visible),
            facts={
                "work_item": item.model_dump(mode="json"),
                "outputs": self.owner.view.outputs(memo),
                "inputs": self.owner.view.inputs(ctx, memo, item),
                "correction": run.correction,
                "goal_ref": f"{GOAL_REF_PREFIX}{self.config.goal.goal_id}",
                "remaining_steps": run.tracker.remaining_steps(),
            },
            instructions=ITEM_INSTRUCTIONS,
            correction=ctx.state.correction,  # the Runtime refused the last proposal: say why, once
        )
        left = self.owner.view.live_ledger(memo).remaining().tokens
        if left is not None and request.json_chars() // 4 > left:
            # The request alone would not fit what is left: do not send it (tokens are spent, not refunded).
            detail = f"the next model request needs ~{request.json_chars() // 4} tokens, {left} left"
            return self.owner.delivery.deliver_partial(
                ctx, memo, notes, "BUDGET_EXHAUSTED", detail, self.owner.view.states(ctx, memo)
            )
        reply = complete(self.owner.worker, request)
        run.model_calls += 1
        run.tokens += tokens_of(reply.usage)
        rejected = provider_rejection(reply)
        if rejected is not None:
            return Proposal(
                signal=rejected,
                source=SignalSource.MODEL,
                visible_actions=frozenset(visible),
                model_usage=(reply.usage,),
                memo=self.owner.seals.write(memo),
                notes=notes,
            )
        try:
            decision = parse_decision(reply.text)
        except DecisionParseError:
            decision = None  # the Runtime names the parse failure; we never guess
        if decision is not None and decision.type is not DecisionType.EXECUTE_TOOL:
            # A worker saying "done" (or asking to stop) ends its attempt; it never completes the item.
            self.end_attempt(memo, item, AttemptOutcome.FAILED, "MODEL_DECLARED_STOP", notes)
            return self.owner.view.with_usage(self.owner.decide_with(ctx, memo, notes), reply.usage)
        outside = self.out_of_scope(decision)
        if outside is not None:
            # The goal's scope holds for what a call touches, not only for which tool it is.
            return Proposal(
                signal=SignalFailure(code=ErrorCode.OUT_OF_SCOPE_ARGUMENT, message=outside, raw=reply.text[:2000]),
                source=SignalSource.MODEL,
                visible_actions=frozenset(visible),
                model_usage=(reply.usage,),
                memo=self.owner.seals.write(memo),
                notes=notes,
            )
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
        return Proposal(
            signal=reply.text,
            source=SignalSource.MODEL,
            visible_actions=frozenset(visible),
            model_usage=(reply.usage,),
            memo=self.owner.seals.write(memo),
            notes=notes,
        )

    def out_of_scope(self, decision: ControlDecision | None) -> str | None:
        """Why a proposed call's arguments reach outside the goal's scope (an ``out_of_scope`` name, or a path
        under one, as any string argument), or None."""
        fenced = self.config.goal.scope.out_of_scope
        if decision is None or not fenced or not decision.args:
            return None
        for key, value in strings_in(decision.args):
            for name in fenced:
                if value == name or value.startswith((f"{name}/", f"{name}:")):
                    return f"argument {key}={value!r} is outside the goal's scope ({name})"
        return None

    def absorb(
        self, ctx: DecisionContext, memo: PlanRunMemo, wid: str, notes: list[NewEvent], charged: list[Usage]
    ) -> None:
        """Fold a running item's new observations into its tracker; complete or stop it on facts. Model calls
        made meanwhile (a deliverable's model checks) go into ``charged``, for the step's proposal."""
        item = self.owner.view.item(memo, wid)
        run = memo.items[wid]
        assert run.tracker is not None
        mine = [o for o in ctx.observations if o.step in run.steps]
        for obs in mine[run.absorbed :]:
            run.absorbed += 1
            if obs.evidence_id is not None:
                run.calls.append(obs.evidence_id)
            run.tracker, verdict = run.tracker.observe(step_record(obs), remaining=memo.ledger.remaining())
            if obs.status != "SUCCESS" and obs.error_code:
                memo.failures.append(FailureFact(action=obs.action, error_code=obs.error_code))
            output = output_ref(obs, item.output_spec.artifact_type)
            if output is not None:
                self.complete(ctx, memo, item, output, obs, notes, charged)
                return
            if verdict.should_stop:
                self.end_attempt(
                    memo,
                    item,
                    AttemptOutcome.FAILED,
                    verdict.signal.value,
                    notes,
                    partial=run.tracker.partial_result(verdict).model_dump(mode="json"),
                )
                return

    def complete(
        self,
        ctx: DecisionContext,
        memo: PlanRunMemo,
        item: WorkItem,
        ref: str,
        obs: Observation,
        notes: list[NewEvent],
        charged: list[Usage],
    ) -> None:
        """The item's artifact was written: it succeeds only if it passes every check (see ``verify_output``)."""
        verdict = self.verify_output(ctx, memo, item, ref, obs, notes, charged)
        if verdict is None:
            return
        accepted, summary = verdict
        run = memo.items[item.work_item_id]
        run.output, run.artifact = ref, accepted
        memo.verified.append(item.work_item_id)
        memo.no_progress_streak = 0
        self.end_attempt(memo, item, AttemptOutcome.COMPLETED, None, notes, verification=summary)

    def metered_checker(self, memo: PlanRunMemo) -> MeteredModel | None:
        """The configured checker, allowed only what the budget has left (running attempts settled as spent)."""
        if self.config.checker is None:
            return None
        return MeteredModel.within(self.config.checker, self.owner.view.live_ledger(memo).remaining())

    @staticmethod
    def charge_checks(memo: PlanRunMemo, item: WorkItem, checker: MeteredModel, charged: list[Usage]) -> None:
        """A check's model calls are the item's, like its worker's: counted on its attempt and reported with
        the step (``charged``)."""
        run = memo.items[item.work_item_id]
        run.model_calls += len(checker.usages)
        run.tokens += sum(tokens_of(u) for u in checker.usages)
        charged.extend(checker.usages)

    def deliverable_results(
        self,
        ctx: DecisionContext,
        memo: PlanRunMemo,
        item: WorkItem,
        obs: Observation,
        charged: list[Usage],
    ) -> list[CheckResult]:
        """The deliverable's own verifier. An evidence verifier checks the cited evidence against what the run
        recorded, not against what exists."""
        content = content_of(obs)
        if self.config.evidence_verifier is not None:
            recorded = frozenset(e for o in ctx.observations for e in evidence_ids(o.result))
            checker = self.metered_checker(memo)
            results = list(self.config.evidence_verifier(content, recorded, checker))
            if checker is not None:
                self.charge_checks(memo, item, checker, charged)
            return results
        if self.config.verifier is not None:
            return list(self.config.verifier(content))
        return []

    def verify_output(
        self,
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
        results, fact = self.owner.acceptance.judge(ctx, memo, item, ref, obs, charged)
        deliverable = item.output_spec.artifact_type == self.config.deliverable
        if deliverable:  # the run's VERIFY stage is the deliverable's; an item's own checks are part of its work
            memo.enter(RunStage.VERIFY, ctx.state.usage.steps + 1)
            results += self.deliverable_results(ctx, memo, item, obs, charged)
        name = item.output_spec.artifact_type
        used = memo.ledger.reflections.get(name, 0)
        limit = memo.ledger.limits.max_reflections_per_artifact
        risk, confidence = (
            (self.config.deliverable_risk, self.config.deliverable_confidence)
            if deliverable
            else (FindingRisk.LOW, Confidence.HIGH)  # an intermediate artifact is judged on its checks alone
        )
        policy = verification_decision(results, used, 1 if limit is None else limit, risk, confidence)
        run = memo.items[item.work_item_id]
        backs = self.owner.acceptance.backs_risk(memo, item).value
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
        run.correction = findings_text(results) or "; ".join(policy.reasons)
        if policy.outcome is VerificationOutcome.REPAIR_ONCE:
            memo.ledger = memo.ledger.record_reflection(name)
            # The fresh tracker below restarts the step count: charge the drafting loop's tool calls now, or
            # settling the item would record only the repair's calls and the ledger would under-count.
            spent = run.tracker.steps_taken if run.tracker else 0
            memo.ledger = memo.ledger.charge(BudgetAmount(tool_calls=spent))
            run.tracker = ProgressTracker.start(max(1, item.max_react_steps or self.config.default_react_steps))
            run.steps, run.absorbed = [], 0  # the repair is a fresh local loop that must write a new version
            return None
        if policy.outcome is VerificationOutcome.HUMAN_HANDOFF:  # a person decides, not a partial delivery
            memo.verification_handoff = (policy.reason_code, f"{ref}: " + "; ".join(policy.reasons))
        self.end_attempt(memo, item, AttemptOutcome.FAILED, self.failure_code(results, policy, deliverable), notes)
        return None

    @staticmethod
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

    def end_attempt(
        self,
        memo: PlanRunMemo,
        item: WorkItem,
        outcome: AttemptOutcome,
        error: str | None,
        notes: list[NewEvent],
        partial: dict[str, Any] | None = None,
        verification: dict[str, Any] | None = None,
    ) -> None:
        """End the item's attempt with ``outcome``; ``verification``: how its accepted artifact passed."""
        run = memo.items[item.work_item_id]
        last = run.attempts[-1]
        run.attempts[-1] = last.model_copy(
            update={"outcome": outcome, "error_class": error, "tool_calls": tuple(run.calls)}
        )
        memo.ledger = memo.ledger.settle(item.work_item_id, self.owner.view.spent(run))
        run.model_calls = run.tokens = 0
        # The attempt's loop state is spent: keeping it would make every later step rewrite it.
        run.tracker, run.steps, run.absorbed, run.calls = None, [], 0, []
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
                    **(verification or {}),
                },
            )
        )


def check_record(result: CheckResult) -> dict[str, Any]:
    """A check's result as a verification event keeps it: a PASS by its name and verdict, anything else with
    its detail and findings (what the next attempt is told to fix)."""
    record: dict[str, Any] = {"name": result.name, "verdict": result.verdict.value}
    if result.verdict is not CheckVerdict.PASS or result.detail:
        record["detail"] = result.detail
    if result.findings:
        record["findings"] = list(result.findings)
    return record
