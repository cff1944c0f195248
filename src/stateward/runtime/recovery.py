"""How a run recovers from a setback: bounded retries with exponential backoff, then a named end.

What is wrong decides where the run goes once its retries are spent:

- ``step_crashed`` (the run's own code path raised): FAILED / ``step_crashed``. A step that crashes
  again and again on the same state will not stop crashing by waiting; nothing stays RUNNING.
- ``agent_unavailable`` (this process cannot build the agent) and ``model_unavailable`` (the provider
  stays down): PAUSED with that reason and no retry time, for an operator. Nothing is wrong with the
  run itself; once the agent is deployed or the provider is back, ``stateward resume RUN`` goes on.
"""

from __future__ import annotations

import math
from datetime import timedelta

from pydantic import BaseModel, ConfigDict, model_validator

from stateward.core.errors import ErrorCode, RunError, StaleLeaseError, StatewardError, StoreError, UserError
from stateward.core.setback import SetbackKind
from stateward.tools.redaction import RedactionRules

# Who resumes a run whose retry time came (recorded on its run_resumed event).
RETRY_BY = "stateward:retry"
# The codes that mean "this process cannot build the run's agent" (the names of today's and the
# registry's resolution errors).
AGENT_BUILD_CODES = frozenset({"AGENT_NOT_REGISTERED", "AGENT_UNAVAILABLE"})
# Store refusals that a crash record could not get past either: the caller hears them as they are.
_REFUSALS = frozenset({"CONCURRENT_UPDATE", "LEASE_HELD", "RUN_NOT_FOUND"})
MAX_MESSAGE = 300
# An exception's text may quote a credential (a URL with a password, a header): never store it.
_SECRETS = RedactionRules(
    patterns=(
        r"(?i)\b(bearer|basic)\s+\S+",  # first: a header's scheme and its credential go together
        r"(?i)\b(api[_-]?key|token|secret|password|passwd|authorization)\b\s*[=:]\s*\S+",
        r"\bsk-[A-Za-z0-9_-]{8,}",
        r"://[^/\s:@]+:[^/\s@]+@",
    )
)


class RecoveryPolicy(BaseModel):
    """Retries per kind of setback, and the backoff between them (doubling from a base, capped)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    step_crash_retries: int = 3
    agent_unavailable_retries: int = 5
    model_outage_retries: int = 5
    base_delay_s: float = 5.0  # after a crash or an unbuildable agent
    outage_base_delay_s: float = 60.0  # after a model outage (on top of the model's own retries)
    max_delay_s: float = 3600.0

    @model_validator(mode="after")
    def _sane(self) -> RecoveryPolicy:
        retries = (self.step_crash_retries, self.agent_unavailable_retries, self.model_outage_retries)
        delays = (self.base_delay_s, self.outage_base_delay_s, self.max_delay_s)
        if min(retries) < 0 or not all(math.isfinite(d) and d > 0 for d in delays):
            raise UserError(
                "retries must be >= 0 and delays finite positive seconds", code=ErrorCode.INVALID_RECOVERY_POLICY
            )
        return self

    def retries(self, kind: SetbackKind) -> int:
        return {
            SetbackKind.STEP_CRASHED: self.step_crash_retries,
            SetbackKind.AGENT_UNAVAILABLE: self.agent_unavailable_retries,
            SetbackKind.MODEL_UNAVAILABLE: self.model_outage_retries,
        }[kind]

    def delay(self, kind: SetbackKind, count: int, at_least_s: float = 0.0) -> timedelta:
        """The wait before retry number ``count`` (1, 2, ...): base x 2^(count-1), capped."""
        base = self.outage_base_delay_s if kind is SetbackKind.MODEL_UNAVAILABLE else self.base_delay_s
        seconds = min(self.max_delay_s, base * 2 ** min(count - 1, 60))
        return timedelta(seconds=max(seconds, min(at_least_s, self.max_delay_s)))


def error_code(exc: BaseException) -> str:
    """A StatewardError's code, or the exception's type name (ValueError, KeyError, ...)."""
    return exc.code if isinstance(exc, StatewardError) else type(exc).__name__


def describe(exc: BaseException) -> str:
    """One short line for the event log: the first line of the message, redacted and bounded."""
    text = exc.message if isinstance(exc, StatewardError) else str(exc)
    line = " ".join(text.strip().splitlines()[0].split()) if text.strip() else ""
    line = _SECRETS.text(line) or type(exc).__name__
    return line if len(line) <= MAX_MESSAGE else line[: MAX_MESSAGE - 1] + "…"


def is_store_refusal(exc: BaseException) -> bool:
    """Errors no crash record could be written past: a lost lease, a racing writer, the store down."""
    return isinstance(exc, StoreError | StaleLeaseError) or (isinstance(exc, RunError) and exc.code in _REFUSALS)
