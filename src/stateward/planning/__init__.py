"""Planning: Goal Contract, plan DAG, Plan Validator and versioned plan patches, and the plan-run engine.

A planner proposes a plan; :func:`validate_plan` decides whether it may run, :func:`apply_patch` is the
only way it changes, and :func:`derive_states` / :func:`ready_items` read work-item states from facts.
Stopping is decided here too: :class:`BudgetLedger` (reserve before work), :class:`ProgressTracker`
(bounded local ReAct), :func:`evaluate_termination`, and degraded delivery / handoff (:mod:`.delivery`).

The engine that runs a goal through a plan — :class:`PlanRunController` with its :class:`PlanRunConfig`,
the tools it lends its work items (:func:`plan_run_tools`) and its finish policy
(:func:`plan_finish_policy`) — is exported here too, imported on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from stateward.planning.budget import (
    BudgetAmount,
    BudgetError,
    BudgetLedger,
    BudgetLimits,
    BudgetRemaining,
)
from stateward.planning.delivery import (
    AttemptSummary,
    Conclusion,
    Confidence,
    DecisionOption,
    DegradationRung,
    DeliveryFacts,
    FindingRisk,
    HandoffPackage,
    PartialDelivery,
    ResumePoint,
    RiskAssessment,
    RiskHandling,
    assess,
    choose_rung,
    standard_options,
)
from stateward.planning.goal import (
    ArtifactPredicate,
    BudgetPredicate,
    CapabilityPredicate,
    ConstraintViolation,
    Criterion,
    CriterionEffect,
    EvidenceRequirement,
    GoalAssessment,
    GoalContract,
    HardConstraint,
    InvalidGoalDocumentError,
    LimitPredicate,
    MetricPredicate,
    Predicate,
    RunFacts,
    Scope,
    SoftConstraint,
    ViolationEffect,
    assess_goal,
    check_constraints,
    evaluate,
    load_goal,
    read_goal_file,
)
from stateward.planning.outcome import (
    CompletionMode,
    Measure,
    MeasureInput,
    Measurement,
    RunOutcome,
    completion_mode,
)
from stateward.planning.patch import (
    AttemptFact,
    AttemptOutcome,
    ExecutionFacts,
    PlanPatch,
    PlanPatchError,
    ReplanReason,
    WorkItemState,
    apply_patch,
    derive_states,
    load_patch,
    ready_items,
)
from stateward.planning.plan import (
    EstimatedCost,
    InvalidPlanDocumentError,
    Milestone,
    OutputSpec,
    Plan,
    RemainingBudget,
    RetryPolicy,
    RiskLevel,
    TaskType,
    WorkItem,
    load_plan,
    read_plan_file,
    total_cost,
)
from stateward.planning.progress import (
    NoProgressRule,
    PartialResult,
    ProgressConfig,
    ProgressSignal,
    ProgressTracker,
    ProgressVerdict,
    ReactDecisionSummary,
    SelectedAction,
    StepRecord,
    normalize_query,
)
from stateward.planning.stages import RunStage, StageEntry
from stateward.planning.termination import (
    FailureFact,
    TerminationDecision,
    TerminationPolicy,
    TerminationReason,
    TerminationRecord,
    TerminationSnapshot,
)
from stateward.planning.termination import evaluate as evaluate_termination
from stateward.planning.validator import (
    REJECT_CODES,
    REVISE_CODES,
    Issue,
    IssueCode,
    ValidationReport,
    Verdict,
    dependency_cycles,
    validate_plan,
)

if TYPE_CHECKING:
    from stateward.controllers.plan_run import (
        ApprovalAction,
        ItemProcedure,
        PlanRunConfig,
        PlanRunController,
        PlanRunMemo,
        start_item_guard,
    )
    from stateward.controllers.plan_support import cite_evidence, plan_finish_policy, plan_run_tools

# The plan-run engine is a controller: it imports this package, so it is resolved lazily.
_ENGINE: dict[str, str] = {
    "PlanRunMemo": "stateward.controllers.plan_run",
    "ApprovalAction": "stateward.controllers.plan_run",
    "ItemProcedure": "stateward.controllers.plan_run",
    "PlanRunConfig": "stateward.controllers.plan_run",
    "PlanRunController": "stateward.controllers.plan_run",
    "cite_evidence": "stateward.controllers.plan_support",
    "plan_finish_policy": "stateward.controllers.plan_support",
    "plan_run_tools": "stateward.controllers.plan_support",
    "start_item_guard": "stateward.controllers.plan_run",
}


def __getattr__(name: str) -> Any:
    module = _ENGINE.get(name)
    if module is None:
        raise AttributeError(f"module 'stateward.planning' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "REJECT_CODES",
    "REVISE_CODES",
    "ApprovalAction",
    "ArtifactPredicate",
    "AttemptFact",
    "AttemptOutcome",
    "AttemptSummary",
    "BudgetAmount",
    "BudgetError",
    "BudgetLedger",
    "BudgetLimits",
    "BudgetPredicate",
    "BudgetRemaining",
    "CapabilityPredicate",
    "CompletionMode",
    "Conclusion",
    "Confidence",
    "ConstraintViolation",
    "Criterion",
    "CriterionEffect",
    "DecisionOption",
    "DegradationRung",
    "DeliveryFacts",
    "EstimatedCost",
    "EvidenceRequirement",
    "ExecutionFacts",
    "FailureFact",
    "FindingRisk",
    "GoalAssessment",
    "GoalContract",
    "HandoffPackage",
    "HardConstraint",
    "InvalidGoalDocumentError",
    "InvalidPlanDocumentError",
    "Issue",
    "IssueCode",
    "ItemProcedure",
    "LimitPredicate",
    "Measure",
    "MeasureInput",
    "Measurement",
    "MetricPredicate",
    "Milestone",
    "NoProgressRule",
    "OutputSpec",
    "PartialDelivery",
    "PartialResult",
    "Plan",
    "PlanPatch",
    "PlanPatchError",
    "PlanRunConfig",
    "PlanRunController",
    "PlanRunMemo",
    "Predicate",
    "ProgressConfig",
    "ProgressSignal",
    "ProgressTracker",
    "ProgressVerdict",
    "ReactDecisionSummary",
    "RemainingBudget",
    "ReplanReason",
    "ResumePoint",
    "RetryPolicy",
    "RiskAssessment",
    "RiskHandling",
    "RiskLevel",
    "RunFacts",
    "RunOutcome",
    "RunStage",
    "Scope",
    "SelectedAction",
    "SoftConstraint",
    "StageEntry",
    "StepRecord",
    "TaskType",
    "TerminationDecision",
    "TerminationPolicy",
    "TerminationReason",
    "TerminationRecord",
    "TerminationSnapshot",
    "ValidationReport",
    "Verdict",
    "ViolationEffect",
    "WorkItem",
    "WorkItemState",
    "apply_patch",
    "assess",
    "assess_goal",
    "check_constraints",
    "choose_rung",
    "cite_evidence",
    "completion_mode",
    "dependency_cycles",
    "derive_states",
    "evaluate",
    "evaluate_termination",
    "load_goal",
    "load_patch",
    "load_plan",
    "normalize_query",
    "plan_finish_policy",
    "plan_run_tools",
    "read_goal_file",
    "read_plan_file",
    "ready_items",
    "standard_options",
    "start_item_guard",
    "total_cost",
    "validate_plan",
]
