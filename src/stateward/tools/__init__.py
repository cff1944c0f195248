"""The Tool Gateway: the only path from a proposed tool call to a side effect."""

from stateward.core.journal import AttemptRecord, BreakerPosition, BreakerState, SideEffectRecord, SideEffectStatus

from .agent_tool import ChildHandoff, agent_tool
from .breaker import BreakerPolicy, CircuitBreaker
from .errors import (
    RateLimited,
    ServiceUnavailable,
    ToolFailure,
    ToolInvalidArgument,
    ToolOutcomeUnknown,
    ToolPermissionDenied,
    ToolTimeout,
)
from .gateway import ToolGateway
from .memory_store import InMemoryGatewayStore
from .ports import GatewayStore
from .redaction import REDACTED, RedactionRules
from .registry import ToolRegistry
from .results import TRUNCATION_MARKER
from .retry import RetryPolicy
from .scope import ResourceScope, ScopedArg, ScopeMatch
from .spec import ChildAgent, LookupFn, ToolContext, ToolSpec, tool
from .types import (
    ArtifactDraft,
    CallContext,
    LookupStatus,
    OutcomeStatus,
    RuntimeAction,
    ToolCall,
    ToolErrorCode,
    ToolOutcome,
)

__all__ = [
    "REDACTED",
    "TRUNCATION_MARKER",
    "ArtifactDraft",
    "AttemptRecord",
    "BreakerPolicy",
    "BreakerPosition",
    "BreakerState",
    "CallContext",
    "ChildAgent",
    "ChildHandoff",
    "CircuitBreaker",
    "GatewayStore",
    "InMemoryGatewayStore",
    "LookupFn",
    "LookupStatus",
    "OutcomeStatus",
    "RateLimited",
    "RedactionRules",
    "ResourceScope",
    "RetryPolicy",
    "RuntimeAction",
    "ScopeMatch",
    "ScopedArg",
    "ServiceUnavailable",
    "SideEffectRecord",
    "SideEffectStatus",
    "ToolCall",
    "ToolContext",
    "ToolErrorCode",
    "ToolFailure",
    "ToolGateway",
    "ToolInvalidArgument",
    "ToolOutcome",
    "ToolOutcomeUnknown",
    "ToolPermissionDenied",
    "ToolRegistry",
    "ToolSpec",
    "ToolTimeout",
    "agent_tool",
    "tool",
]
