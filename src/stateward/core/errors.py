"""Every error stateward raises, each with a stable ``code`` (an ``ErrorCode``) that survives into
JSON, the CLI and HTTP.

Three kinds are kept apart, because different people fix them. The whole tree, wherever each class
is defined (the module in brackets; no other StatewardError exists, tests/core/test_error_codes.py
checks it)::

    StatewardError                          base; ``code`` + ``message`` + ``details``
    ├── UserError                           a developer mistake: bad agent definition or configuration
    │   ├── WebhookTargetError [api.webhook_targets]  a webhook URL refused (WEBHOOK_URL_INVALID, ...)
    │   └── StreamRefused [api.stream_slots]  a stream past a cap (STREAM_LIMIT, STREAM_LIMIT_PER_KEY)
    ├── AuthError [api.identity]            no or bad credentials (UNAUTHENTICATED), a missing role (FORBIDDEN)
    ├── RunError                            something about a run or a request to it is not acceptable
    │   ├── DecisionParseError              raw model text is not exactly one decision (NOT_JSON,
    │   │                                   DUPLICATE_KEY, NON_FINITE_NUMBER, ...)
    │   ├── IllegalTransitionError          a status change the transition table does not allow
    │   ├── RunNotFoundError                RUN_NOT_FOUND
    │   ├── RequestRefusedError             an answer to a pending request was refused (UNKNOWN_REQUEST,
    │   │                                   ANSWER_TOO_LARGE, ...)
    │   ├── StaleLeaseError                 a write carried a superseded fencing token (STALE_LEASE)
    │   ├── ToolCallError                   the Tool Gateway refused or failed a call (UNKNOWN_TOOL, ...)
    │   │   └── ToolFailure [tools.errors]  a handler says how it failed (EXECUTION_ERROR)
    │   │       ├── ToolTimeout             TIMEOUT
    │   │       ├── ToolOutcomeUnknown      UNKNOWN_OUTCOME
    │   │       ├── RateLimited             RATE_LIMITED
    │   │       ├── ServiceUnavailable      SERVICE_UNAVAILABLE
    │   │       ├── ToolPermissionDenied    PERMISSION_DENIED
    │   │       ├── ToolInvalidArgument     INVALID_ARGUMENT
    │   │       └── StaleFencingToken [chaos.ledger]  PERMISSION_DENIED: a superseded holder, refused
    │   ├── ModelCallError [models.errors]  a model call failed before replying (PROVIDER_ERROR)
    │   │   ├── RateLimitedError            RATE_LIMITED (retryable)
    │   │   ├── ServiceUnavailableError     SERVICE_UNAVAILABLE (retryable)
    │   │   ├── ModelTimeoutError           TIMEOUT (retryable)
    │   │   ├── AuthFailedError             AUTH_FAILED
    │   │   ├── ContextLengthExceededError  CONTEXT_LENGTH_EXCEEDED
    │   │   ├── ProviderError               PROVIDER_ERROR
    │   │   └── ReplayMissError             REPLAY_MISS
    │   ├── TooManyAbandonedCalls [core.calls]  TOO_MANY_ABANDONED_CALLS: stuck calls hold the process's cap
    │   ├── BudgetError [planning.budget]   a plan budget's reservation rule broken (BUDGET_EXCEEDED, ...)
    │   ├── InvalidGoalDocumentError [planning.goal]        INVALID_GOAL_DOCUMENT, GOAL_FILE_NOT_FOUND, ...
    │   ├── InvalidPlanDocumentError [planning.plan]        INVALID_PLAN_DOCUMENT, PLAN_FILE_NOT_FOUND, ...
    │   ├── PlanPatchError [planning.patch]                 INVALID_PLAN_PATCH, REPLAN_LIMIT, ...
    │   └── InvalidReadinessEvidence [planning.readiness]   INVALID_READINESS_EVIDENCE
    └── StoreError                          the store is unusable or refuses a write (SCHEMA_TOO_NEW,
                                            STORE_UNAVAILABLE, PAYLOAD_TOO_LARGE)

Control signals (a wait, a blocked action) are never exceptions: they are decisions and outcomes
that the Runtime records. The one exception is internal: ``CallCancelled`` (core.interrupt, a
``BaseException`` and no StatewardError) unwinds a call in flight to the driver when a pause is asked;
the driver records it and pauses the run, so it never reaches a caller. Refusal reasons of well-formed
decisions (``RefusalReason`` in core.contract, and the reasons agents' policies give) and terminal
reasons (``completed``, ``budget_exhausted``, a FAIL decision's own reason, ...) are recorded words,
lower case, not error codes.
"""

