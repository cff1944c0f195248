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


def parse_step_plan(text: str, known_actions: set[str]) -> StepPlan | SignalFailure:
    """A planner's reply as a plan, or a named failure; unknown actions are refused before anything runs."""
    try:
        plan = _PLAN.validate_json(text)
    except ValidationError as exc:
        return SignalFailure(code=ErrorCode.INVALID_PLAN, message=str(exc.errors()[:3]), raw=text[:2000])
    unknown = sorted({s.action for s in plan.steps if isinstance(s, ToolStep)} - known_actions)
    if unknown:
        return SignalFailure(
            code=ErrorCode.PLAN_UNKNOWN_ACTION, message=f"plan uses unknown actions {unknown}", raw=text[:2000]
        )
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

    def __init__(self, planner: AnyModel):
        self.planner = planner

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
            reply = complete(
                self.planner,
                ctx.request(
                    purpose="plan",
                    goal=ctx.state.goal,
                    inventory=list(ctx.inventory),
                    visible_actions=ctx.specs(tuple(ctx.actions)),
                    facts=ctx.facts(),
                    instructions=PLAN_INSTRUCTIONS,
                ),
            )
            usage = (reply.usage,)
            parsed = provider_rejection(reply) or parse_step_plan(reply.text, set(ctx.actions))
            if isinstance(parsed, SignalFailure):
                return Proposal(
                    signal=parsed, source=SignalSource.PLAN_STEP, visible_actions=frozenset(), model_usage=usage
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
                    payload={"plan_version": memo.plan_version, "steps": len(parsed.steps), "validator": "ACCEPT"},
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
