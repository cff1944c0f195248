"""What a plan run keeps and is configured with: its memo (plan, per-item runs, ledger, progress), its config,
the instructions its models are given, and the default approval binding."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from stateward.core.canonical import action_digest
from stateward.core.decision import ControlDecision
from stateward.core.errors import ErrorCode, UserError
from stateward.core.sealed import Sealed
from stateward.core.state import GuardedAction
from stateward.models.base import AnyModel, Model, ModelRequest, Usage
from stateward.planning.budget import BudgetAmount, BudgetLedger, BudgetLimits
from stateward.planning.delivery import (
    Confidence,
    FindingRisk,
)
from stateward.planning.goal import GoalContract
from stateward.planning.outcome import (
    Measure,
    Measurement,
    RunOutcome,
)
from stateward.planning.patch import (
    AttemptFact,
    WorkItemState,
)
from stateward.planning.plan import Plan, WorkItem
from stateward.planning.progress import ProgressTracker
from stateward.planning.readiness import ReadinessContract
from stateward.planning.stages import RunStage, StageEntry, entered
from stateward.planning.termination import (
    FailureFact,
)
from stateward.verify.checks import AuthorityConflict, CheckResult
from stateward.verify.item_checks import ArtifactCheck

PLAN_INSTRUCTIONS = "Reply with one JSON plan document: plan_id, version, goal_id, milestones, work_items."
ITEM_INSTRUCTIONS = (
    "Work on this one work item only, with its tools. Reply with exactly one JSON decision: "
    '{"type": "EXECUTE_TOOL", "action": ..., "args": {...}}. Record the output with record_output, citing in '
    "`evidence` the evidence_id of each observation (or verified input ref) it rests on. The item is done when "
    "its output passes its checks; saying so does not make it done."
)
Verifier = Callable[[str], Sequence[CheckResult]]
# A work item run as code (RULE, TOOL, VALIDATION): from the item's facts - the request a worker would be sent
# (the item, its attempt's observations, its verified inputs, the outputs so far), never sent to a model - the
# next call as a ControlDecision or its JSON form (a record_output call writes the item's artifact).
ItemProcedure = Callable[[ModelRequest], "ControlDecision | Mapping[str, Any]"]
PLAN_REVISIONS = 1  # a plan the validator says to REVISE goes back to the planner this many times
MAX_INPUT_CHARS = 200_000  # recorded outputs handed to one work item's model request, in all


class EvidenceVerifier(Protocol):
    """A verifier that also reads the run's evidence store (every evidence id the run's tool calls returned)
    and judges with ``checker``: the configured checker model as a metered view, whose calls are charged to
    the run's budget and refused when the budget left cannot carry them (None when no checker is configured)."""

    def __call__(self, content: str, recorded: frozenset[str], checker: Model | None) -> Sequence[CheckResult]: ...


# Error codes saying a tool or its service is down (not that the call was wrong): a person can fix these.
UNAVAILABLE = frozenset({"TIMEOUT", "CIRCUIT_OPEN", "TOOL_UNAVAILABLE", "SERVICE_UNAVAILABLE", "RATE_LIMITED"})
# Error codes saying the run may not reach what it needs (source 14: missing permission leaves the scope short).
DENIED = frozenset({"PERMISSION_DENIED"})
ApprovalAction = Callable[[WorkItem, "PlanRunMemo"], GuardedAction]


class ArtifactFact(BaseModel):
    """An accepted work-item artifact as the run keeps it: its ref, the schema version it met, the attempt that
    wrote it, the evidence refs it cites and its content hash."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    ref: str
    schema_version: str
    source_attempt: str | None = None
    evidence_refs: tuple[str, ...] = ()
    sha256: str = ""


class BudgetGrant(BaseModel):
    """Extra budget a person granted with continue_authorized: who, when, in answer to which request, how much.
    It raises the limits; what was spent stays spent."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    by: str
    at: datetime
    request_id: str
    extra: BudgetAmount


