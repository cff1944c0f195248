"""What the parts of a plan run are handed, and what they hand back to the coordinator.

Every part is a module of functions: it is given the run's :class:`Services` (the config, the models, the memo's
seals) with the step's context and memo, and returns a Proposal, or one of the small results below that tells the
coordinator what to do next. No part calls another part's step or the coordinator: the coordinator
(``controller.py``) owns the order of the steps.
"""

from __future__ import annotations

from dataclasses import dataclass

from stateward.controllers.plan_run.memo import MemoSeals, PlanRunConfig
from stateward.core.events import NewEvent
from stateward.models.base import AnyModel, Usage


@dataclass(frozen=True)
class Services:
    """The controller's current config, models and seals, taken afresh at every decision (a test or an operator
    may replace the config or a model between steps)."""

    config: PlanRunConfig
    planner: AnyModel
    worker: AnyModel
    seals: MemoSeals


@dataclass(frozen=True)
class DecideAgain:
    """The memo changed (an attempt ended, a plan or a patch was recorded): decide again in the same step, with
    ``notes`` before the next step's own and ``usages`` (the model calls made on the way) before its usage."""

    notes: list[NewEvent]
    usages: tuple[Usage, ...] = ()


@dataclass(frozen=True)
class DeliverPartial:
    """The budget cannot carry the next work: deliver what is verified, for ``code`` and ``detail``."""

    code: str
    detail: str


@dataclass(frozen=True)
class Reschedule:
    """A patch was refused: schedule on the plan in hand, its planner call's ``usage`` reported with the step."""

    usage: Usage
