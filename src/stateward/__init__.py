"""stateward: a runtime for LLM agents in which the model proposes and the runtime decides.

The public API is what this module exports; everything else is an implementation detail.
Names are imported on first use (PEP 562), so ``import stateward`` — and every CLI command — pays
only for what it touches.

Layers, bottom first; imports point down only, and packages in braces are peers that import neither
each other (tests/core/test_layers.py holds the same list and checks every import against it)::

    core · store · models · tools · planning · verify · {controllers, runtime} · {chaos, testing}
    · {api, pytest_plugin} · cli · this package (the facade)

Controllers and the runtime meet in ``stateward.core.contract``; the store knows no gateway module.
docs/architecture.md draws the layers and says where new code goes.

Public-surface budget
---------------------
The top level holds at most 89 names: what a user's first file needs, for one of five jobs. It does not grow:
a new name takes the place of one that moves to its subpackage, or the budget is raised here, with its
reason, in the same change (89: ``AgentNode``, the workflow node whose step another agent does, issue 29;
a workflow's nodes are one family, and the others are all here). Everything else lives in a named
subpackage with its own pinned ``__all__``:
``stateward.planning`` (goal contracts, plans, the plan-run engine), ``stateward.verify`` (contracts and
checks), ``stateward.models`` (providers), ``stateward.tools`` (the gateway's parts), ``stateward.observability``,
``stateward.api``, ``stateward.cli.plugins``, ``stateward.testing`` (fakes). No name from those is re-exported
here, and a name means one object in every public module. tests/core/test_public_api.py holds ``__all__`` to
exactly the names below, each job to its count, and the total to the budget.

- Define tools (18): ``tool`` ``ToolSpec`` ``ToolContext`` ``ToolRegistry`` ``RetryPolicy`` ``BreakerPolicy``
  ``RedactionRules`` ``LookupStatus`` ``ToolFailure`` ``ToolTimeout`` ``ToolInvalidArgument``
  ``ToolPermissionDenied`` ``ToolOutcomeUnknown`` ``RateLimited`` ``ServiceUnavailable`` ``McpServer``
  ``McpTool`` ``mcp_tools``
- Define an agent over one of the three controllers (23): ``Agent`` ``AgentRef`` ``AgentRegistry`` ``Budget``
  ``guard`` ``action_digest`` ``ReActController`` ``PlanAndExecuteController`` ``AwaitStep`` ``FinishStep``
  ``parse_step_plan`` ``WorkflowController`` ``RuleNode`` ``ModelNode`` ``ToolNode`` ``ValidationNode``
  ``HumanNode`` ``TimerNode`` ``ReActNode`` ``AgentNode`` ``FinishNode`` ``FailNode`` ``compensation``
- Write a controller or a model (the Runtime's contract) (16): ``Controller`` ``DecisionContext`` ``Proposal``
  ``Observation`` ``SignalFailure`` ``FinishCheck`` ``WaitCheck`` ``ControlDecision`` ``DecisionType``
  ``SignalSource`` ``parse_decision`` ``action_specs`` ``Model`` ``AsyncModel`` ``ModelReply`` ``ModelRequest``
- Start, inspect and answer runs (21): ``Runtime`` ``AsyncWorker`` ``AnswerResult`` ``RunState`` ``RunStatus``
  ``TransitionKind`` ``PendingRequest`` ``RequestKind`` ``ApprovalScope`` ``Grant`` ``GuardedAction``
  ``is_run_suspended`` ``Usage`` ``Event`` ``EventType`` ``RunRow`` ``RunPage`` ``RequestRow`` ``RequestPage``
  ``ArtifactRecord`` ``inert``
- Catch what goes wrong (11): ``StatewardError`` ``UserError`` ``RunError`` ``RunNotFoundError``
  ``StaleLeaseError`` ``StoreError`` ``ToolCallError`` ``DecisionParseError`` ``IllegalTransitionError``
  ``RequestRefusedError`` ``ErrorCode``
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stateward.controllers.plan_execute import AwaitStep, FinishStep, PlanAndExecuteController, parse_step_plan
    from stateward.controllers.react import ReActController
    from stateward.controllers.workflow import (
        AgentNode,
        FailNode,
        FinishNode,
        HumanNode,
        ModelNode,
        ReActNode,
        RuleNode,
        TimerNode,
        ToolNode,
        ValidationNode,
        WorkflowController,
        compensation,
    )
    from stateward.core.budget import Budget, Usage
    from stateward.core.canonical import action_digest
    from stateward.core.contract import (
        Controller,
        DecisionContext,
        FinishCheck,
        Observation,
        Proposal,
        SignalFailure,
        WaitCheck,
    )
    from stateward.core.decision import ControlDecision, DecisionType, SignalSource, parse_decision
    from stateward.core.errors import (
        DecisionParseError,
        ErrorCode,
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
    from stateward.core.events import Event, EventType
    from stateward.core.inert import inert
    from stateward.core.state import (
        AgentRef,
        ApprovalScope,
        Grant,
        GuardedAction,
        PendingRequest,
        RequestKind,
        RunState,
        is_run_suspended,
    )
    from stateward.core.status import RunStatus, TransitionKind
    from stateward.models.base import AsyncModel, Model, ModelReply, ModelRequest
    from stateward.runtime.agent import Agent, guard
    from stateward.runtime.agent_registry import AgentRegistry
    from stateward.runtime.async_worker import AsyncWorker
    from stateward.runtime.continuation import AnswerResult
    from stateward.runtime.runtime import Runtime, action_specs
    from stateward.store.paging import RequestPage, RequestRow, RunPage
    from stateward.store.records import ArtifactRecord, RunRow
    from stateward.tools.breaker import BreakerPolicy
    from stateward.tools.errors import (
        RateLimited,
        ServiceUnavailable,
        ToolFailure,
        ToolInvalidArgument,
        ToolOutcomeUnknown,
        ToolPermissionDenied,
        ToolTimeout,
    )
    from stateward.tools.mcp import McpServer, McpTool, mcp_tools
    from stateward.tools.redaction import RedactionRules
    from stateward.tools.registry import ToolRegistry
    from stateward.tools.retry import RetryPolicy
    from stateward.tools.spec import ToolContext, ToolSpec, tool
    from stateward.tools.types import LookupStatus

_EXPORTS: dict[str, str] = {
    "inert": "stateward.core.inert",
    "action_specs": "stateward.runtime.runtime",
    "action_digest": "stateward.core.canonical",
    "RequestKind": "stateward.core.state",
    "GuardedAction": "stateward.core.state",
    "EventType": "stateward.core.events",
    "parse_step_plan": "stateward.controllers.plan_execute",
    "FinishStep": "stateward.controllers.plan_execute",
    "AwaitStep": "stateward.controllers.plan_execute",
    "FinishCheck": "stateward.core.contract",
    "Controller": "stateward.core.contract",
    "SignalFailure": "stateward.core.contract",
    "Agent": "stateward.runtime.agent",
    "AgentRef": "stateward.core.state",
    "AgentRegistry": "stateward.runtime.agent_registry",
    "AnswerResult": "stateward.runtime.continuation",
    "ApprovalScope": "stateward.core.state",
    "ArtifactRecord": "stateward.store.records",
    "AsyncModel": "stateward.models.base",
    "AsyncWorker": "stateward.runtime.async_worker",
    "BreakerPolicy": "stateward.tools.breaker",
    "Budget": "stateward.core.budget",
    "ControlDecision": "stateward.core.decision",
    "DecisionContext": "stateward.core.contract",
    "DecisionParseError": "stateward.core.errors",
    "ErrorCode": "stateward.core.errors",
    "DecisionType": "stateward.core.decision",
    "Event": "stateward.core.events",
    "AgentNode": "stateward.controllers.workflow",
    "FailNode": "stateward.controllers.workflow",
    "FinishNode": "stateward.controllers.workflow",
    "Grant": "stateward.core.state",
    "HumanNode": "stateward.controllers.workflow",
    "IllegalTransitionError": "stateward.core.errors",
    "LookupStatus": "stateward.tools.types",
    "McpServer": "stateward.tools.mcp",
    "McpTool": "stateward.tools.mcp",
    "Model": "stateward.models.base",
    "ModelNode": "stateward.controllers.workflow",
    "ModelReply": "stateward.models.base",
    "ModelRequest": "stateward.models.base",
    "Observation": "stateward.core.contract",
    "PendingRequest": "stateward.core.state",
    "PlanAndExecuteController": "stateward.controllers.plan_execute",
    "Proposal": "stateward.core.contract",
    "RateLimited": "stateward.tools.errors",
    "ReActController": "stateward.controllers.react",
    "ReActNode": "stateward.controllers.workflow",
    "RedactionRules": "stateward.tools.redaction",
    "RequestPage": "stateward.store.paging",
    "RequestRefusedError": "stateward.core.errors",
    "RequestRow": "stateward.store.paging",
    "RetryPolicy": "stateward.tools.retry",
    "RuleNode": "stateward.controllers.workflow",
    "RunError": "stateward.core.errors",
    "RunNotFoundError": "stateward.core.errors",
    "RunPage": "stateward.store.paging",
    "RunRow": "stateward.store.records",
    "RunState": "stateward.core.state",
    "RunStatus": "stateward.core.status",
    "Runtime": "stateward.runtime.runtime",
    "ServiceUnavailable": "stateward.tools.errors",
    "SignalSource": "stateward.core.decision",
    "StaleLeaseError": "stateward.core.errors",
    "StatewardError": "stateward.core.errors",
    "StoreError": "stateward.core.errors",
    "TimerNode": "stateward.controllers.workflow",
    "ToolCallError": "stateward.core.errors",
    "ToolContext": "stateward.tools.spec",
    "ToolFailure": "stateward.tools.errors",
    "ToolInvalidArgument": "stateward.tools.errors",
    "ToolNode": "stateward.controllers.workflow",
    "ToolOutcomeUnknown": "stateward.tools.errors",
    "ToolPermissionDenied": "stateward.tools.errors",
    "ToolRegistry": "stateward.tools.registry",
    "ToolSpec": "stateward.tools.spec",
    "ToolTimeout": "stateward.tools.errors",
    "TransitionKind": "stateward.core.status",
    "Usage": "stateward.core.budget",
    "UserError": "stateward.core.errors",
    "ValidationNode": "stateward.controllers.workflow",
    "WaitCheck": "stateward.core.contract",
    "WorkflowController": "stateward.controllers.workflow",
    "compensation": "stateward.controllers.workflow",
    "guard": "stateward.runtime.agent",
    "is_run_suspended": "stateward.core.state",
    "mcp_tools": "stateward.tools.mcp",
    "parse_decision": "stateward.core.decision",
    "tool": "stateward.tools.spec",
}

__all__ = (
    "Agent",
    "AgentNode",
    "AgentRef",
    "AgentRegistry",
    "AnswerResult",
    "ApprovalScope",
    "ArtifactRecord",
    "AsyncModel",
    "AsyncWorker",
    "AwaitStep",
    "BreakerPolicy",
    "Budget",
    "ControlDecision",
    "Controller",
    "DecisionContext",
    "DecisionParseError",
    "DecisionType",
    "ErrorCode",
    "Event",
    "EventType",
    "FailNode",
    "FinishCheck",
    "FinishNode",
    "FinishStep",
    "Grant",
    "GuardedAction",
    "HumanNode",
    "IllegalTransitionError",
    "LookupStatus",
    "McpServer",
    "McpTool",
    "Model",
    "ModelNode",
    "ModelReply",
    "ModelRequest",
    "Observation",
    "PendingRequest",
    "PlanAndExecuteController",
    "Proposal",
    "RateLimited",
    "ReActController",
    "ReActNode",
    "RedactionRules",
    "RequestKind",
    "RequestPage",
    "RequestRefusedError",
    "RequestRow",
    "RetryPolicy",
    "RuleNode",
    "RunError",
    "RunNotFoundError",
    "RunPage",
    "RunRow",
    "RunState",
    "RunStatus",
    "Runtime",
    "ServiceUnavailable",
    "SignalFailure",
    "SignalSource",
    "StaleLeaseError",
    "StatewardError",
    "StoreError",
    "TimerNode",
    "ToolCallError",
    "ToolContext",
    "ToolFailure",
    "ToolInvalidArgument",
    "ToolNode",
    "ToolOutcomeUnknown",
    "ToolPermissionDenied",
    "ToolRegistry",
    "ToolSpec",
    "ToolTimeout",
    "TransitionKind",
    "Usage",
    "UserError",
    "ValidationNode",
    "WaitCheck",
    "WorkflowController",
    "action_digest",
    "action_specs",
    "compensation",
    "guard",
    "inert",
    "is_run_suspended",
    "mcp_tools",
    "parse_decision",
    "parse_step_plan",
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
