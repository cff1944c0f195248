"""Plan: milestones and work items forming a versioned DAG.

A plan is a document a planner (often a model) proposes. It is parsed into frozen models here and judged
by :mod:`stateward.planning.validator`; it changes only through a patch (:mod:`stateward.planning.patch`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveInt,
    ValidationError,
    field_validator,
)

from stateward.core.errors import ErrorCode, RunError
from stateward.planning.goal import field_errors, parse_json_document, summarize_field_errors


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RiskLevel(StrEnum):
    """How risky a work item is; high-risk items need an approval before they start."""

    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"


class TaskType(StrEnum):
    """How a work item is carried out (which controller or node kind runs it).

    The seed's workflow node types (RULE, MODEL, TOOL, VALIDATION, HUMAN, WAIT/TIMER, COMPENSATION) plus
    LOCAL_REACT and VERIFICATION. Documents may write them in any case, and ``WAIT/TIMER`` as one name
    (read as WAIT). The plan-run engine has a model work MODEL and LOCAL_REACT items through their tools
    until the output artifact exists, and runs every other item as the procedure registered for its
    artifact type; an item a person or an outside event decides (HUMAN, WAIT, TIMER) must also declare
    ``approval_required``, so the run stops for that answer before its procedure runs (the validator says
    MISSING_APPROVAL otherwise). An AGENT item runs as a child run of the agent tool it names in its
    ``required_capabilities`` (``controllers/plan_run/agent_items.py``).
    """

    TOOL = "TOOL"
    LOCAL_REACT = "LOCAL_REACT"
    MODEL = "MODEL"
    RULE = "RULE"
    VERIFICATION = "VERIFICATION"
    VALIDATION = "VALIDATION"  # the seed's name: schema, evidence and coverage checks
    HUMAN = "HUMAN"
    WAIT = "WAIT"  # a callback or an outside event
    TIMER = "TIMER"  # a deadline
    COMPENSATION = "COMPENSATION"  # undo a reservation, mark something invalid
    AGENT = "AGENT"  # another agent does it: a child run, by a call of the agent tool it names


# The items a model carries out (its bounded local ReAct). Every other item runs as the procedure registered
# for its artifact type (source 5: a RULE or TOOL node is not the model's to decide, and what follows a person's
# answer to a HUMAN item is the approved action, not a model's choice).
MODEL_TASK_TYPES = frozenset({TaskType.MODEL, TaskType.LOCAL_REACT})
# Items no model may carry out on its own: the run must stop for a trusted answer before they start.
OUTSIDE_TASK_TYPES = frozenset({TaskType.HUMAN, TaskType.WAIT, TaskType.TIMER})
_TASK_TYPE_ALIASES = {"WAIT/TIMER": TaskType.WAIT.value, "WAIT_TIMER": TaskType.WAIT.value}


class EstimatedCost(_Frozen):
    """What a work item is expected to consume, reserved from the budget before it starts."""

    tool_calls: NonNegativeInt = 0
    model_calls: NonNegativeInt = 0
    tokens: NonNegativeInt = 0

    def __add__(self, other: EstimatedCost) -> EstimatedCost:
        return EstimatedCost(
            tool_calls=self.tool_calls + other.tool_calls,
            model_calls=self.model_calls + other.model_calls,
            tokens=self.tokens + other.tokens,
        )


class RemainingBudget(_Frozen):
    """What is left to spend; ``None`` means that dimension is not limited."""

    tool_calls: NonNegativeInt | None = None
    model_calls: NonNegativeInt | None = None
    tokens: NonNegativeInt | None = None

    def shortfalls(self, need: EstimatedCost) -> list[tuple[str, int, int]]:
        """``(dimension, needed, remaining)`` for each dimension ``need`` does not fit into."""
        out: list[tuple[str, int, int]] = []
        for name in ("tool_calls", "model_calls", "tokens"):
            limit: int | None = getattr(self, name)
            needed: int = getattr(need, name)
            if limit is not None and needed > limit:
                out.append((name, needed, limit))
        return out


class RetryPolicy(_Frozen):
    """Transient failures are retried here, inside the work item; they never cause a replan."""

    max_attempts: PositiveInt = 1
    retryable_errors: tuple[str, ...] = ()


class OutputSpec(_Frozen):
    """The typed artifact a work item must produce: its type, the JSON Schema its content must meet (if any,
    named ``schema`` in a plan document) at which version, and whether it must cite evidence (it must, unless
    the item declares it rests on none, e.g. a restatement of the goal)."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True, serialize_by_alias=True)

    artifact_type: str = Field(min_length=1)
    schema_version: str = "1.0"
    json_schema: dict[str, Any] | None = Field(default=None, alias="schema")
    evidence_required: bool = True


