"""Every error stateward raises, each with a stable ``code`` that survives into JSON, the CLI and HTTP.

Three kinds are kept apart, because different people fix them::

    StatewardError                      base; ``code`` + ``message`` + ``details``
    ├── UserError                       a developer mistake: bad agent definition or configuration
    ├── RunError                        something about a run or a request to it is not acceptable
    │   ├── DecisionParseError          raw model text is not exactly one decision (NOT_JSON,
    │   │                               DUPLICATE_KEY, NON_FINITE_NUMBER, ...)
    │   ├── IllegalTransitionError      a status change the transition table does not allow
    │   ├── RunNotFoundError            RUN_NOT_FOUND
    │   ├── RequestRefusedError         an answer to a pending request was refused (UNKNOWN_REQUEST,
    │   │                               ANSWER_TOO_LARGE, ...)
    │   ├── StaleLeaseError             a write carried a superseded fencing token (STALE_LEASE)
    │   └── ToolCallError               the Tool Gateway refused or failed a call (UNKNOWN_TOOL, ...)
    └── StoreError                      the store is unusable or refuses a write (SCHEMA_TOO_NEW,
                                        STORE_UNAVAILABLE, PAYLOAD_TOO_LARGE)

Control signals (a wait, a blocked action) are never exceptions: they are decisions and outcomes
that the Runtime records.
"""

from __future__ import annotations

from typing import Any, ClassVar


class StatewardError(Exception):
    """Base of every stateward error; ``code`` is stable and machine-readable."""

    default_code: ClassVar[str] = "STATEWARD_ERROR"

    def __init__(self, message: str, *, code: str | None = None, details: dict[str, Any] | None = None):
        super().__init__(message)
        self.code = code or self.default_code
        self.message = message
        self.details = details or {}

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details:
            out["details"] = self.details
        return out

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class UserError(StatewardError):
    """Caused by a usage mistake of the application developer: fix the code or the configuration."""

    default_code = "CONFIGURATION_ERROR"


class RunError(StatewardError):
    """A run, or a request made to it, cannot proceed as asked."""

    default_code = "RUN_ERROR"


class DecisionParseError(RunError):
    """Raw text from a signal source is not exactly one well-formed ControlDecision."""

    default_code = "UNPARSEABLE_DECISION"


class IllegalTransitionError(RunError):
    """The transition table has no move from this status by this kind of transition."""

    default_code = "ILLEGAL_TRANSITION"


class RunNotFoundError(RunError):
    """No run with this id exists in the store."""

    default_code = "RUN_NOT_FOUND"


class RequestRefusedError(RunError):
    """An answer (approve / reject / reply) to a pending request was refused; nothing changed."""

    default_code = "REQUEST_REFUSED"


class StaleLeaseError(RunError):
    """A write carried a lease version that is no longer the run's current one."""

    default_code = "STALE_LEASE"


class ToolCallError(RunError):
    """The Tool Gateway refused a call before its handler, or classified how it failed."""

    default_code = "EXECUTION_ERROR"


class StoreError(StatewardError):
    """The store cannot be used as asked (unreachable, or written by a newer schema)."""

    default_code = "STORE_ERROR"
