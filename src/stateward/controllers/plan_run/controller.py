"""The plan run's coordinator: one decision per step, handed to planning, item execution or delivery.

The coordinator alone orders the steps. Each part (``planning``, ``items``, ``delivery``, ``facts``, ...) is a
module of functions handed the run's :class:`Services` and returning a Proposal, or a small result this module
acts on (decide again in the same step, deliver partially, reschedule); no part calls the coordinator.
"""

from __future__ import annotations

from stateward.controllers.plan_run import delivery, items, planning
from stateward.controllers.plan_run import facts as view
from stateward.controllers.plan_run.memo import (
    MemoSeals,
    PlanRunConfig,
    PlanRunMemo,
)
from stateward.controllers.plan_run.services import DecideAgain, DeliverPartial, Reschedule, Services
from stateward.core.contract import DecisionContext, Observation, Proposal
from stateward.core.decision import ControlDecision, DecisionType
from stateward.core.events import EventType, NewEvent
from stateward.core.state import RunState
from stateward.models.base import AnyModel, Usage
from stateward.planning.budget import BudgetLedger
from stateward.planning.patch import (
    WorkItemState,
)
from stateward.planning.stages import RunStage
from stateward.planning.termination import (
    TerminationDecision,
    TerminationRecord,
    TerminationSnapshot,
)
from stateward.planning.termination import evaluate as evaluate_termination