from __future__ import annotations

from enum import StrEnum, unique
from typing import Any, ClassVar

# Codes renamed since they were first written to data (recordings, event logs): read back as the new name.
_RENAMED: dict[str, str] = {"MAX_TOKENS_REACHED": "REPLY_TRUNCATED"}


@unique
class ErrorCode(StrEnum):
    """Every stable code stateward gives an error, in one place: raise sites pass a member, never a
    string. Values are upper case and equal to their names; the narrower enums of a layer
    (``ToolErrorCode``, ``ParseFailureCode``, ``RejectionCode``) are subsets drawn from these."""

    # Generic (each kind's default)
    STATEWARD_ERROR = "STATEWARD_ERROR"
    CONFIGURATION_ERROR = "CONFIGURATION_ERROR"
    RUN_ERROR = "RUN_ERROR"
    STORE_ERROR = "STORE_ERROR"
    USAGE_ERROR = "USAGE_ERROR"
    # Decisions and signals: text that is not exactly one decision, or a proposal the Runtime refuses
    UNPARSEABLE_DECISION = "UNPARSEABLE_DECISION"
    EMPTY_OUTPUT = "EMPTY_OUTPUT"
    NOT_JSON = "NOT_JSON"
    NOT_AN_OBJECT = "NOT_AN_OBJECT"
    DUPLICATE_KEY = "DUPLICATE_KEY"
    NON_FINITE_NUMBER = "NON_FINITE_NUMBER"
    MISSING_TYPE = "MISSING_TYPE"
    WRAPPED_DECISION = "WRAPPED_DECISION"
    UNKNOWN_DECISION_TYPE = "UNKNOWN_DECISION_TYPE"
    UNEXPECTED_FIELD = "UNEXPECTED_FIELD"
    INVALID_FIELD = "INVALID_FIELD"
    QUESTION_TOO_LARGE = "QUESTION_TOO_LARGE"
    INVALID_PLAN = "INVALID_PLAN"
    PLAN_UNKNOWN_ACTION = "PLAN_UNKNOWN_ACTION"
    PLAN_APPROVAL_ORDER = "PLAN_APPROVAL_ORDER"
    INVALID_NODE_OUTPUT = "INVALID_NODE_OUTPUT"
    # Provider replies that arrived intact but are not one decision (RejectionCode)
    MULTIPLE_TOOL_CALLS = "MULTIPLE_TOOL_CALLS"
    INVALID_TOOL_ARGUMENTS = "INVALID_TOOL_ARGUMENTS"
    EMPTY_REPLY = "EMPTY_REPLY"
    THINKING_ONLY = "THINKING_ONLY"
    REPLY_TRUNCATED = "REPLY_TRUNCATED"  # cut by max_tokens (was MAX_TOKENS_REACHED; read back as this)
    MODEL_REFUSED = "MODEL_REFUSED"
    REPLY_TOO_LARGE = "REPLY_TOO_LARGE"
    # Model calls and model configuration
    PROVIDER_ERROR = "PROVIDER_ERROR"
    AUTH_FAILED = "AUTH_FAILED"
    CONTEXT_LENGTH_EXCEEDED = "CONTEXT_LENGTH_EXCEEDED"
    REPLAY_MISS = "REPLAY_MISS"
    RECORDING_NOT_FOUND = "RECORDING_NOT_FOUND"
    INVALID_RECORDING = "INVALID_RECORDING"
    RECORDING_NOT_ALLOWED = "RECORDING_NOT_ALLOWED"
    INVALID_MODEL_CONFIG = "INVALID_MODEL_CONFIG"
    INVALID_MODEL_SPEC = "INVALID_MODEL_SPEC"
    MISSING_API_KEY = "MISSING_API_KEY"
    MODEL_NOT_SUPPORTED = "MODEL_NOT_SUPPORTED"
    LOCAL_MODEL_NOT_INSTALLED = "LOCAL_MODEL_NOT_INSTALLED"
    LOCAL_MODEL_FAILED = "LOCAL_MODEL_FAILED"
    RESERVED_TOOL_NAME = "RESERVED_TOOL_NAME"
    UNSUPPORTED_SCHEMA = "UNSUPPORTED_SCHEMA"
    INVALID_TOOL_SCHEMA = "INVALID_TOOL_SCHEMA"
    # Runs, transitions and checkpoints
    ILLEGAL_TRANSITION = "ILLEGAL_TRANSITION"
    RUN_NOT_FOUND = "RUN_NOT_FOUND"
    RUN_EXISTS = "RUN_EXISTS"
    # A call to another agent (a child run) that did not deliver: the parent's tool failure, by class
    CHILD_RUN_FAILED = "CHILD_RUN_FAILED"
    CHILD_RUN_CANCELLED = "CHILD_RUN_CANCELLED"
    CHILD_AGENT_UNAVAILABLE = "CHILD_AGENT_UNAVAILABLE"  # the child's agent could not be built: no child ran
    RUN_ENDED = "RUN_ENDED"
    NOT_PAUSABLE = "NOT_PAUSABLE"
    NOT_RESUMABLE = "NOT_RESUMABLE"
    RESUME_NOT_ALLOWED = "RESUME_NOT_ALLOWED"
    UNBOUNDED_RUN = "UNBOUNDED_RUN"
    INVALID_GOAL = "INVALID_GOAL"
    INVALID_TENANT = "INVALID_TENANT"
    INVALID_RUN_ID = "INVALID_RUN_ID"
    CHECKPOINT_INVALID = "CHECKPOINT_INVALID"
    ARTIFACT_CORRUPTED = "ARTIFACT_CORRUPTED"
    ARTIFACT_NOT_FOUND = "ARTIFACT_NOT_FOUND"
    INVALID_CURSOR = "INVALID_CURSOR"
    # Pending requests and their answers
    REQUEST_REFUSED = "REQUEST_REFUSED"
    UNKNOWN_REQUEST = "UNKNOWN_REQUEST"
    STALE_REQUEST = "STALE_REQUEST"
    REQUEST_CLOSED = "REQUEST_CLOSED"
    REQUEST_ALREADY_ANSWERED = "REQUEST_ALREADY_ANSWERED"
    REQUEST_NOT_OPEN = "REQUEST_NOT_OPEN"
    REQUEST_EXPIRED = "REQUEST_EXPIRED"
    ANSWER_TOO_LARGE = "ANSWER_TOO_LARGE"
    ANSWERER_REQUIRED = "ANSWERER_REQUIRED"
    WRONG_ANSWER_KIND = "WRONG_ANSWER_KIND"
    UNKNOWN_OPTION = "UNKNOWN_OPTION"
    ACTION_DIGEST_MISMATCH = "ACTION_DIGEST_MISMATCH"
    ROLE_NOT_ALLOWED = "ROLE_NOT_ALLOWED"
    REJECTED_BY_APPROVER = "REJECTED_BY_APPROVER"
    APPROVAL_CONSUMED = "APPROVAL_CONSUMED"
    # Leases and the store
    STALE_LEASE = "STALE_LEASE"
    LEASE_HELD = "LEASE_HELD"
    CONCURRENT_UPDATE = "CONCURRENT_UPDATE"
    DUPLICATE_RECORD = "DUPLICATE_RECORD"
    PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
    SCHEMA_TOO_NEW = "SCHEMA_TOO_NEW"
    SCHEMA_MISMATCH = "SCHEMA_MISMATCH"
    STORE_NOT_FOUND = "STORE_NOT_FOUND"
    NOT_A_STATEWARD_STORE = "NOT_A_STATEWARD_STORE"
    STORE_UNAVAILABLE = "STORE_UNAVAILABLE"
    STORE_BUSY = "STORE_BUSY"
    STORE_CORRUPT = "STORE_CORRUPT"
    STORE_UNSUPPORTED = "STORE_UNSUPPORTED"
    SERVICE_STORE_REQUIRED = "SERVICE_STORE_REQUIRED"  # a Temporal backend: keys, sessions and webhooks need a store
    SERVICE_STORE_UNEXPECTED = "SERVICE_STORE_UNEXPECTED"  # --service-db beside a store (it keeps its own)
    UNKNOWN_STORE_SCHEME = "UNKNOWN_STORE_SCHEME"
    KEY_EXISTS = "KEY_EXISTS"
    KEY_NOT_FOUND = "KEY_NOT_FOUND"
    INVALID_PAGE_SIZE = "INVALID_PAGE_SIZE"
    INVALID_FILTER = "INVALID_FILTER"
    UNKNOWN_PLAN_VERSION = "UNKNOWN_PLAN_VERSION"  # the console asked for a plan version the run did not record
    # The Tool Gateway (ToolErrorCode is this subset) and tool definitions
    UNKNOWN_TOOL = "UNKNOWN_TOOL"
    TOOL_UNAVAILABLE = "TOOL_UNAVAILABLE"
    CIRCUIT_OPEN = "CIRCUIT_OPEN"
    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    OUT_OF_SCOPE = "OUT_OF_SCOPE"
    OUT_OF_SCOPE_ARGUMENT = "OUT_OF_SCOPE_ARGUMENT"
    # A work item's artifact cites a ref this run never recorded (no observation, no verified input), or none.
    EVIDENCE_UNRESOLVED = "EVIDENCE_UNRESOLVED"
    EVIDENCE_MISSING = "EVIDENCE_MISSING"
    CHECK_FAILED = "CHECK_FAILED"  # a work item's artifact failed (or could not pass) a check before success
    # continue_authorized named an extra budget the run may not grant (past its configured maximum, unknown or
    # unlimited dimension): recorded, nothing granted, the person is asked again.
    BUDGET_GRANT_REFUSED = "BUDGET_GRANT_REFUSED"
    NO_PROCEDURE = "NO_PROCEDURE"  # a RULE / TOOL / VALIDATION item with no registered procedure (never a model's)
    PROCEDURE_FAILED = "PROCEDURE_FAILED"  # an item's procedure raised, or proposed something other than a call
    SCOPE_VIOLATION = "SCOPE_VIOLATION"
    NOT_VISIBLE = "NOT_VISIBLE"
    BUDGET_EXCEEDED = "BUDGET_EXCEEDED"
    BLOCKED_BY_ACTION_GATEWAY = "BLOCKED_BY_ACTION_GATEWAY"
    TIMEOUT = "TIMEOUT"
    RATE_LIMITED = "RATE_LIMITED"
    SERVICE_UNAVAILABLE = "SERVICE_UNAVAILABLE"
    RESULT_TOO_LARGE = "RESULT_TOO_LARGE"
    EXECUTION_ERROR = "EXECUTION_ERROR"
    UNKNOWN_OUTCOME = "UNKNOWN_OUTCOME"
    # a person said a call of unknown outcome did not happen, and its retry policy allows no (further) retry
    NOT_EXECUTED = "NOT_EXECUTED"
    # a reconciled call no longer names the journalled call its answer was about
    RECONCILIATION_MISMATCH = "RECONCILIATION_MISMATCH"
    DUPLICATE_TOOL = "DUPLICATE_TOOL"
    INVALID_MCP_SERVER = "INVALID_MCP_SERVER"
    MCP_SERVER_CLOSED = "MCP_SERVER_CLOSED"
    MCP_TOOL_NOT_FOUND = "MCP_TOOL_NOT_FOUND"
    MCP_TOO_MANY_TOOLS = "MCP_TOO_MANY_TOOLS"
    MCP_TOOL_NAME_INVALID = "MCP_TOOL_NAME_INVALID"
    MCP_TOOL_SCHEMA_TOO_LARGE = "MCP_TOOL_SCHEMA_TOO_LARGE"
    MCP_TOOL_SCHEMA_INVALID = "MCP_TOOL_SCHEMA_INVALID"
    # Agents, workers and configuration
    INVALID_AGENT = "INVALID_AGENT"
    INVALID_AGENT_PARAMS = "INVALID_AGENT_PARAMS"
    PARAM_NOT_ALLOWED = "PARAM_NOT_ALLOWED"
    INVALID_PROJECT_FILE = "INVALID_PROJECT_FILE"
    INVALID_AGENTS_SOURCE = "INVALID_AGENTS_SOURCE"
    AGENT_NAME_CONFLICT = "AGENT_NAME_CONFLICT"
    AGENT_NOT_REGISTERED = "AGENT_NOT_REGISTERED"
    AGENT_UNAVAILABLE = "AGENT_UNAVAILABLE"
    AGENT_VERSION_UNAVAILABLE = "AGENT_VERSION_UNAVAILABLE"
    INVALID_AGENT_VERSION = "INVALID_AGENT_VERSION"
    AGENT_MIGRATION_NOT_REGISTERED = "AGENT_MIGRATION_NOT_REGISTERED"
    MIGRATION_NOT_NEEDED = "MIGRATION_NOT_NEEDED"
    INVALID_MIGRATION = "INVALID_MIGRATION"
    RUN_NOT_MIGRATABLE = "RUN_NOT_MIGRATABLE"
    FORK_POINT_UNAVAILABLE = "FORK_POINT_UNAVAILABLE"
    TOO_MANY_ABANDONED_CALLS = "TOO_MANY_ABANDONED_CALLS"
    INVALID_WORKFLOW = "INVALID_WORKFLOW"
    INVALID_LEASE_POLICY = "INVALID_LEASE_POLICY"
    INVALID_WORKER_CONFIG = "INVALID_WORKER_CONFIG"
    INVALID_RECOVERY_POLICY = "INVALID_RECOVERY_POLICY"
    CHAOS_STORE_IN_USE = "CHAOS_STORE_IN_USE"
    UNKNOWN_CONTROLLER = "UNKNOWN_CONTROLLER"
    UNKNOWN_FIXTURE = "UNKNOWN_FIXTURE"
    CLI_PLUGIN_CONFLICT = "CLI_PLUGIN_CONFLICT"
    CLI_PLUGIN_BROKEN = "CLI_PLUGIN_BROKEN"
    # Telemetry and operational figures
    INVALID_SINCE = "INVALID_SINCE"
    METRICS_UNAVAILABLE = "METRICS_UNAVAILABLE"
    METRICS_PORT_IN_USE = "METRICS_PORT_IN_USE"
    # Goals, plans and plan budgets
    INVALID_GOAL_DOCUMENT = "INVALID_GOAL_DOCUMENT"
    GOAL_FILE_NOT_FOUND = "GOAL_FILE_NOT_FOUND"
    GOAL_FILE_UNREADABLE = "GOAL_FILE_UNREADABLE"
    INVALID_PLAN_DOCUMENT = "INVALID_PLAN_DOCUMENT"
    PLAN_FILE_NOT_FOUND = "PLAN_FILE_NOT_FOUND"
    PLAN_FILE_UNREADABLE = "PLAN_FILE_UNREADABLE"
    INVALID_PLAN_PATCH = "INVALID_PLAN_PATCH"
    REPLAN_LIMIT = "REPLAN_LIMIT"
    STALE_PLAN_VERSION = "STALE_PLAN_VERSION"
    SUCCEEDED_ITEM_DISCARDED = "SUCCEEDED_ITEM_DISCARDED"
    INVALID_READINESS_EVIDENCE = "INVALID_READINESS_EVIDENCE"
    RESERVATION_EXISTS = "RESERVATION_EXISTS"
    UNKNOWN_RESERVATION = "UNKNOWN_RESERVATION"
    BUDGET_RESET_REFUSED = "BUDGET_RESET_REFUSED"
    # The HTTP service
    UNAUTHENTICATED = "UNAUTHENTICATED"
    FORBIDDEN = "FORBIDDEN"
    IDEMPOTENCY_KEY_REUSED = "IDEMPOTENCY_KEY_REUSED"
    INVALID_REQUEST = "INVALID_REQUEST"
    BODY_TOO_LARGE = "BODY_TOO_LARGE"
    NOT_FOUND = "NOT_FOUND"
    METHOD_NOT_ALLOWED = "METHOD_NOT_ALLOWED"
    HTTP_ERROR = "HTTP_ERROR"
    CSRF_REJECTED = "CSRF_REJECTED"
    WEBHOOK_NOT_FOUND = "WEBHOOK_NOT_FOUND"
    WEBHOOK_LIMIT = "WEBHOOK_LIMIT"
    INVALID_TEXT = "INVALID_TEXT"  # a lone surrogate or a NUL in a text, an id or a header
    INVALID_ENCODING = "INVALID_ENCODING"  # a request body that is not UTF-8
    # Webhook targets: refused at subscription (422) and the reasons a delivery records
    WEBHOOK_URL_INVALID = "WEBHOOK_URL_INVALID"
    WEBHOOK_TARGET_FORBIDDEN = "WEBHOOK_TARGET_FORBIDDEN"
    WEBHOOK_DNS_FAILED = "WEBHOOK_DNS_FAILED"
    WEBHOOK_CONNECT_FAILED = "WEBHOOK_CONNECT_FAILED"
    WEBHOOK_TIMEOUT = "WEBHOOK_TIMEOUT"
    WEBHOOK_TLS_FAILED = "WEBHOOK_TLS_FAILED"
    WEBHOOK_REDIRECT_REFUSED = "WEBHOOK_REDIRECT_REFUSED"
    WEBHOOK_HTTP_STATUS = "WEBHOOK_HTTP_STATUS"
    WEBHOOK_DELIVERY_ERROR = "WEBHOOK_DELIVERY_ERROR"
    STREAM_LIMIT = "STREAM_LIMIT"
    STREAM_LIMIT_PER_KEY = "STREAM_LIMIT_PER_KEY"

    @classmethod
    def parse(cls, value: object) -> ErrorCode | None:
        """The member whose value is ``value``, or None: for codes read back from data (a recording, a
        provider's reply), where an unknown code must not raise."""
        if not isinstance(value, str):
            return None
        return cls._value2member_map_.get(_RENAMED.get(value, value))  # type: ignore[return-value]


