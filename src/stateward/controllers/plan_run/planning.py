"""Planning a plan run: research until the readiness contract holds, the plan the validator accepts,
and plan patches (replans) when the plan stalls or a measured fact changed what it assumed."""

from __future__ import annotations

from typing import Any

from stateward.controllers.base import provider_rejection
from stateward.controllers.plan_run.memo import (
    ITEM_INSTRUCTIONS,
    PLAN_INSTRUCTIONS,
    PLAN_REVISIONS,
    PlanRunMemo,
    tokens_of,
)
from stateward.controllers.plan_run.part import Part
from stateward.controllers.plan_support import (
    READINESS_TOOL,
    evidence_ids,
)
from stateward.controllers.replies import document_request
from stateward.core.contract import DecisionContext, Proposal
from stateward.core.decision import ControlDecision, DecisionType, SignalSource
from stateward.core.errors import ErrorCode, RunError
from stateward.core.events import EventType, NewEvent
from stateward.core.model_io import ReplyContract
from stateward.models.base import Usage, complete
from stateward.planning.budget import BudgetAmount
from stateward.planning.patch import (
    PlanPatchError,
    WorkItemState,
    apply_patch,
    load_patch,
)
from stateward.planning.plan import load_plan
from stateward.planning.readiness import evaluate_readiness, parse_evidence
from stateward.planning.stages import RunStage
from stateward.planning.validator import Verdict, validate_plan


class PlanningSteps(Part):
    """The planner proposes; the validator decides; a patch only replaces the plan when it holds."""

    def make_plan(self, ctx: DecisionContext, memo: PlanRunMemo) -> Proposal:
        """The planner proposes; the validator decides. A REVISE verdict goes back to the planner with its
        issues, at most PLAN_REVISIONS times; a REJECT, or a plan still not accepted, is refused - never run."""
        usages: list[Usage] = []
        issues: list[dict[str, Any]] = []
        memo.enter(RunStage.PLAN, ctx.state.usage.steps + 1)
        for round_ in range(1 + PLAN_REVISIONS):
            reply = complete(
                self.owner.planner,
                document_request(
                    ReplyContract.PLAN_DOCUMENT,
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
                return self.owner.view.refused(rejected.code, rejected.message, reply.text, *usages)
            try:
                plan = load_plan(reply.text)
            except RunError as exc:
                return self.owner.view.refused(exc.code, exc.message, reply.text, *usages)
            remaining = memo.ledger.remaining().to_plan_budget()
            report = validate_plan(
                plan, capabilities=self.config.capabilities or set(ctx.actions), budget=remaining, goal=self.config.goal
            )
            if report.verdict is Verdict.ACCEPT:
                break
            if report.verdict is Verdict.REJECT or round_ == PLAN_REVISIONS:
                found = "; ".join(f"{i.code}({i.work_item_id})" for i in report.issues[:5])
                return self.owner.view.refused(f"PLAN_{report.verdict.value}", found, reply.text, *usages)
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
        proposal = self.owner.decide_with(ctx, memo, [note])
        return Proposal(
            signal=proposal.signal,
            source=proposal.source,
            visible_actions=proposal.visible_actions,
            model_usage=(*usages, *proposal.model_usage),
            memo=proposal.memo,
            notes=proposal.notes,
            wait=proposal.wait,
        )

    def ready(self, ctx: DecisionContext, memo: PlanRunMemo) -> bool:
        """Computed over the latest submitted evidence and the evidence the run really recorded."""
        contract = self.config.readiness
        assert contract is not None
        submitted = [o for o in ctx.observations if o.action == READINESS_TOOL and o.status == "SUCCESS"]
        if not submitted:
            return False
        recorded = frozenset(e for o in ctx.observations for e in evidence_ids(o.result))
        verdict = evaluate_readiness(contract, parse_evidence(str(submitted[-1].args.get("evidence", ""))), recorded)
        return verdict.ready

    def research(self, ctx: DecisionContext, memo: PlanRunMemo) -> Proposal:
        contract = self.config.readiness
        assert contract is not None
        if memo.research_steps >= self.config.max_research_steps:
            decision = ControlDecision(type=DecisionType.FAIL, reason="readiness_not_reached")
            return self.owner.view.propose(decision, memo, [])
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
            self.owner.worker,
            ctx.request(
                purpose="decide",
                contract=ReplyContract.DECISION,
                goal=f"research for {contract.stage}: {self.config.goal.objective}",
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
            memo=self.owner.seals.write(memo),
            notes=[note],
        )

    def replan(
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
        attempt = self.patch(ctx, memo, notes, {"failed": failed})
        if attempt is None:
            return None
        error, usage = attempt
        if error is not None:
            return self.owner.view.with_usage(
                self.owner.delivery.deliver_partial(ctx, memo, notes, "REPLAN_REFUSED", error, states), usage
            )
        return self.owner.view.with_usage(self.owner.decide_with(ctx, memo, notes), usage)

    def replan_on_new_facts(self, ctx: DecisionContext, memo: PlanRunMemo, notes: list[NewEvent]) -> Proposal | None:
        """A measured fact changed what the plan assumed (e.g. a repository turned out unreadable): the planner
        may patch the plan once per new fact. A refused patch is recorded and the plan in hand goes on."""
        new = [u for u in memo.measurement.unresolved if u not in memo.patched_for]
        if not new or memo.running:
            return None
        memo.patched_for.extend(new)
        attempt = self.patch(ctx, memo, notes, {"new_facts": new})
        if attempt is None:
            return None
        error, usage = attempt
        if error is not None:
            return self.owner.view.with_usage(
                self.owner.schedule(ctx, memo, notes, self.owner.view.states(ctx, memo)), usage
            )
        return self.owner.view.with_usage(self.owner.decide_with(ctx, memo, notes), usage)

    def patch(
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
            self.owner.planner,
            document_request(
                ReplyContract.PLAN_PATCH,
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
        memo.ledger = memo.ledger.charge(BudgetAmount(replans=1, model_calls=1, tokens=tokens_of(reply.usage)))
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
        return None, reply.usage
