"""Plan-and-execute: a planner model writes the whole plan once; code executes it step by step.

A wait written in the plan is only data until the executor hands it to the Runtime as a
REQUEST_USER_INPUT decision; the plan text itself can stop nothing.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from stateward.controllers.base import provider_rejection
from stateward.core.contract import DecisionContext, Proposal, SignalFailure
from stateward.core.decision import ControlDecision, DecisionType, SignalSource
from stateward.core.errors import ErrorCode
from stateward.core.events import EventType, NewEvent
from stateward.core.model_io import ReplyContract
from stateward.core.state import RequestKind
from stateward.models.base import AnyModel, Usage, complete

PLAN_INSTRUCTIONS = (
    'Reply with one JSON object {"steps": [...]} and nothing else. A step is '
    '{"kind": "tool", "action": <action>, "args": {...}}, {"kind": "await_approval", "question": "..."} '
    'or {"kind": "finish", "reason": "..."}.'
)


class ToolStep(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: Literal["tool"]
    action: str
    args: dict[str, Any] = Field(default_factory=dict)


class AwaitStep(BaseModel):
    """A plan step asking a person something; the Runtime, not the plan, decides whether the run waits."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: Literal["await_approval"]
    question: str


class FinishStep(BaseModel):
    """The plan's last step: propose to finish (the agent's finish policy still decides)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: Literal["finish"]
    reason: str = "plan complete"


PlanStep = Annotated[ToolStep | AwaitStep | FinishStep, Field(discriminator="kind")]


class StepPlan(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    steps: list[PlanStep] = Field(min_length=1)


_PLAN = TypeAdapter(StepPlan)


class PlanExecuteMemo(BaseModel):
    """What a plan-and-execute run keeps between decisions: its plan, the next step and which rejection
    it last replanned after. Written with only the fields set (``dump``): no plan yet is an empty memo."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    plan: StepPlan | None = None
    cursor: int = 0  # the plan step to hand to the Runtime next
    planned_after: str | None = None  # the rejected request the current plan answers
    plan_version: int = 0

    def dump(self) -> dict[str, Any]:
        return self.model_dump(mode="json", include=set(self.model_fields_set))  # nested models whole


def approval_order_issues(plan: StepPlan, approval_before: frozenset[str]) -> list[str]:
    """Where ``plan`` puts a guarded step (an action of ``approval_before``) without an ``await_approval`` step
    before it, since the previous guarded step: each guarded action needs its own approval, asked first."""
    issues: list[str] = []
    asked = False
    for i, step in enumerate(plan.steps):
        if isinstance(step, AwaitStep):
            asked = True
        elif isinstance(step, ToolStep) and step.action in approval_before:
            if not asked:
                issues.append(f"step {i} {step.action!r} needs an await_approval step before it")
            asked = False
    return issues


def parse_step_plan(
    text: str, known_actions: set[str], approval_before: frozenset[str] = frozenset()
) -> StepPlan | SignalFailure:
    """A planner's reply as a plan, or a named failure; unknown actions are refused before anything runs, and
    a guarded step (of ``approval_before``) the plan puts before its approval step is PLAN_APPROVAL_ORDER."""
    try:
        plan = _PLAN.validate_json(text)
    except ValidationError as exc:
        return SignalFailure(code=ErrorCode.INVALID_PLAN, message=str(exc.errors()[:3]), raw=text[:2000])
    unknown = sorted({s.action for s in plan.steps if isinstance(s, ToolStep)} - known_actions)
    if unknown:
        return SignalFailure(
            code=ErrorCode.PLAN_UNKNOWN_ACTION, message=f"plan uses unknown actions {unknown}", raw=text[:2000]
        )
    issues = approval_order_issues(plan, approval_before)
    if issues:
        return SignalFailure(code=ErrorCode.PLAN_APPROVAL_ORDER, message="; ".join(issues), raw=text[:2000])
    return plan


def to_decision(step: ToolStep | AwaitStep | FinishStep) -> ControlDecision:
    if isinstance(step, ToolStep):
        return ControlDecision(type=DecisionType.EXECUTE_TOOL, action=step.action, args=step.args)
    if isinstance(step, AwaitStep):
        return ControlDecision(type=DecisionType.REQUEST_USER_INPUT, question=step.question)
    return ControlDecision(type=DecisionType.FINISH, reason=step.reason)