def schema_problem(schema: dict[str, Any]) -> str | None:
    """Why ``schema`` is not a well-formed JSON Schema (checked against its own draft's meta-schema), or None."""
    import jsonschema  # ~40 modules: only a plan that carries an output schema pays for them
    from jsonschema.exceptions import SchemaError

    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.path) or "(root)"
        return f"{exc.message[:300]} at {where}"
    return None


class Milestone(_Frozen):
    """A named group of work items in a plan."""

    milestone_id: str = Field(min_length=1)
    title: str


class WorkItem(_Frozen):
    """The smallest unit that is scheduled, retried and accepted on its own."""

    work_item_id: str = Field(min_length=1)
    milestone_id: str = Field(min_length=1)
    title: str
    task_type: TaskType
    dependencies: tuple[str, ...] = ()
    required_capabilities: tuple[str, ...] = ()
    output_spec: OutputSpec
    completion_criteria: tuple[str, ...] = ()
    retry_policy: RetryPolicy = RetryPolicy()
    max_react_steps: NonNegativeInt = 0
    risk_level: RiskLevel = RiskLevel.LOW
    approval_required: bool = False
    estimated_cost: EstimatedCost = EstimatedCost()
    scope: tuple[str, ...] = ()  # scope tags this item touches (e.g. a repository group), checked vs the goal

    @field_validator("risk_level", mode="before")
    @classmethod
    def _lower_risk(cls, value: Any) -> Any:
        """Planners write ``"HIGH"`` as often as ``"high"``; both mean the same level."""
        return value.lower() if isinstance(value, str) else value

    @field_validator("task_type", mode="before")
    @classmethod
    def _seed_task_type(cls, value: Any) -> Any:
        """``validation`` is VALIDATION; the seed's one node name ``WAIT/TIMER`` reads as WAIT."""
        if not isinstance(value, str):
            return value
        upper = value.strip().upper()
        return _TASK_TYPE_ALIASES.get(upper, upper)


class Plan(_Frozen):
    """A versioned DAG of work items toward one goal; it changes only through a PlanPatch."""

    plan_id: str = Field(min_length=1)
    version: PositiveInt
    goal_id: str = Field(min_length=1)
    milestones: tuple[Milestone, ...] = ()
    work_items: tuple[WorkItem, ...] = ()

    def item(self, work_item_id: str) -> WorkItem | None:
        """The first work item with this id (duplicates are a validation issue, not a crash)."""
        return next((w for w in self.work_items if w.work_item_id == work_item_id), None)

    def to_document(self) -> dict[str, Any]:
        """The plan as JSON-ready data, as it is stored and versioned."""
        return self.model_dump(mode="json")


def total_cost(items: Iterable[WorkItem]) -> EstimatedCost:
    """The summed estimated cost of some work items."""
    total = EstimatedCost()
    for item in items:
        total = total + item.estimated_cost
    return total


class InvalidPlanDocumentError(RunError):
    """A plan document cannot be used; ``details['errors']`` lists pydantic's field errors.

    Codes: INVALID_PLAN_DOCUMENT (schema), NOT_JSON (text is not JSON), PLAN_FILE_NOT_FOUND,
    PLAN_FILE_UNREADABLE.
    """

    default_code = ErrorCode.INVALID_PLAN_DOCUMENT


def load_plan(doc: Mapping[str, Any] | str | bytes) -> Plan:
    """Parse a plan from JSON text or data, raising a named error instead of a traceback."""
    data = parse_json_document(doc, InvalidPlanDocumentError)
    try:
        return Plan.model_validate(data)
    except ValidationError as exc:
        errors = field_errors(exc)
        raise InvalidPlanDocumentError(summarize_field_errors(errors), details={"errors": errors}) from None


def read_plan_file(path: str | Path) -> Plan:
    """Read and validate a plan document (INVALID_PLAN_DOCUMENT otherwise)."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        code = ErrorCode.PLAN_FILE_NOT_FOUND if isinstance(exc, FileNotFoundError) else ErrorCode.PLAN_FILE_UNREADABLE
        raise InvalidPlanDocumentError(f"cannot read plan file {p}: {exc.strerror}", code=code) from None
    return load_plan(raw)
