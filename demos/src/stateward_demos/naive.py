"""COUNTER-EXAMPLES. Do not copy these loops: they are here to show what the Runtime prevents.

Each naive loop drives the same tools, gateway and scripted model as the real agent, but treats a
wait signal as data: it sets ``waiting_marker`` and carries on. Writing "please confirm" into a
variable stops nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from stateward import (
    AgentRef,
    AwaitStep,
    DecisionContext,
    DecisionParseError,
    DecisionType,
    FinishStep,
    HumanNode,
    Model,
    ModelNode,
    ModelRequest,
    Observation,
    RuleNode,
    RunState,
    SignalFailure,
    ToolNode,
    action_specs,
    parse_decision,
    parse_step_plan,
)
from stateward.models import complete
from stateward.tools import CallContext, InMemoryGatewayStore, OutcomeStatus, ToolCall, ToolGateway
from stateward_demos import blog, blog_fixtures


@dataclass
class NaiveRun:
    """What a naive loop leaves behind: a status string it set itself, and a marker nobody reads."""

    mode: str
    status: str = "RUNNING"
    terminal_reason: str = "running"
    waiting_marker: bool = False
    model_calls: int = 0
    tool_attempts: int = 0
    rejected_actions: int = 0
    calls_at_marker: tuple[int, int] | None = None
    artifacts: dict[str, int] = field(default_factory=dict)
    observations: list[Observation] = field(default_factory=list)

    def mark_waiting(self) -> None:
        self.waiting_marker = True
        if self.calls_at_marker is None:
            self.calls_at_marker = (self.model_calls, self.tool_attempts)

    def row(self) -> dict[str, Any]:
        model_at, tool_at = self.calls_at_marker or (self.model_calls, self.tool_attempts)
        return {
            "mode": self.mode,
            "variant": "naive",
            "terminal_reason": self.terminal_reason,
            "status": self.status,
            "waiting_marker": self.waiting_marker,
            "model_calls": self.model_calls,
            "tool_attempts": self.tool_attempts,
            "rejected_actions": self.rejected_actions,
            "pending_request_id": None,
            "draft_written": "draft" in self.artifacts,
            "approval_granted": False,
            "model_calls_after_wait": self.model_calls - model_at,
            "tool_calls_after_wait": self.tool_attempts - tool_at,
        }


class _Harness:
    """The shared tools and gateway; each naive loop only differs in how it picks the next action."""

    def __init__(self, mode: str, materials: str):
        self.agent = blog.build_agent(mode, materials=materials)
        self.gateway = ToolGateway(self.agent.tools, InMemoryGatewayStore())
        self.run = NaiveRun(mode=mode)
        self.inventory = list(self.agent.inventory)
        self.specs = action_specs(self.agent)

    def state(self) -> RunState:
        return RunState(
            run_id=f"naive-{self.run.mode}",
            agent=AgentRef(name=blog.NAME),
            goal=blog_fixtures.GOAL,
            artifacts=dict(self.run.artifacts),
        )

    def context(self) -> DecisionContext:
        return DecisionContext(
            state=self.state(), observations=self.run.observations, inventory=self.inventory, actions=self.specs
        )

    def request(self, purpose: str, observations: list[dict[str, Any]] | None = None) -> ModelRequest:
        ctx = self.context()
        seen = [o.model_dump(mode="json") for o in ctx.observations] if observations is None else observations
        return ModelRequest(
            purpose=purpose,
            goal=blog_fixtures.GOAL,
            inventory=self.inventory,
            observations=seen,
            visible_actions=ctx.specs(tuple(ctx.actions)),
            facts=ctx.facts(),
        )

    def invoke(self, tool: str, args: dict[str, Any]) -> None:
        outcome = self.gateway.invoke(
            ToolCall(tool=tool, args=args),
            CallContext(run_id=f"naive-{self.run.mode}", step=self.run.tool_attempts + 1),
        )
        self.run.tool_attempts += 1
        if outcome.status is OutcomeStatus.BLOCKED:
            self.run.rejected_actions += 1
        for draft in outcome.artifacts:
            self.run.artifacts[draft.name] = self.run.artifacts.get(draft.name, 0) + 1
        self.run.observations.append(
            Observation(
                step=self.run.tool_attempts,
                action=tool,
                args=args,
                status=outcome.status.value,
                result=outcome.result,
                error_code=None if outcome.error_code is None else outcome.error_code.value,
            )
        )

    def complete(self) -> None:
        self.run.status, self.run.terminal_reason = "COMPLETED", "completed"


def naive_react(materials: str = "default", max_model_calls: int = 8, model: Model | None = None) -> NaiveRun:
    """``model``: the signal source (default: the blog's scripted ReAct model)."""
    h = _Harness("react", materials)
    source = model or blog.scripted_models()["react"]
    for _ in range(max_model_calls):
        reply = complete(source, h.request("decide"))
        h.run.model_calls += 1
        try:
            decision = parse_decision(reply.text)
        except DecisionParseError:
            continue  # the naive loop just asks again
        if decision.type is DecisionType.EXECUTE_TOOL and decision.action:
            h.invoke(decision.action, decision.args or {})
        elif decision.type is DecisionType.REQUEST_USER_INPUT:
            h.run.mark_waiting()  # printed, never handled: the loop asks the model again
        elif decision.type is DecisionType.FINISH:
            h.complete()
            return h.run
    h.run.terminal_reason = "budget_exhausted"  # and the status is still RUNNING
    return h.run


def naive_plan_and_execute(materials: str = "default", model: Model | None = None) -> NaiveRun:
    """``model``: the planner (default: the blog's scripted planner)."""
    h = _Harness("plan_and_execute", materials)
    reply = complete(model or blog.scripted_models()["plan_and_execute"], h.request("plan"))
    h.run.model_calls += 1
    plan = parse_step_plan(reply.text, set(h.agent.tools.names()))
    if isinstance(plan, SignalFailure):
        h.run.status, h.run.terminal_reason = "FAILED", plan.code
        return h.run
    for step in plan.steps:
        if isinstance(step, AwaitStep):
            h.run.mark_waiting()  # the plan says "wait"; the executor records it and moves on
        elif isinstance(step, FinishStep):
            break
        else:
            h.invoke(step.action, step.args)
    h.complete()
    return h.run


def naive_workflow(materials: str = "default", model: Model | None = None) -> NaiveRun:
    """``model``: what fills the workflow's model nodes (default: the blog's scripted one)."""
    h = _Harness("workflow", materials)
    controller = blog.workflow_nodes(model or blog.scripted_models()["workflow"], h.inventory)
    node_id: str | None = controller.start
    while node_id is not None:
        node = controller.nodes[node_id]
        if isinstance(node, RuleNode):
            node_id = node.if_true if node.predicate(h.context()) else node.if_false
        elif isinstance(node, HumanNode):
            h.run.mark_waiting()
            node_id = None  # no answer has come, so no route applies: the runner thinks it is done
        elif isinstance(node, ToolNode):
            h.invoke(node.tool, dict(node.args(h.context()) if callable(node.args) else node.args))
            node_id = node.next
        elif isinstance(node, ModelNode) and controller.model is not None:
            reply = complete(controller.model, h.request("content", node.inputs(h.context())))
            h.run.model_calls += 1
            try:
                args = json.loads(reply.text)
            except ValueError:
                args = {}  # whatever came back is passed on as it is: no arguments
            h.invoke(node.tool, args if isinstance(args, dict) else {})
            node_id = node.next
        else:
            node_id = None
    h.complete()
    return h.run
