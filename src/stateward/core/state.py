"""RunState: the snapshot of one run, changed only through the Runtime.

The state is immutable; every change produces a new value, so a step either commits whole or not at
all. It carries only what the next decision needs: observation history lives in the event log.
"""

from __future__ import annotations

import json
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from stateward.core.budget import Budget, Usage
from stateward.core.setback import Setback
from stateward.core.status import RunStatus

# Agents of stores written before agents were named: their import path maps to the built-in name.
# Any other stored import path becomes a name nobody registered, so nothing is ever imported from a row.
_LEGACY_FACTORIES = {
    "stateward.demos.blog:build_agent": "blog",
    "stateward.demos.payment.agent:build_agent": "payment-migration",
    "stateward.chaos.agent:build_agent": "chaos-ledger",
}


class AgentRef(BaseModel):
    """How any process rebuilds the agent of a run: a registered name, its version and JSON parameters.

    The store keeps a name, never code: a process builds only the agents its operator registered.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, max_length=200)
    version: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _from_legacy(cls, data: Any) -> Any:
        """Snapshots of earlier stores held ``{"factory": "module:attr", "params": ...}``."""
        if isinstance(data, dict) and "factory" in data and "name" not in data:
            legacy = dict(data)
            factory = str(legacy.pop("factory"))
            legacy["name"] = _LEGACY_FACTORIES.get(factory, factory)
            return legacy
        return data


class RequestKind(StrEnum):
    """What a pending request waits for; it decides which verdicts an answer may give."""

    APPROVAL = "approval"  # a yes / no, usually about one guarded action
    INPUT = "input"  # a question a person replies to (or approves / rejects)
    HANDOFF = "handoff"  # a person picks one of the options a handoff package offers
    RECONCILIATION = "reconciliation"  # a person says whether a side effect of unknown outcome happened
    TIMER = "timer"  # nobody answers: the expiry sweep fires it
    CHILD_RUN = "child_run"  # nobody answers: the child run the call started does, when it ends


# The requests no person answers (a timer fires; a child run's end answers its parent's wait): no inbox lists them.
NOBODY_ANSWERS = frozenset({RequestKind.TIMER, RequestKind.CHILD_RUN})


class AnswerVerdict(StrEnum):
    """How a request was answered or closed."""

    APPROVED = "approved"
    REJECTED = "rejected"
    REPLIED = "replied"
    TIMER_FIRED = "timer_fired"
    CHILD_RETURNED = "child_returned"  # the child run a call started ended; its outcome is the call's
    CLOSED = "closed"  # by the run itself: cancelled, expired


class AskedBy(StrEnum):
    """Who wrote a request's question: the controller (often a model's words) or the Runtime itself."""

    CONTROLLER = "controller"
    RUNTIME = "runtime"


class ApprovalScope(StrEnum):
    """How many executions one approval admits. ``ONCE`` is the default and the safe choice."""

    ONCE = "once"
    RUN = "run"  # a standing grant for this exact action for the rest of the run; a tool must opt in


class GuardedAction(BaseModel):
    """The exact action a pending approval is about."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tool: str
    args: dict[str, Any] = Field(default_factory=dict)
    plan_version: int | None = None
    digest: str


class Grant(BaseModel):
    """One approval a person gave: which request, for exactly which action, for how many executions."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    request_id: str
    action: GuardedAction
    scope: ApprovalScope = ApprovalScope.ONCE
    by: str = ""

    @property
    def digest(self) -> str:
        """The digest of the action this grant admits, so an approval cannot be spent on another action."""
        return self.action.digest


class Reconciles(BaseModel):
    """The call of unknown outcome a reconciliation request is about: the idempotency key its side effect was
    journalled under, the step that key was made at, and whether the single retry under it was already spent."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    idempotency_key: str
    key_step: int
    retry_spent: bool = False


class PersonOutcome(BaseModel):
    """A person's answer to a reconciliation, as the gateway records it: the call under ``idempotency_key``
    happened (a success confirmed by that person) or did not (NOT_EXECUTED). Evidence, with who and when."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    happened: bool
    by: str
    at: datetime
    comment: str | None = None
    request_id: str
    idempotency_key: str
    key_step: int
    retry_spent: bool = False

    def evidence(self) -> dict[str, Any]:
        """What the observation and the journal keep of the answer: the result is the person's word, nothing more."""
        return {
            "confirmed_by_person": {
                "evidence_id": f"person:{self.request_id}",  # run-unique: a claim may cite the person's word
                "outcome": "SUCCEEDED" if self.happened else "NOT_EXECUTED",
                "by": self.by,
                "at": self.at.isoformat(),
                "comment": self.comment,
                "request_id": self.request_id,
            }
        }


