"""Goal-driven plan execution: the plan orders the work, a bounded local ReAct explores each MODEL or
LOCAL_REACT work item, RULE, TOOL and VALIDATION items run their registered procedures as code, verification
checks what comes out - and none of them can change the goal, reset the budget or skip an approval.

Every step still leaves as one ControlDecision for the runtime's ``handle`` (a module function of
``stateward.runtime.transition``). What the controller remembers (the validated plan, per-item attempts, the
budget ledger, the progress tracker) is its memo, committed with the step. Work-item states are derived from
recorded facts on every decision, never from a model saying "done": an item completes when its declared
output artifact was written by a successful tool call, and a deliverable only counts once its checks pass.

The coordinator (``controller.py``) owns the order of a step; every other module here is a part made of
functions that are handed what they need (``services.Services``) and return to it.
"""

from stateward.controllers.plan_run.controller import PlanRunController
from stateward.controllers.plan_run.memo import (
    ApprovalAction,
    EvidenceVerifier,
    ItemProcedure,
    ItemRun,
    PlanRunConfig,
    PlanRunMemo,
    Verifier,
    start_item_guard,
)

__all__ = [
    "ApprovalAction",
    "EvidenceVerifier",
    "ItemProcedure",
    "ItemRun",
    "PlanRunConfig",
    "PlanRunController",
    "PlanRunMemo",
    "Verifier",
    "start_item_guard",
]