class SourceChoice(BaseModel):
    """A person's answer to conflicting authorities: which source holds for the conflict's key, who, when.
    Kept as a fact of the run; the checks read it on the item's next attempt."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str
    source: str
    by: str
    at: datetime
    request_id: str


class ItemRun(BaseModel):
    """What the controller recorded about one work item."""

    model_config = ConfigDict(extra="forbid")

    attempts: list[AttemptFact] = Field(default_factory=list)
    steps: list[int] = Field(default_factory=list)  # the steps whose observations belong to this attempt
    absorbed: int = 0  # how many of those observations the tracker has seen
    tracker: ProgressTracker | None = None
    output: str | None = None  # artifact ref of the accepted output
    artifact: ArtifactFact | None = None  # the accepted output's record (evidence, schema version, attempt)
    calls: list[str] = Field(default_factory=list)  # evidence ids of this attempt's observations, repairs included
    correction: str | None = None  # what the last verification asked the worker to fix
    model_calls: int = 0
    tokens: int = 0  # tokens of this attempt's model calls, settled with the attempt


class PlanRunMemo(BaseModel):
    """A plan run's working memory in the run's state: its plan, each item's progress and its ledger."""

    model_config = ConfigDict(extra="forbid")

    plan: Plan | None = None
    items: dict[str, ItemRun] = Field(default_factory=dict)
    running: list[str] = Field(default_factory=list)  # the current batch's items in flight, at most max_parallel
    turn: int = 0  # round robin over the batch's running items, so none starves
    batches: int = 0  # batches started so far (each ``work_item_started`` names its batch)
    verified: list[str] = Field(default_factory=list)
    ledger: BudgetLedger = BudgetLedger()
    failures: list[FailureFact] = Field(default_factory=list)
    # Tools that failed as down (UNAVAILABLE codes): a fact about the world, kept across plan patches (which
    # clear ``failures``), so a stuck plan names the source a person has to restore.
    unavailable: list[str] = Field(default_factory=list)
    denied: list[str] = Field(default_factory=list)  # "tool: what it was refused" for permission refusals, kept alike
    no_progress_streak: int = 0
    history: list[dict[str, WorkItemState]] = Field(default_factory=list)
    delivery: str | None = None  # "accepted" | "partial"
    research_steps: int = 0
    handoff_request: str | None = None  # kept for snapshots written before awaiting_handoff
    awaiting_handoff: bool = False  # a handoff was asked: the next handoff answer is this run's choice
    deviations: list[str] = Field(default_factory=list)  # soft constraints already recorded as not holding
    started_at: datetime | None = None  # the run's first decision: elapsed time is charged from here
    measurement: Measurement = Measurement()  # goal metrics, re-measured when the verified set changes
    measured: int = -1  # len(verified) at the last measurement
    outcome: RunOutcome | None = None  # what the run delivered, once it delivers
    patched_for: list[str] = Field(default_factory=list)  # measured open issues the planner was asked about
    stages: list[StageEntry] = Field(default_factory=list)  # the global stages entered, in order
    # continue_authorized at a handoff: item -> the attempts a person authorised it to reach (never a reset).
    authorized_attempts: dict[str, int] = Field(default_factory=dict)
    grants: list[BudgetGrant] = Field(default_factory=list)  # extra budget people granted, who, when, how much
    # A verification said HUMAN_HANDOFF (e.g. high risk at low confidence): (reason code, why) for the handoff.
    verification_handoff: tuple[str, str] | None = None
    # A check found two authorities disagreeing (the handoff's subject, until a person answers) ...
    authority_conflict: AuthorityConflict | None = None
    # ... and the sources people chose, by conflict key.
    source_choices: dict[str, SourceChoice] = Field(default_factory=dict)
    _read_from: dict[str, Sealed] = PrivateAttr(default_factory=dict)  # item id -> the record it was read from

    def enter(self, stage: RunStage, step: int) -> None:
        """Record that the run entered a global stage (nothing if it is already in it)."""
        self.stages = entered(self.stages, stage, step)


class MemoSeals:
    """How a plan run's memo goes into the run's state and back: its plan and each work item's record as
    sealed documents (core/sealed.py), so a step that leaves them alone costs the store nothing for them.

    The plan is immutable (frozen models, tuples): the one read from a sealed document is that document's
    content for good, so both are remembered by identity, and a step neither validates nor serializes an
    unchanged plan. A record is mutable: it is read afresh from its document's text at every step, and
    written back as the same document only when its JSON is still that text, so a record changed in place
    is never lost. A memo of the earlier shape (plain data, as every store returns it) reads the same.
    """

    def __init__(self, plans: int = 256):
        self._limit = plans  # one controller serves many runs: remember this many plans
        self._by_document: dict[int, tuple[Sealed, Plan]] = {}
        self._by_plan: dict[int, tuple[Plan, Sealed]] = {}

    def read(self, raw: Mapping[str, Any]) -> PlanRunMemo:
        """The typed memo of a run's state."""
        data = dict(raw)
        plan = raw.get("plan")
        if isinstance(plan, Sealed):
            data["plan"] = self._plan_of(plan)
        read_from: dict[str, Sealed] = {}
        items = raw.get("items")
        if isinstance(items, Mapping) and any(isinstance(v, Sealed) for v in items.values()):
            records: dict[str, Any] = {}
            for wid, record in items.items():
                if isinstance(record, Sealed):
                    read_from[wid] = record
                    records[wid] = ItemRun.model_validate_json(record.text)
                else:
                    records[wid] = record
            data["items"] = records
        memo = PlanRunMemo.model_validate(data)
        memo._read_from = read_from
        return memo

    def write(self, memo: PlanRunMemo) -> dict[str, Any]:
        """The memo as the run's state keeps it: plain data, with the plan and each record sealed."""
        items: dict[str, Sealed] = {}
        for wid, record in memo.items.items():
            sealed = Sealed(record)
            before = memo._read_from.get(wid)
            items[wid] = before if before is not None and before.same_text(sealed) else sealed
        rest = memo.model_dump(mode="json", exclude={"plan", "items"})
        return {"plan": None if memo.plan is None else self._document_of(memo.plan), "items": items, **rest}

    def _plan_of(self, document: Sealed) -> Plan:
        known = self._by_document.get(id(document))
        if known is not None and known[0] is document:
            return known[1]
        plan = Plan.model_validate_json(document.text)
        self._remember(document, plan)
        return plan

    def _document_of(self, plan: Plan) -> Sealed:
        known = self._by_plan.get(id(plan))
        if known is not None and known[0] is plan:
            return known[1]
        document = Sealed(plan)
        self._remember(document, plan)
        return document

    def _remember(self, document: Sealed, plan: Plan) -> None:
        if len(self._by_document) >= self._limit:
            self._by_document.clear()
            self._by_plan.clear()
        self._by_document[id(document)] = (document, plan)
        self._by_plan[id(plan)] = (plan, document)