class PlanAndExecuteController:
    """A planner model emits a plan once; an executor hands its steps to the Runtime one by one, wait steps included,
    so a plan's 'await approval' becomes a real stop."""

    mode = "plan_and_execute"

    def __init__(self, planner: AnyModel, *, approval_before: frozenset[str] = frozenset(), max_revisions: int = 1):
        """``approval_before``: actions a plan must put after an ``await_approval`` step (the source's approval
        order); a plan that does not is answered REVISE (the planner is asked again, told why) up to
        ``max_revisions`` times, then refused (PLAN_APPROVAL_ORDER). The validator never fixes a plan itself."""
        self.planner = planner
        self.approval_before = approval_before
        self.max_revisions = max_revisions

    def decide(self, ctx: DecisionContext) -> Proposal:
        """Plan once (again after a rejected plan), then propose the plan's next step."""
        memo = PlanExecuteMemo.model_validate(ctx.state.memo)
        answer = ctx.state.last_answer
        # A rejected approval asks for a new plan; a reconciliation's "it did not happen" is the call's recorded
        # outcome (the gateway's), never a verdict on the plan.
        needs_plan = memo.plan is None or (
            answer is not None
            and answer.verdict == "rejected"
            and answer.kind is not RequestKind.RECONCILIATION
            and memo.planned_after != answer.request_id
        )
        usage: tuple[Usage, ...] = ()
        notes: list[NewEvent] = []
        if needs_plan:
            parsed, usage, notes = self._plan(ctx)
            if isinstance(parsed, SignalFailure):
                return Proposal(
                    signal=parsed,
                    source=SignalSource.PLAN_STEP,
                    visible_actions=frozenset(),
                    model_usage=usage,
                    notes=notes,
                )
            memo = PlanExecuteMemo(
                plan=parsed,
                cursor=0,
                planned_after=None if answer is None else answer.request_id,
                plan_version=memo.plan_version + 1,
            )
            notes.append(
                NewEvent(
                    type=EventType.PLAN_RECORDED,
                    payload={
                        "plan_version": memo.plan_version,
                        "steps": len(parsed.steps),
                        "validator": "ACCEPT",
                        **({"revisions": len(notes)} if notes else {}),
                    },
                )
            )
        plan = memo.plan
        assert plan is not None
        cursor = memo.cursor
        if cursor >= len(plan.steps):
            decision = ControlDecision(type=DecisionType.FINISH, reason="plan exhausted")
        else:
            decision = to_decision(plan.steps[cursor])
        visible = frozenset({decision.action}) if decision.action else frozenset()
        return Proposal(
            signal=decision,
            source=SignalSource.PLAN_STEP,
            visible_actions=visible,
            model_usage=usage,
            memo=memo.model_copy(update={"cursor": cursor + 1}).dump(),
            notes=notes,
        )

    def _plan(self, ctx: DecisionContext) -> tuple[StepPlan | SignalFailure, tuple[Usage, ...], list[NewEvent]]:
        """Ask the planner for a plan and validate it; a plan out of approval order is answered REVISE (a
        ``plan_recorded`` note with ``validator: REVISE`` and the issues) and asked for again, bounded."""
        usage: list[Usage] = []
        notes: list[NewEvent] = []
        correction: str | None = None
        while True:
            request = ctx.request(
                purpose="plan",
                contract=ReplyContract.STEP_PLAN,
                goal=ctx.state.goal,
                inventory=list(ctx.inventory),
                visible_actions=ctx.specs(tuple(ctx.actions)),
                facts=ctx.facts(),
                instructions=PLAN_INSTRUCTIONS,
                correction=correction,
            )
            reply = complete(self.planner, request)
            usage.append(reply.usage)
            parsed = provider_rejection(reply) or parse_step_plan(reply.text, set(ctx.actions), self.approval_before)
            revisable = isinstance(parsed, SignalFailure) and parsed.code == ErrorCode.PLAN_APPROVAL_ORDER
            if not revisable or len(notes) >= self.max_revisions:
                if revisable and notes:  # a refused proposal's notes are not kept: the refusal says it was revised
                    assert isinstance(parsed, SignalFailure)
                    parsed = parsed.model_copy(update={"message": f"after {len(notes)} REVISE: {parsed.message}"})
                return parsed, tuple(usage), notes
            assert isinstance(parsed, SignalFailure)
            notes.append(
                NewEvent(type=EventType.PLAN_RECORDED, payload={"validator": "REVISE", "issues": parsed.message})
            )
            correction = f"The plan validator answered REVISE: {parsed.message}. Send the whole plan again."