class DeferredCall(BaseModel):
    """A call the Runtime runs before any model call: a guarded call a person approved, or a call of unknown
    outcome a person reconciled (``reconciled``: their answer, which the gateway records instead of guessing)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    request_id: str
    action: GuardedAction
    step: int  # the step that proposed it: its observation carries this step, as if it ran then
    reconciled: PersonOutcome | None = None


class ChildHandoff(StrEnum):
    """Who answers a child run's handoff, as the agent tool that starts it declares: the child's own approvers
    (the default: approvals are not inherited), or the parent's (the handoff is escalated to them)."""

    ANSWER_IN_CHILD = "answer_in_child"
    ESCALATE_TO_PARENT = "escalate_to_parent"


class HandoffEscalation(BaseModel):
    """A child's handoff request escalated to its parent's approvers: the parent whose approver role answers it
    (``PendingRequest.approver_role``) instead of the role the child's agent names (``child_role``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    parent_run_id: str
    child_role: str | None = None


class ChildCall(BaseModel):
    """A call to another registered agent, waited on as a child run: the child's deterministic run id (from
    the parent's run id and the call's idempotency key, so a replayed call names the same child), what it is
    asked to do, and the budget carved for it from the parent's remaining budget."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str
    agent: str
    params: dict[str, Any] = Field(default_factory=dict)
    goal: str
    budget: Budget
    tool: str  # the parent's tool that made the call
    args: dict[str, Any] = Field(default_factory=dict)
    idempotency_key: str
    on_handoff: ChildHandoff = ChildHandoff.ANSWER_IN_CHILD
    parent_role: str | None = None  # the parent agent's approver role (who answers an escalated handoff)


class ParentLink(BaseModel):
    """A child run's place in its tree: the run and call that started it, and the tree's root run."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str
    request_id: str  # the parent's CHILD_RUN wait this run's end answers
    idempotency_key: str  # the parent's call
    root_run_id: str
    depth: int = Field(default=1, ge=1)  # 1: a child of the root
    on_handoff: ChildHandoff = ChildHandoff.ANSWER_IN_CHILD  # who answers this run's handoffs (the call's)
    parent_role: str | None = None  # the parent agent's approver role, for an escalated handoff


class PendingRequest(BaseModel):
    """What a stopped run waits for: a request id minted by the Runtime, the question, the exact action an approval
    admits (if any), who may answer and until when."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    request_id: str
    kind: RequestKind = RequestKind.APPROVAL
    question: str
    state_before: RunStatus
    guarded_action: GuardedAction | None = None
    approval_scope: ApprovalScope = ApprovalScope.ONCE
    asked_by: AskedBy = AskedBy.CONTROLLER  # RUNTIME: the Runtime wrote the question from a proposed call
    model_text: str | None = None  # model-written words accompanying a Runtime-written question
    call_step: int | None = None  # asked_by runtime: the step whose proposed call this approval admits
    options: tuple[str, ...] = ()  # for a handoff: the choices an answer must name
    approver_role: str | None = None
    created_at: datetime
    expires_at: datetime | None = None
    replaces: str | None = None  # an escalation's new request: the id of the one first asked (kept on re-escalation)
    reconciles: Reconciles | None = None  # a reconciliation: the journalled call its answer decides
    child: ChildCall | None = None  # a CHILD_RUN wait: the child run whose end answers it
    siblings: tuple[ChildCall, ...] = ()  # the same call's other children (parallel): the wait ends with all
    escalation: HandoffEscalation | None = None  # a child's handoff its parent's approvers answer