@dataclass(frozen=True)
class PlanRunConfig:
    """How a plan run runs its goal: the goal contract, budget limits, the deliverable and its verifier, approval
    binding, capabilities, readiness and parallelism."""

    goal: GoalContract
    budget: BudgetLimits = field(default_factory=BudgetLimits)
    deliverable: str | None = None  # artifact type checked with bounded reflection before it counts
    verifier: Verifier | None = None
    evidence_verifier: EvidenceVerifier | None = None  # preferred over ``verifier``: checks against recorded evidence
    checker: AnyModel | None = None  # the model the evidence verifier's model checks call (charged to the budget)
    default_react_steps: int = 4
    deliverable_risk: FindingRisk = FindingRisk.LOW
    deliverable_confidence: Confidence = Confidence.MEDIUM
    approval_action: ApprovalAction | None = None  # the exact action an approval-gated item's approval admits
    capabilities: frozenset[str] = field(default_factory=frozenset)
    readiness: ReadinessContract | None = None  # research must satisfy it before a plan is made
    research_tools: tuple[str, ...] = ()
    max_research_steps: int = 8
    max_parallel: int = 4  # ready items per batch (the source's figure); their steps interleave, each one transaction
    measure: Measure | None = None  # the goal's metrics, measured from verified outputs and recorded evidence
    fact_artifacts: frozenset[str] = frozenset()  # verified outputs that are confirmed fact lists (a rung)
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))  # charges elapsed time
    # Program checks per artifact type: an item's artifact must pass every one before the item succeeds.
    checks: Mapping[str, Sequence[ArtifactCheck]] = field(default_factory=dict)
    model_checked: frozenset[str] = frozenset()  # artifact types the checker model also judges (metered)
    # Procedures per artifact type: RULE, TOOL and VALIDATION items (and any other with one registered, a
    # MODEL or LOCAL_REACT item excepted) run as this code through the Runtime and the gateway, no model call.
    procedures: Mapping[str, ItemProcedure] = field(default_factory=dict)
    # What every continue_authorized grant together may add to the budget (None: at most the configured limits
    # again, i.e. the budget can at most double): a grant past it is refused by name and the person asked again.
    max_budget_grant: BudgetAmount | None = None

    def __post_init__(self) -> None:
        """A model check with no checker model could never pass: refuse the configuration, not every item."""
        if self.model_checked and self.checker is None:
            raise UserError(
                f"model_checked {sorted(self.model_checked)} needs a checker model", code=ErrorCode.INVALID_AGENT
            )


def tokens_of(usage: Usage) -> int:
    """Tokens a model call spent, input and output."""
    return usage.input_tokens + usage.output_tokens


def strings_in(value: Any, path: str = "") -> list[tuple[str, str]]:
    """Every string inside ``value`` (dicts and lists walked), with its dotted path."""
    if isinstance(value, str):
        return [(path, value)]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in strings_in(v, f"{path}.{k}" if path else str(k))]
    if isinstance(value, list | tuple):
        return [s for i, v in enumerate(value) for s in strings_in(v, f"{path}[{i}]")]
    return []


def amount_text(amount: BudgetAmount) -> str:
    """A budget amount as a person reads it."""
    return f"{amount.tool_calls} tool calls, {amount.model_calls} model calls, {amount.tokens} tokens"


def start_item_guard(item: WorkItem, memo: PlanRunMemo) -> GuardedAction:
    """By default an approval admits starting exactly this item of exactly this plan version."""
    version = memo.plan.version if memo.plan else None
    args = {"work_item_id": item.work_item_id}
    return GuardedAction(
        tool="start_work_item", args=args, plan_version=version, digest=action_digest("start_work_item", args, version)
    )