class StatewardError(Exception):
    """Base of every stateward error; ``code`` is stable and machine-readable."""

    default_code: ClassVar[ErrorCode] = ErrorCode.STATEWARD_ERROR

    def __init__(self, message: str, *, code: ErrorCode | None = None, details: dict[str, Any] | None = None):
        super().__init__(message)
        self.code: ErrorCode = code or self.default_code
        self.message = message
        self.details = details or {}

    def to_dict(self) -> dict[str, Any]:
        """The error as JSON-ready data (stable code, message, details) for the CLI and HTTP answers."""
        out: dict[str, Any] = {"code": str(self.code), "message": self.message}
        if self.details:
            out["details"] = self.details
        return out

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class UserError(StatewardError):
    """Caused by a usage mistake of the application developer: fix the code or the configuration."""

    default_code = ErrorCode.CONFIGURATION_ERROR


class RunError(StatewardError):
    """A run, or a request made to it, cannot proceed as asked."""

    default_code = ErrorCode.RUN_ERROR


class DecisionParseError(RunError):
    """Raw text from a signal source is not exactly one well-formed ControlDecision."""

    default_code = ErrorCode.UNPARSEABLE_DECISION


class IllegalTransitionError(RunError):
    """The transition table has no move from this status by this kind of transition."""

    default_code = ErrorCode.ILLEGAL_TRANSITION


class RunNotFoundError(RunError):
    """No run with this id exists in the store."""

    default_code = ErrorCode.RUN_NOT_FOUND


class RequestRefusedError(RunError):
    """An answer (approve / reject / reply) to a pending request was refused; nothing changed."""

    default_code = ErrorCode.REQUEST_REFUSED


class StaleLeaseError(RunError):
    """A write carried a lease version that is no longer the run's current one."""

    default_code = ErrorCode.STALE_LEASE


class ToolCallError(RunError):
    """The Tool Gateway refused a call before its handler, or classified how it failed."""

    default_code = ErrorCode.EXECUTION_ERROR


class StoreError(StatewardError):
    """The store cannot be used as asked (unreachable, or written by a newer schema)."""

    default_code = ErrorCode.STORE_ERROR
