"""Workflow: code fixes the node sequence; models only fill a node's content.

Nodes are plain frozen dataclasses. RULE nodes are evaluated by code and record ``branch_taken``
truthfully; a HUMAN node hands a wait to the Runtime and, once answered, routes on the verdict.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from stateward.controllers.base import provider_rejection
from stateward.core.contract import DecisionContext, Observation, OutcomeStatus, Proposal, SignalFailure, WaitSpec
from stateward.core.decision import ControlDecision, DecisionType, SignalSource, parse_decision
from stateward.core.errors import DecisionParseError, ErrorCode, UserError
from stateward.core.events import EventType, NewEvent
from stateward.core.model_io import ReplyContract
from stateward.core.state import AnswerVerdict, RequestKind
from stateward.models.base import AnyModel, ModelRequest, Usage, complete

ArgsFn = Callable[[DecisionContext], dict[str, Any]]


class NodeKind(StrEnum):
    RULE = "RULE"
    MODEL = "MODEL"
    TOOL = "TOOL"
    VALIDATION = "VALIDATION"
    HUMAN = "HUMAN"
    WAIT = "WAIT"
    COMPENSATION = "COMPENSATION"
    REACT = "REACT"
    AGENT = "AGENT"
    FINISH = "FINISH"
    FAIL = "FAIL"


@dataclass(frozen=True)
class ToolNode:
    """Code names the tool and its arguments; the node's contract says what its result must look like
    (``output_schema``) and how often it may run (``max_calls``, for workflows whose routes loop)."""

    id: str
    tool: str
    args: ArgsFn | Mapping[str, Any] = field(default_factory=dict)
    next: str | None = None
    on_failure: str | None = None  # None: a failed call fails the run
    output_schema: type[BaseModel] | None = None
    max_calls: int | None = None
    kind: NodeKind = NodeKind.TOOL


def compensation(id: str, tool: str, args: ArgsFn | Mapping[str, Any], next: str | None = None) -> ToolNode:
    """A saga's undo step: runs a compensating tool, usually reached through an ``on_failure`` route.

    It is a tool node like any other, through the gateway, recorded with kind COMPENSATION.
    """
    return ToolNode(id, tool, args, next=next, kind=NodeKind.COMPENSATION)


@dataclass(frozen=True)
class ModelNode:
    """The model fills the arguments of ``tool`` (it sees only this node's inputs); code runs the tool."""

    id: str
    tool: str
    instructions: str
    inputs: Callable[[DecisionContext], list[dict[str, Any]]] = lambda ctx: []
    next: str | None = None
    on_failure: str | None = None  # None: a failed call fails the run
    kind: NodeKind = NodeKind.MODEL


@dataclass(frozen=True)
class RuleNode:
    """Code decides a branch from the run's facts and records which branch it took (branch_taken)."""

    id: str
    branch: str
    predicate: Callable[[DecisionContext], bool]
    if_true: str
    if_false: str
    kind: NodeKind = NodeKind.RULE


@dataclass(frozen=True)
class HumanNode:
    """A person decides: the run waits (really stops) and, once answered, routes on the verdict (approved / rejected /
    replied)."""

    id: str
    question: Callable[[DecisionContext], str] | str
    on_approved: str | None = None
    on_rejected: str | None = None
    on_replied: str | None = None
    kind: NodeKind = NodeKind.HUMAN


@dataclass(frozen=True)
class ValidationNode:
    """Code checks what earlier nodes produced; the outcome routes the workflow and is recorded."""

    id: str
    check: Callable[[DecisionContext], str | None]  # None: passed; otherwise why it failed
    on_pass: str | None = None
    on_fail: str | None = None  # None: a failed validation fails the run
    kind: NodeKind = NodeKind.VALIDATION


@dataclass(frozen=True)
class TimerNode:
    """Wait a fixed time. The run really suspends (no worker holds it); the expiry sweep resumes it."""

    id: str
    seconds: float
    next: str | None = None
    kind: NodeKind = NodeKind.WAIT


@dataclass(frozen=True)
class FinishNode:
    """The workflow reached its goal: proposes FINISH (the Runtime still checks the finish policy)."""

    id: str
    reason: str = "workflow complete"
    kind: NodeKind = NodeKind.FINISH


@dataclass(frozen=True)
class FailNode:
    """The workflow cannot reach its goal (a refused approval, a failed check): the run ends FAILED
    with ``reason`` as its terminal reason, never COMPLETED."""

    id: str
    reason: str = "workflow_failed"
    kind: NodeKind = NodeKind.FAIL


@dataclass(frozen=True)
class ReActNode:
    """One workflow step explored by a bounded ReAct loop (source 2: "ReAct manages local exploration").

    The model picks each call among ``tools`` from this node's own observations, at most ``max_steps`` times;
    the node is done when ``done`` (code, over recorded facts) says so - never because the model says so. A
    model that stops early, or a loop out of steps, takes ``on_failure`` (None: the run fails). The loop cannot
    change the workflow's route, reach another tool or skip an approval: the Runtime still decides each call.
    """

    id: str
    tools: tuple[str, ...]
    instructions: str
    done: Callable[[DecisionContext], bool]
    max_steps: int = 5
    next: str | None = None
    on_failure: str | None = None
    kind: NodeKind = NodeKind.REACT

    def __post_init__(self) -> None:
        if self.max_steps < 1 or not self.tools:
            raise UserError(f"ReAct node {self.id} needs tools and max_steps >= 1", code=ErrorCode.INVALID_WORKFLOW)


@dataclass(frozen=True)
class AgentNode:
    """A step another agent does: a call of ``tool``, an ``agent_tool`` of this workflow's agent, on ``goal``.

    It is that tool's call and nothing else (the gateway, its idempotency key, the carved budget, the durable
    wait, the cascade), so a workflow starts a child run exactly as a model's call of the tool does. The
    child's outcome routes the workflow: ``next`` when it delivered, ``on_failure`` when it failed, was
    cancelled or could not start (None: the run fails). ``max_steps`` and friends ask for a smaller carve.
    A list of goals calls a ``parallel`` agent tool: one child per goal, run concurrently, the node's route
    taken once they all ended (``next`` only if every one delivered)."""

    id: str
    tool: str
    goal: Callable[[DecisionContext], str | list[str]] | str | list[str]
    next: str | None = None
    on_failure: str | None = None
    max_steps: int | None = None
    max_model_calls: int | None = None
    max_tool_calls: int | None = None
    kind: NodeKind = NodeKind.AGENT

    def args(self, ctx: DecisionContext) -> dict[str, Any]:
        """The agent tool's arguments: the goal, and the bounds the node asks for."""
        asked = {"max_steps": self.max_steps, "max_model_calls": self.max_model_calls}
        asked["max_tool_calls"] = self.max_tool_calls
        goal = self.goal(ctx) if callable(self.goal) else self.goal
        given: dict[str, Any] = {"goals": list(goal)} if isinstance(goal, list) else {"goal": goal}
        return {**given, **{k: v for k, v in asked.items() if v is not None}}


Node = (
    AgentNode
    | ToolNode
    | ModelNode
    | RuleNode
    | HumanNode
    | ValidationNode
    | TimerNode
    | FinishNode
    | FailNode
    | ReActNode
)


class ActedNode(BaseModel):
    """A TOOL or MODEL node whose call the run is about to make: the step that holds its outcome."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    node: str
    step: int


class ReActProgress(BaseModel):
    """A ReAct node's loop so far: the steps it has taken."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    node: str
    steps: tuple[int, ...] = ()


class WorkflowMemo(BaseModel):
    """What a workflow run keeps between decisions, in the run's state. Written with only the fields a
    decision sets (``dump``), so an unset ``node`` (start here) stays apart from ``node=None`` (no node
    left: finish)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    node: str | None = None  # the node the walk resumes at
    awaiting: str | None = None  # the HUMAN or TIMER node whose answer the run waits for
    acted: ActedNode | None = None
    react: ReActProgress | None = None
    calls: dict[str, int] = Field(default_factory=dict)  # calls made per TOOL node (its max_calls)

    @classmethod
    def of(cls, memo: Mapping[str, Any]) -> WorkflowMemo:
        return cls.model_validate(memo)

    def node_or(self, start: str) -> str | None:
        """The node to resume at: ``start`` when none was ever recorded."""
        return self.node if "node" in self.model_fields_set else start

    def dump(self) -> dict[str, Any]:
        return self.model_dump(mode="json", include=set(self.model_fields_set))  # nested models whole


def _child_outcome(outcome: Observation | None) -> bool:
    """Whether ``outcome`` is a child run's (what an agent tool's call observes once its child ended)."""
    result = None if outcome is None else outcome.result
    return isinstance(result, dict) and ("child_run_id" in result or "child_run_ids" in result)


class WorkflowController:
    """Code fixes the node sequence; a model only fills a MODEL node's content.

    It proposes one node's decision at a time; the Runtime decides what happens to it.
    """

    mode = "workflow"

    def __init__(self, nodes: Sequence[Node], *, model: AnyModel | None = None, start: str | None = None):
        self.nodes = {n.id: n for n in nodes}
        if len(self.nodes) != len(nodes):
            raise UserError("workflow node ids must be unique", code=ErrorCode.INVALID_WORKFLOW)
        self.start = start or nodes[0].id
        self.model = model

    def decide(self, ctx: DecisionContext) -> Proposal:
        """Walk from the current node through code-only nodes (rules, validations, answered waits) to the
        next node that needs the Runtime: a tool call, a wait, a finish or a failure."""
        memo = WorkflowMemo.of(ctx.state.memo)
        node_id = memo.node_or(self.start)
        awaiting = memo.awaiting
        notes: list[NewEvent] = []
        acted = memo.acted
        if acted is not None:
            node_id, failed = self._route_after(ctx, acted)
            if failed is not None:
                return self._fail(failed, notes)
        for _ in range(len(self.nodes) + 1):  # rules only route; a cycle of rules is a definition bug
            node = self.nodes.get(node_id) if node_id is not None else None
            if node is None:
                return self._finish(ctx, "workflow has no further node", notes)
            step = self._visit(ctx, node, notes, awaiting)
            if isinstance(step, Proposal):
                return step
            node_id, awaiting = step
        raise UserError("workflow rules route in a cycle", code=ErrorCode.INVALID_WORKFLOW)

    def _visit(
        self, ctx: DecisionContext, node: Node, notes: list[NewEvent], awaiting: str | None
    ) -> Proposal | tuple[str | None, str | None]:
        """A proposal for the Runtime, or where the walk goes next (node id, the wait still awaited)."""
        if isinstance(node, RuleNode):
            return self._rule(ctx, node, notes), awaiting
        if isinstance(node, ValidationNode):
            return self._validation(ctx, node, notes, awaiting)
        if isinstance(node, TimerNode):
            return self._timer(ctx, node, notes, awaiting)
        if isinstance(node, HumanNode):
            return self._human(ctx, node, notes, awaiting)
        if isinstance(node, FinishNode):
            return self._finish(ctx, node.reason, notes)
        if isinstance(node, FailNode):
            return self._fail(node.reason, notes)
        if isinstance(node, ReActNode):
            return self._react(ctx, node, notes)
        return self._act(ctx, node, notes)

    def _react(
        self, ctx: DecisionContext, node: ReActNode, notes: list[NewEvent]
    ) -> Proposal | tuple[str | None, str | None]:
        """One step of the node's loop, or its route out once recorded facts (or its bound) decide."""
        memo = WorkflowMemo.of(ctx.state.memo)
        loop = memo.react
        steps = list(loop.steps) if loop is not None and loop.node == node.id else []
        if node.done(ctx):
            return node.next, None
        if len(steps) >= node.max_steps:
            return self._react_failed(node, f"STEP_LIMIT after {len(steps)} steps", notes)
        if self.model is None:
            raise UserError(f"node {node.id} needs a model", code=ErrorCode.INVALID_WORKFLOW)
        mine = [o for o in ctx.observations if o.step in steps]
        reply = complete(
            self.model,
            ModelRequest(
                purpose="decide",
                contract=ReplyContract.DECISION,
                goal=ctx.state.goal,
                inventory=list(ctx.inventory),
                observations=[o.model_dump(mode="json") for o in mine],
                visible_actions=ctx.specs(node.tools),
                facts={"node": node.id, "remaining_steps": node.max_steps - len(steps)},
                instructions=node.instructions,
            ),
        )
        try:
            decision: ControlDecision | None = parse_decision(reply.text)
        except DecisionParseError:
            decision = None  # the Runtime names the parse failure; the step still counts against the bound
        if decision is not None and decision.type is not DecisionType.EXECUTE_TOOL:
            # Saying "done" does not make the node done: only ``done`` over recorded facts does.
            return self._react_failed(node, f"MODEL_DECLARED_STOP ({decision.type.value})", notes)
        progress = ReActProgress(node=node.id, steps=(*steps, ctx.state.usage.steps + 1))
        return Proposal(
            signal=provider_rejection(reply) or reply.text,
            source=SignalSource.MODEL,
            visible_actions=frozenset(node.tools),
            model_usage=(reply.usage,),
            memo=WorkflowMemo(node=node.id, react=progress, calls=memo.calls).dump(),
            notes=notes,
        )

    def _react_failed(
        self, node: ReActNode, why: str, notes: list[NewEvent]
    ) -> Proposal | tuple[str | None, str | None]:
        notes.append(
            NewEvent(
                type=EventType.BRANCH_TAKEN,
                payload={"node": node.id, "branch": "react_stopped", "branch_taken": True, "detail": why},
            )
        )
        if node.on_failure is not None:
            return node.on_failure, None
        return self._fail(f"react node {node.id} stopped without its goal: {why}", notes)

    @staticmethod
    def _rule(ctx: DecisionContext, node: RuleNode, notes: list[NewEvent]) -> str:
        taken = bool(node.predicate(ctx))
        notes.append(
            NewEvent(
                type=EventType.BRANCH_TAKEN,
                payload={"node": node.id, "branch": node.branch, "branch_taken": taken},
            )
        )
        return node.if_true if taken else node.if_false

    def _validation(
        self, ctx: DecisionContext, node: ValidationNode, notes: list[NewEvent], awaiting: str | None
    ) -> Proposal | tuple[str | None, str | None]:
        problem = node.check(ctx)
        notes.append(
            NewEvent(
                type=EventType.VERIFICATION_RECORDED,
                payload={"node": node.id, "outcome": "PASS" if problem is None else "FAIL", "detail": problem},
            )
        )
        if problem is not None and node.on_fail is None:
            return self._fail(f"validation {node.id} failed: {problem}", notes)
        return (node.on_pass if problem is None else node.on_fail), awaiting

    @staticmethod
    def _timer(
        ctx: DecisionContext, node: TimerNode, notes: list[NewEvent], awaiting: str | None
    ) -> Proposal | tuple[str | None, str | None]:
        answer = ctx.state.last_answer
        if answer is not None and awaiting == node.id and answer.verdict == AnswerVerdict.TIMER_FIRED:
            return node.next, None
        decision = ControlDecision(
            type=DecisionType.REQUEST_USER_INPUT, question=f"waiting {node.seconds:g} s ({node.id})"
        )
        return Proposal(
            signal=decision,
            source=SignalSource.WORKFLOW_NODE,
            visible_actions=frozenset(),
            memo=WorkflowMemo(node=node.id, awaiting=node.id, calls=WorkflowMemo.of(ctx.state.memo).calls).dump(),
            notes=notes,
            wait=WaitSpec(kind=RequestKind.TIMER, expires_in_s=node.seconds),
        )

    @staticmethod
    def _human(
        ctx: DecisionContext, node: HumanNode, notes: list[NewEvent], awaiting: str | None
    ) -> Proposal | tuple[str | None, str | None]:
        answer = ctx.state.last_answer
        if answer is not None and awaiting == node.id:
            # The answer is consumed (a later visit asks afresh) and routes on its verdict.
            routes = {
                AnswerVerdict.APPROVED: node.on_approved,
                AnswerVerdict.REJECTED: node.on_rejected,
                AnswerVerdict.REPLIED: node.on_replied,
            }
            return routes.get(answer.verdict), None
        question = node.question(ctx) if callable(node.question) else node.question
        decision = ControlDecision(type=DecisionType.REQUEST_USER_INPUT, question=question)
        memo = WorkflowMemo(node=node.id, awaiting=node.id, calls=WorkflowMemo.of(ctx.state.memo).calls).dump()
        return Proposal(
            signal=decision,
            source=SignalSource.WORKFLOW_NODE,
            visible_actions=frozenset(),
            memo=memo,
            notes=notes,
        )

    def _act(self, ctx: DecisionContext, node: ToolNode | ModelNode | AgentNode, notes: list[NewEvent]) -> Proposal:
        """The node's call, proposed: its arguments from code (TOOL, AGENT) or from the model (MODEL)."""
        calls = dict(WorkflowMemo.of(ctx.state.memo).calls)
        if isinstance(node, ToolNode) and node.max_calls is not None and calls.get(node.id, 0) >= node.max_calls:
            return self._fail(f"node {node.id} call budget exhausted ({node.max_calls})", notes)
        calls[node.id] = calls.get(node.id, 0) + 1
        if node.kind is NodeKind.COMPENSATION:
            notes.append(
                NewEvent(
                    type=EventType.BRANCH_TAKEN,
                    payload={"node": node.id, "branch": "compensation", "branch_taken": True},
                )
            )
        usage: tuple[Usage, ...] = ()
        if isinstance(node, ModelNode):
            filled = self._model_args(ctx, node, notes)
            if isinstance(filled, Proposal):
                return filled
            args, usage = filled
        elif isinstance(node, AgentNode):
            args = node.args(ctx)
        else:
            args = dict(node.args(ctx) if callable(node.args) else node.args)
        decision = ControlDecision(type=DecisionType.EXECUTE_TOOL, action=node.tool, args=args)
        return Proposal(
            signal=decision,
            source=SignalSource.WORKFLOW_NODE,
            visible_actions=frozenset({node.tool}),
            model_usage=usage,
            memo=WorkflowMemo(
                node=node.id, acted=ActedNode(node=node.id, step=ctx.state.usage.steps + 1), calls=calls
            ).dump(),
            notes=notes,
        )

    def _model_args(
        self, ctx: DecisionContext, node: ModelNode, notes: list[NewEvent]
    ) -> Proposal | tuple[dict[str, Any], tuple[Usage, ...]]:
        """A MODEL node's arguments as the model filled them (and its usage), or the step's failure: the
        provider refused, or the reply is not a JSON object."""
        if self.model is None:
            raise UserError(f"node {node.id} needs a model", code=ErrorCode.INVALID_WORKFLOW)
        reply = complete(
            self.model,
            ModelRequest(
                purpose="content",
                contract=ReplyContract.NODE_CONTENT,
                goal=ctx.state.goal,
                inventory=list(ctx.inventory),
                observations=node.inputs(ctx),
                visible_actions=ctx.specs((node.tool,)),
                facts=ctx.facts(),
                instructions=node.instructions,
            ),
        )
        usage = (reply.usage,)
        signal: SignalFailure | None = provider_rejection(reply)
        if signal is None:
            try:
                parsed = json.loads(reply.text)
            except ValueError:
                parsed = None
            if isinstance(parsed, dict):
                return parsed, usage
            signal = SignalFailure(
                code=ErrorCode.INVALID_NODE_OUTPUT,
                message=f"node {node.id} expected a JSON object of arguments",
                raw=reply.text[:2000],
            )
        return Proposal(
            signal=signal,
            source=SignalSource.WORKFLOW_NODE,
            visible_actions=frozenset(),
            model_usage=usage,
            notes=notes,
        )

    def _route_after(self, ctx: DecisionContext, acted: ActedNode) -> tuple[str | None, str | None]:
        """Where to go after a TOOL/MODEL node, from the recorded outcome of its call (a fact, not a claim).

        Returns (next node, failure reason); a failure without an ``on_failure`` route fails the run.
        """
        node = self.nodes[acted.node]
        assert isinstance(node, ToolNode | ModelNode | AgentNode)
        outcome = next((o for o in reversed(ctx.observations) if o.step == acted.step), None)
        code = "no outcome recorded" if outcome is None else (outcome.error_code or outcome.status)
        delivered = outcome is not None and outcome.status == OutcomeStatus.SUCCESS
        if isinstance(node, AgentNode) and delivered and not _child_outcome(outcome):
            # Not an agent tool's outcome: the node would have called a plain tool under an agent's name.
            return None, f"node {node.id}: tool {node.tool} is not an agent tool (agent_tool)"
        if outcome is not None and outcome.status == OutcomeStatus.SUCCESS:
            schema = node.output_schema if isinstance(node, ToolNode) else None
            if schema is None:
                return node.next, None
            try:
                schema.model_validate(outcome.result)
                return node.next, None
            except ValidationError as exc:
                code = f"OUTPUT_SCHEMA_MISMATCH ({exc.error_count()} errors)"
        if node.on_failure is not None:
            return node.on_failure, None
        if code == ErrorCode.REJECTED_BY_APPROVER:
            return None, "rejected_by_approver"
        return None, f"node {node.id} failed: {code}"

    @staticmethod
    def _fail(reason: str, notes: list[NewEvent]) -> Proposal:
        decision = ControlDecision(type=DecisionType.FAIL, reason=reason)
        return Proposal(
            signal=decision,
            source=SignalSource.WORKFLOW_NODE,
            visible_actions=frozenset(),
            memo=WorkflowMemo().dump(),
            notes=notes,
        )

    @staticmethod
    def _finish(ctx: DecisionContext, reason: str, notes: list[NewEvent]) -> Proposal:
        decision = ControlDecision(type=DecisionType.FINISH, reason=reason)
        return Proposal(
            signal=decision,
            source=SignalSource.WORKFLOW_NODE,
            visible_actions=frozenset(),
            memo=WorkflowMemo(node=None).dump(),
            notes=notes,
        )