class PlanRunController:
    """Runs a Goal Contract through a validated plan DAG: items start when their dependencies are verified, their
    approval is granted and their budget fits; each item is a bounded local ReAct; deliverables are verified; the
    run degrades or hands off instead of looping."""

    mode = "plan_run"

    def __init__(self, planner: AnyModel, worker: AnyModel, config: PlanRunConfig):
        self.planner = planner
        self.worker = worker
        self.config = config
        self.seals = MemoSeals()  # the memo in and out of the run's state, large parts sealed

    def services(self) -> Services:
        """What the parts are handed: the config and models as they are now (they may be replaced between steps)."""
        return Services(config=self.config, planner=self.planner, worker=self.worker, seals=self.seals)

    def decide(self, ctx: DecisionContext) -> Proposal:
        """Propose the plan run's next step: plan, validate, run a work item, verify, or deliver."""
        memo = (
            self.seals.read(ctx.state.memo)
            if ctx.state.memo
            else PlanRunMemo(ledger=BudgetLedger(limits=self.config.budget))
        )
        charged: list[Usage] = []  # model calls made on the way (a deliverable's checks), reported with the step
        proposal = self._decide(self.services(), ctx, memo, charged)
        for usage in reversed(charged):
            proposal = view.with_usage(proposal, usage)
        return proposal

    def _decide(self, svc: Services, ctx: DecisionContext, memo: PlanRunMemo, charged: list[Usage]) -> Proposal:
        view.tick(svc, memo)
        if memo.plan is None:
            return self._before_plan(svc, ctx, memo)
        notes: list[NewEvent] = []
        if memo.awaiting_handoff or memo.handoff_request is not None:
            outcome = delivery.after_handoff(svc, ctx, memo, notes)
            if outcome is not None:
                return outcome
        for wid in list(memo.running):
            items.absorb(svc, ctx, memo, wid, notes, charged)
        states = view.states(svc, ctx, memo)
        if not memo.running:
            # A running item's own tracker bounds its local loop (NO_PROGRESS / STEP_LIMIT); counting each of
            # its steps here would read any loop longer than the stall window as a stalled plan.
            memo.history = [*memo.history[-9:], states]
        facts = view.goal_facts(svc, ctx, memo)
        view.record_deviations(svc, facts, memo, notes)
        verdict = evaluate_termination(
            TerminationSnapshot(
                step=ctx.state.usage.steps,
                budget=view.live_ledger(memo),
                no_progress_streak=memo.no_progress_streak,
                failures=tuple(memo.failures[-10:]),
                state_history=tuple(memo.history),
                goal=svc.config.goal,
                facts=facts,
                next_estimate=view.next_estimate(memo, states),
            )
        )
        if verdict.stops and memo.delivery is None:
            stopped = self._stop(svc, ctx, memo, notes, verdict, states)
            if stopped is not None:
                return stopped
        if memo.delivery == "partial" or memo.delivery == "accepted":
            return view.propose(
                svc, ControlDecision(type=DecisionType.FINISH, reason=f"delivery {memo.delivery}"), memo, notes
            )
        return self.schedule(svc, ctx, memo, notes, states)

    def _before_plan(self, svc: Services, ctx: DecisionContext, memo: PlanRunMemo) -> Proposal:
        """No plan yet: stop if the goal already rules it out, research until ready, then plan."""
        memo.enter(RunStage.INTAKE, ctx.state.usage.steps + 1)
        stopped = self._stopped_before_planning(svc, ctx, memo)
        if stopped is not None:
            return stopped
        if svc.config.readiness is not None and not planning.ready(svc, ctx, memo):
            return planning.research(svc, ctx, memo)
        return self._go_on(svc, ctx, memo, planning.make_plan(svc, ctx, memo))

    def _stop(
        self,
        svc: Services,
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
            return delivery.fail_safely(svc, memo, notes, verdict.reason.value, verdict.reason.value.lower())
        if verdict.decision is TerminationDecision.HANDOFF:
            return delivery.handoff(svc, ctx, memo, notes, verdict.reason.value, verdict.detail, states)
        if verdict.decision is TerminationDecision.DEGRADE:
            return delivery.deliver_partial(svc, ctx, memo, notes, verdict.reason.value, verdict.detail, states)
        return None

    def _stopped_before_planning(self, svc: Services, ctx: DecisionContext, memo: PlanRunMemo) -> Proposal | None:
        """Research spends budget too: the goal's constraints hold there as well. With no plan yet there
        is nothing to hand over, so a broken hard constraint fails the run."""
        verdict = evaluate_termination(
            TerminationSnapshot(step=ctx.state.usage.steps, goal=svc.config.goal, facts=view.goal_facts(svc, ctx, memo))
        )
        if not verdict.stops:
            return None
        notes = [NewEvent(type=EventType.TERMINATION_RECORDED, payload=verdict.model_dump(mode="json"))]
        return delivery.fail_safely(svc, memo, notes, verdict.reason.value, verdict.reason.value.lower())

    def reconciliation_notes(self, state: RunState, observation: Observation, pending_question: str) -> list[NewEvent]:
        """The Runtime stops the run because nobody can say whether a side effect happened (source 14: a
        non-idempotent call's outcome unknown): the person who answers gets the source's handoff package with it
        (UNKNOWN_OUTCOME: the state reached, attempts, evidence, the impact, what each answer does, the resume
        point). It decides nothing; the reconciliation's answer does."""
        if not state.memo:
            return []
        memo = self.seals.read(state.memo)
        if memo.plan is None:
            return []
        ctx = DecisionContext(state=state, observations=(observation,), inventory=(), actions={})
        return [delivery.unknown_outcome_package(self.services(), ctx, memo, observation, pending_question)]

    def _go_on(self, svc: Services, ctx: DecisionContext, memo: PlanRunMemo, step: Proposal | DecideAgain) -> Proposal:
        """A part's proposal, or - when it asked to decide again - the next decision of the same step."""
        return step if isinstance(step, Proposal) else self._decide_again(svc, ctx, memo, step)

    def _decide_again(self, svc: Services, ctx: DecisionContext, memo: PlanRunMemo, again: DecideAgain) -> Proposal:
        """Continue deciding in the same step on the changed memo (as sealed), ``again``'s notes and model calls
        before the next decision's own."""
        inner = self.decide(
            DecisionContext(
                state=ctx.state.model_copy(update={"memo": svc.seals.write(memo)}),
                observations=ctx.observations,
                inventory=ctx.inventory,
                actions=ctx.actions,
            )
        )
        return Proposal(
            signal=inner.signal,
            source=inner.source,
            visible_actions=inner.visible_actions,
            model_usage=(*again.usages, *inner.model_usage),
            memo=inner.memo,
            notes=[*again.notes, *inner.notes],
            wait=inner.wait,
        )

    def _deliver_partial(
        self, svc: Services, ctx: DecisionContext, memo: PlanRunMemo, notes: list[NewEvent], short: DeliverPartial
    ) -> Proposal:
        """A part found the budget short: deliver what is verified, on the states as they are now."""
        states = view.states(svc, ctx, memo)
        return delivery.deliver_partial(svc, ctx, memo, notes, short.code, short.detail, states)

    def schedule(
        self,
        svc: Services,
        ctx: DecisionContext,
        memo: PlanRunMemo,
        notes: list[NewEvent],
        states: dict[str, WorkItemState],
    ) -> Proposal:
        """Choose the next ready work item (replanning first on new facts), or deliver when none is left."""
        replanned = planning.replan_on_new_facts(svc, ctx, memo, notes)
        if isinstance(replanned, Reschedule):  # the patch was refused: the plan in hand goes on
            rescheduled = self.schedule(svc, ctx, memo, notes, view.states(svc, ctx, memo))
            return view.with_usage(rescheduled, replanned.usage)
        if replanned is not None:
            return self._decide_again(svc, ctx, memo, replanned)
        plan = memo.plan
        assert plan is not None
        waiting = next(
            (w for w in plan.work_items if states[w.work_item_id] is WorkItemState.WAITING_FOR_APPROVAL), None
        )
        if not memo.running:
            refused = items.start_batch(svc, ctx, memo, notes, states)
            if refused is not None:
                return self._deliver_partial(svc, ctx, memo, notes, refused)
        if memo.running:
            wid = memo.running[memo.turn % len(memo.running)]
            memo.turn += 1
            step = items.item_step(svc, ctx, memo, wid, notes)
            if isinstance(step, DeliverPartial):
                return self._deliver_partial(svc, ctx, memo, notes, step)
            return self._go_on(svc, ctx, memo, step)
        if waiting is not None:  # nothing else can move: now the run really waits for the person
            memo.enter(RunStage.HUMAN_APPROVAL, ctx.state.usage.steps + 1)
            return items.ask_approval(svc, waiting, memo, notes)
        if all(s is WorkItemState.SUCCEEDED for s in states.values()):
            return delivery.finish(svc, ctx, memo, notes, states)
        stuck = sorted(w for w, s in states.items() if s is not WorkItemState.SUCCEEDED)
        patched = planning.replan(svc, ctx, memo, notes, states)
        if isinstance(patched, DecideAgain):
            return self._decide_again(svc, ctx, memo, patched)
        stuck_step = delivery.when_stuck(svc, ctx, memo, notes, stuck, states)
        return stuck_step if patched is None else view.with_usage(stuck_step, patched)
