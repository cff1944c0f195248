"""stateward: a runtime for LLM agents in which the model proposes and the runtime decides.

The public API is what this module exports; everything else is an implementation detail.
Names are imported on first use (PEP 562), so ``import stateward`` — and every CLI command — pays
only for what it touches.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stateward.controllers.base import DecisionContext, Observation, Proposal
    from stateward.controllers.plan_execute import PlanAndExecuteController
    from stateward.controllers.react import ReActController
    from stateward.controllers.workflow import (
        FailNode,
        FinishNode,
        HumanNode,
        ModelNode,
        RuleNode,
        ToolNode,
        WorkflowController,
    )
    from stateward.core.budget import Budget, Usage
    from stateward.core.decision import ControlDecision, DecisionType, SignalSource, parse_decision
    from stateward.core.errors import (
        DecisionParseError,
        IllegalTransitionError,
        RequestRefusedError,
        RunError,
        RunNotFoundError,
        StaleLeaseError,
        StatewardError,
        StoreError,
        ToolCallError,
        UserError,
    )
    from stateward.core.events import Event
    from stateward.core.state import AgentRef, ApprovalScope, Grant, PendingRequest, RunState, is_run_suspended
    from stateward.core.status import RunStatus, TransitionKind
    from stateward.models.base import Model, ModelReply, ModelRequest
    from stateward.runtime.agent import Agent, WaitCheck, guard
    from stateward.runtime.agent_registry import AgentRegistry
    from stateward.runtime.continuation import AnswerResult
    from stateward.runtime.runtime import Runtime
    from stateward.store.paging import RequestPage, RequestRow, RunPage
    from stateward.store.records import ArtifactRecord, RunRow
    from stateward.tools.registry import ToolRegistry
    from stateward.tools.spec import ToolContext, ToolSpec, tool

_EXPORTS: dict[str, str] = {
    "Agent": "stateward.runtime.agent",
    "AgentRef": "stateward.core.state",
    "AgentRegistry": "stateward.runtime.agent_registry",
    "ApprovalScope": "stateward.core.state",
    "ArtifactRecord": "stateward.store.records",
    "Event": "stateward.core.events",
    "RequestPage": "stateward.store.paging",
    "RequestRow": "stateward.store.paging",
    "RunPage": "stateward.store.paging",
    "RunRow": "stateward.store.records",
    "FailNode": "stateward.controllers.workflow",
    "Grant": "stateward.core.state",
    "AnswerResult": "stateward.runtime.continuation",
    "Budget": "stateward.core.budget",
    "ControlDecision": "stateward.core.decision",
    "DecisionContext": "stateward.controllers.base",
    "DecisionParseError": "stateward.core.errors",
    "DecisionType": "stateward.core.decision",
    "FinishNode": "stateward.controllers.workflow",
    "HumanNode": "stateward.controllers.workflow",
    "IllegalTransitionError": "stateward.core.errors",
    "Model": "stateward.models.base",
    "ModelNode": "stateward.controllers.workflow",
    "ModelReply": "stateward.models.base",
    "ModelRequest": "stateward.models.base",
    "Observation": "stateward.controllers.base",
    "PendingRequest": "stateward.core.state",
    "PlanAndExecuteController": "stateward.controllers.plan_execute",
    "Proposal": "stateward.controllers.base",
    "ReActController": "stateward.controllers.react",
    "RequestRefusedError": "stateward.core.errors",
    "RuleNode": "stateward.controllers.workflow",
    "RunError": "stateward.core.errors",
    "RunNotFoundError": "stateward.core.errors",
    "RunState": "stateward.core.state",
    "RunStatus": "stateward.core.status",
    "Runtime": "stateward.runtime.runtime",
    "SignalSource": "stateward.core.decision",
    "StaleLeaseError": "stateward.core.errors",
    "StatewardError": "stateward.core.errors",
    "StoreError": "stateward.core.errors",
    "ToolCallError": "stateward.core.errors",
    "ToolContext": "stateward.tools.spec",
    "ToolNode": "stateward.controllers.workflow",
    "ToolRegistry": "stateward.tools.registry",
    "ToolSpec": "stateward.tools.spec",
    "TransitionKind": "stateward.core.status",
    "Usage": "stateward.core.budget",
    "UserError": "stateward.core.errors",
    "WaitCheck": "stateward.runtime.agent",
    "WorkflowController": "stateward.controllers.workflow",
    "guard": "stateward.runtime.agent",
    "is_run_suspended": "stateward.core.state",
    "parse_decision": "stateward.core.decision",
    "tool": "stateward.tools.spec",
}

__all__ = (
    "Agent",
    "AgentRef",
    "AgentRegistry",
    "AnswerResult",
    "ApprovalScope",
    "ArtifactRecord",
    "Budget",
    "ControlDecision",
    "DecisionContext",
    "DecisionParseError",
    "DecisionType",
    "Event",
    "FailNode",
    "FinishNode",
    "Grant",
    "HumanNode",
    "IllegalTransitionError",
    "Model",
    "ModelNode",
    "ModelReply",
    "ModelRequest",
    "Observation",
    "PendingRequest",
    "PlanAndExecuteController",
    "Proposal",
    "ReActController",
    "RequestPage",
    "RequestRefusedError",
    "RequestRow",
    "RuleNode",
    "RunError",
    "RunNotFoundError",
    "RunPage",
    "RunRow",
    "RunState",
    "RunStatus",
    "Runtime",
    "SignalSource",
    "StaleLeaseError",
    "StatewardError",
    "StoreError",
    "ToolCallError",
    "ToolContext",
    "ToolNode",
    "ToolRegistry",
    "ToolSpec",
    "TransitionKind",
    "Usage",
    "UserError",
    "WaitCheck",
    "WorkflowController",
    "guard",
    "is_run_suspended",
    "parse_decision",
    "tool",
)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'stateward' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
