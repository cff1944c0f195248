"""How a plan run ended, in the goal's terms: completion mode, the rung delivered, what stays unresolved.

A run's status says whether it stopped well (COMPLETED / PARTIALLY_COMPLETED / ...); the outcome says
*what* it delivered. The source case ends COMPLETED with completion mode DEGRADED: every work item was
verified and the report delivered, but one repository could not be read, so the result carries a gap.
Both are decided from recorded facts: :class:`Measurement` is what a goal-specific measuring function
read from the run's verified outputs, :class:`RunOutcome` what the controller concluded from it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt

from stateward.planning.budget import BudgetAmount
from stateward.planning.delivery import DegradationRung


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CompletionMode(StrEnum):
    """FULL: everything the goal asked for, no gap. DEGRADED: delivered with gaps stated, or less than asked.
    NONE: nothing was delivered - the run failed safely (the ladder's lowest rung)."""

    FULL = "FULL"
    DEGRADED = "DEGRADED"
    NONE = "NONE"


class MeasureInput(_Frozen):
    """What a measuring function may read: the content of each verified output (by artifact type) and every
    evidence id the run's tool calls returned. Nothing a model merely asserted is in here."""

    outputs: dict[str, str] = Field(default_factory=dict)
    recorded_evidence: frozenset[str] = frozenset()


class Measurement(_Frozen):
    """Goal metrics measured from a run's records, and the issues they leave open.

    ``metrics`` feed the goal's success and failure criteria; an unmeasured metric is simply absent (a
    criterion on it is neither met nor failed). ``unresolved`` are gaps the delivery must state (e.g. a
    repository nobody could read).
    """

    metrics: dict[str, float] = Field(default_factory=dict)
    unresolved: tuple[str, ...] = ()


Measure = Callable[[MeasureInput], Measurement]
"""A goal's measuring function: recorded outputs in, metrics and open issues out (pure, deterministic)."""


class RunOutcome(_Frozen):
    """What a plan run delivered: recorded once, when it delivers, and read by summaries and people.

    ``budget_to_continue`` is the estimate of what the unfinished work would still need (from the plan's
    estimates), so a partial delivery says what continuing would cost.
    """

    completion_mode: CompletionMode
    rung: DegradationRung
    reason_code: str = Field(min_length=1)
    plan_version: NonNegativeInt | None = None
    final_artifact: str | None = None
    unresolved_issues: tuple[str, ...] = ()
    criteria_met: tuple[str, ...] = ()
    criteria_unmet: tuple[str, ...] = ()
    metrics: dict[str, float] = Field(default_factory=dict)
    budget_used: BudgetAmount = BudgetAmount()
    budget_to_continue: BudgetAmount | None = None


def completion_mode(rung: DegradationRung, unresolved: tuple[str, ...]) -> CompletionMode:
    """FULL only for a full report with nothing left open; NONE for a safe failure (nothing delivered);
    anything else is a degraded completion."""
    if rung is DegradationRung.FULL_REPORT and not unresolved:
        return CompletionMode.FULL
    if rung is DegradationRung.SAFE_FAILURE:
        return CompletionMode.NONE
    return CompletionMode.DEGRADED


def criterion_texts(descriptions: Mapping[str, str], ids: tuple[str, ...]) -> tuple[str, ...]:
    """Unmet criteria as the issues a person reads: ``id: description``."""
    return tuple(f"{i}: {descriptions.get(i, i)}" for i in ids)