class Answer(BaseModel):
    """A person's answer to a pending request, as the controller sees it on resume."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    request_id: str
    verdict: AnswerVerdict
    text: str | None = None
    by: str
    at: datetime
    guarded_action: GuardedAction | None = None
    replaces: str | None = None  # answered an escalation of this request: a controller waiting on it takes it
    kind: RequestKind | None = None  # the answered request's kind (None in snapshots written before it was kept)

    def answers(self, request_id: str | None) -> bool:
        """Whether this answers ``request_id``, directly or through an escalation that replaced it."""
        return request_id is not None and request_id in (self.request_id, self.replaces)


def chosen_option(text: str | None) -> str:
    """The option an answer to a handoff names: its text, or the ``option`` of an answer written as a JSON
    object (which may say more, e.g. ``{"option": "continue_authorized", "extra_budget": {"model_calls": 10}}``).
    Lower case, trimmed; "" when it names none."""
    raw = (text or "").strip()
    if raw.startswith("{"):
        try:
            data = json.loads(raw)
        except ValueError:
            return raw.lower()
        option = data.get("option") if isinstance(data, dict) else None
        return option.strip().lower() if isinstance(option, str) else ""
    return raw.lower()


class WaitSnapshot(BaseModel):
    """Counters frozen in the same step that entered the wait, so "calls after the wait" is measurable."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    step: int
    model_calls: int
    tool_attempts: int


class TraceLink(BaseModel):
    """Where a run's trace continues in the next process: W3C trace-context carriers (``traceparent``,
    ``tracestate``) of the run's first segment span (the parent of every later one) and of its latest."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    root: dict[str, str]
    last: dict[str, str]


class Lineage(BaseModel):
    """Where a fork's history comes from: the run and event it was forked at, the run whose idempotency keys
    its calls are made under (its lineage's first run, so a call the lineage journalled is replayed, never run
    again) and the artifact versions it shares with its source."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    forked_from: str
    at_seq: int
    key_scope: str
    artifacts: dict[str, int] = Field(default_factory=dict)


class RunState(BaseModel):
    """The snapshot of one run, changed only through the Runtime: status, counters, budget, the pending request, grants
    and the controller's memo. Immutable: every change is a new value."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str
    tenant: str = "default"
    agent: AgentRef
    goal: str
    status: RunStatus = RunStatus.RUNNING
    terminal_reason: str | None = None
    usage: Usage = Field(default_factory=Usage)
    budget: Budget = Field(default_factory=Budget)
    pending: PendingRequest | None = None
    wait: WaitSnapshot | None = None
    requests_issued: int = 0
    last_answer: Answer | None = None
    correction: str | None = None  # the error the next model request must name (correct-once policy)
    approvals: tuple[Grant, ...] = ()  # unconsumed grants; a ONCE grant leaves when its call starts
    granted: tuple[str, ...] = ()  # digests of every action ever approved in this run (history, never admits)
    next_call: DeferredCall | None = None  # an approved guarded call the Runtime runs before deciding again
    refused_request: str | None = None  # the last request a person rejected, until they approve one
    artifacts: dict[str, int] = Field(default_factory=dict)  # latest version per artifact name
    facts: dict[str, Any] = Field(default_factory=dict)
    memo: dict[str, Any] = Field(default_factory=dict)
    setback: Setback | None = None  # a crash or outage being retried (see core/setback.py)
    trace: TraceLink | None = None  # set only while a tracer provider records (observability/tracing.py)
    parent: ParentLink | None = None  # a child run: the call that started it (see runtime/children.py)
    lineage: Lineage | None = None  # a fork's: its source, fork point and key scope (runtime/fork.py)

    @field_validator("approvals", mode="before")
    @classmethod
    def _legacy_approvals(cls, value: Any) -> Any:
        """Earlier snapshots kept bare guarded actions: each was one approval, of unknown request."""
        if isinstance(value, list | tuple):
            return tuple(
                {"request_id": "legacy", "action": v} if isinstance(v, dict) and "digest" in v else v for v in value
            )
        return value

    def calls_after_wait(self) -> tuple[int, int]:
        """(model calls, tool attempts) since the wait began; (0, 0) when not waiting."""
        if self.wait is None:
            return 0, 0
        return (
            self.usage.model_calls - self.wait.model_calls,
            self.usage.tool_attempts - self.wait.tool_attempts,
        )


def is_run_suspended(state: RunState) -> bool:
    """The proof that a run stopped: the status alone proves nothing."""
    model_delta, tool_delta = state.calls_after_wait()
    return (
        state.status is RunStatus.WAITING_FOR_USER
        and state.pending is not None
        and state.wait is not None
        and model_delta == 0
        and tool_delta == 0
    )
