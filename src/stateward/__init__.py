"""stateward: a runtime for LLM agents in which the model proposes and the runtime decides.

The public API is what this module exports; everything else is an implementation detail.
"""

from stateward.controllers.base import DecisionContext, Observation, Proposal
from stateward.controllers.plan_execute import PlanAndExecuteController
from stateward.controllers.react import ReActController
from stateward.controllers.workflow import (
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
from stateward.core.state import PendingRequest, RunState, is_run_suspended
from stateward.core.status import RunStatus, TransitionKind
from stateward.models.base import Model, ModelReply, ModelRequest
from stateward.runtime.agent import Agent, WaitCheck, guard
from stateward.runtime.continuation import AnswerResult
from stateward.runtime.runtime import Runtime
from stateward.tools.registry import ToolRegistry
from stateward.tools.spec import ToolContext, ToolSpec, tool

__all__ = (
    "Agent",
    "AnswerResult",
    "Budget",
    "ControlDecision",
    "DecisionContext",
    "DecisionParseError",
    "DecisionType",
    "FinishNode",
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
    "RequestRefusedError",
    "RuleNode",
    "RunError",
    "RunNotFoundError",
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
