"""Plain data that crosses the gateway boundary: calls, contexts, outcomes, attempt records."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from stateward.core.contract import OutcomeStatus as OutcomeStatus  # re-exported: the gateway answers with it
from stateward.core.errors import ErrorCode
from stateward.core.journal import AttemptRecord
from stateward.core.state import Grant, PersonOutcome

from .scope import ResourceScope


class ToolErrorCode(StrEnum):
    """The stable error classes of the Tool Gateway."""

    UNKNOWN_TOOL = ErrorCode.UNKNOWN_TOOL.value
    TOOL_UNAVAILABLE = ErrorCode.TOOL_UNAVAILABLE.value
    CIRCUIT_OPEN = ErrorCode.CIRCUIT_OPEN.value
    INVALID_ARGUMENT = ErrorCode.INVALID_ARGUMENT.value
    PERMISSION_DENIED = ErrorCode.PERMISSION_DENIED.value
    OUT_OF_SCOPE = ErrorCode.OUT_OF_SCOPE.value
    SCOPE_VIOLATION = ErrorCode.SCOPE_VIOLATION.value
    NOT_VISIBLE = ErrorCode.NOT_VISIBLE.value
    BUDGET_EXCEEDED = ErrorCode.BUDGET_EXCEEDED.value
    BLOCKED_BY_ACTION_GATEWAY = ErrorCode.BLOCKED_BY_ACTION_GATEWAY.value
    TIMEOUT = ErrorCode.TIMEOUT.value
    RATE_LIMITED = ErrorCode.RATE_LIMITED.value
    SERVICE_UNAVAILABLE = ErrorCode.SERVICE_UNAVAILABLE.value
    SCHEMA_MISMATCH = ErrorCode.SCHEMA_MISMATCH.value
    RESULT_TOO_LARGE = ErrorCode.RESULT_TOO_LARGE.value
    EXECUTION_ERROR = ErrorCode.EXECUTION_ERROR.value
    UNKNOWN_OUTCOME = ErrorCode.UNKNOWN_OUTCOME.value
    NOT_EXECUTED = ErrorCode.NOT_EXECUTED.value
    RECONCILIATION_MISMATCH = ErrorCode.RECONCILIATION_MISMATCH.value


class LookupStatus(StrEnum):
    """What the domain says really happened for an idempotency key."""

    SUCCEEDED = "SUCCEEDED"
    NOT_EXECUTED = "NOT_EXECUTED"
    UNKNOWN = "UNKNOWN"


class RuntimeAction(StrEnum):
    """What the gateway did with the call."""

    EXECUTE = "EXECUTE"
    REJECT = "REJECT"
    BLOCK = "BLOCK"
    RETRY = "RETRY"
    REPLAY_SUCCESS = "REPLAY_SUCCESS"
    RETRY_ONCE = "RETRY_ONCE"
    AWAIT_RECONCILIATION = "AWAIT_RECONCILIATION"
    CONFIRMED_BY_PERSON = "CONFIRMED_BY_PERSON"  # a person said the call happened: recorded, the handler not run
    NOT_EXECUTED_BY_PERSON = "NOT_EXECUTED_BY_PERSON"  # a person said it did not, and no retry is allowed


class ToolCall(BaseModel):
    """A proposed call: a tool name and its raw arguments (validated by the gateway, never trusted)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tool: str
    args: dict[str, Any] = Field(default_factory=dict)


class ArtifactDraft(BaseModel):
    """An artifact a handler produced; the Runtime stores it in the same transaction as the step."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    content: str
    media_type: str = "text/markdown"


class CallContext(BaseModel):
    """Everything the gateway needs to decide about one call, supplied by the Runtime."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str
    step: int
    principal: str = "agent"
    permissions: frozenset[str] = frozenset()
    visible_actions: frozenset[str] | None = None  # None: every registered tool is visible
    scope: frozenset[str] | None = None  # tools the goal allows; None: no scope restriction
    resource_scope: ResourceScope | None = None  # what a tool's scoped arguments may name; None: unrestricted
    approved_digests: frozenset[str] = frozenset()  # standing approvals by digest (never consumed)
    grants: tuple[Grant, ...] = ()  # approvals a person gave; a ONCE grant admits one execution
    plan_version: int | None = None
    remaining_tool_calls: int | None = None  # None: unbounded
    fencing_token: int | None = None  # the caller's lease version; handlers pass it to systems that check it
    # A person's answer to the reconciliation of this very call (its journalled key): recorded, not guessed.
    reconciliation: PersonOutcome | None = None
    # The run whose idempotency keys this call is made under (a fork: its lineage's first run); None: run_id.
    key_scope: str | None = None


class ToolOutcome(BaseModel):
    """Everything the gateway decided and observed about one call: status, result (shaped and redacted), error classes,
    idempotency key and status, attempts, artifacts, the action digest and any approval the call used up."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tool: str
    status: OutcomeStatus
    runtime_action: RuntimeAction
    result: Any = None
    error_code: ToolErrorCode | None = None
    error: str | None = None
    field_errors: list[dict[str, Any]] = Field(default_factory=list)
    idempotency_key: str | None = None
    idempotency_status: LookupStatus | None = None
    attempts: list[AttemptRecord] = Field(default_factory=list)
    artifacts: list[ArtifactDraft] = Field(default_factory=list)
    truncated: bool = False
    # Added by the gateway: ``error_code`` is the *first* failure class seen (e.g. TIMEOUT even when a
    # reconciliation later proved success); ``last_error_code`` is the one that decided the outcome.
    last_error_code: ToolErrorCode | None = None
    action_digest: str | None = None  # what an approval must be bound to (set for gated tools)
    consumed_grant: str | None = None  # the request id of the ONCE approval this call used up
    budget_used: int = 0  # tool-call reservations consumed (first call + every retry)
    retried_once: bool = False  # the single retry a clear NOT_EXECUTED allows was spent on this key

    @property
    def handler_calls(self) -> int:
        """How many attempts actually called the handler (a refused or reconciled attempt did not)."""
        return sum(1 for a in self.attempts if a.handler_called)
