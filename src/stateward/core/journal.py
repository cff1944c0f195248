"""The gateway's durable records, owned by core because two layers keep them: the Tool Gateway writes
them (through its GatewayStore port) and the store persists them. Breaker positions, the side-effect
journal (write-ahead, keyed by idempotency key) and tool attempt rows; plus the refusals every store
gives when a journal write breaks a rule.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict

from stateward.core.errors import ErrorCode, RunError, StaleLeaseError


class BreakerPosition(StrEnum):
    """Where a tool's circuit breaker stands."""

    CLOSED = "CLOSED"
    OPEN = "OPEN"
    HALF_OPEN = "HALF_OPEN"


class BreakerState(BaseModel):
    """A tool's circuit breaker as stored: position, consecutive failures, when it opened."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tool: str
    position: BreakerPosition = BreakerPosition.CLOSED
    consecutive_failures: int = 0
    opened_at: datetime | None = None


class SideEffectStatus(StrEnum):
    """Values of ``SideEffectRecord.status``."""

    STARTED = "STARTED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    UNKNOWN_OUTCOME = "UNKNOWN_OUTCOME"
    NOT_EXECUTED = "NOT_EXECUTED"  # a person said it did not happen (their answer is the record's result)


class SideEffectRecord(BaseModel):
    """Write-ahead record of one side-effecting handler call, keyed by idempotency key.

    ``status`` is STARTED before the handler runs, then SUCCEEDED / FAILED / UNKNOWN_OUTCOME; a person's answer to a
    reconciliation makes an UNKNOWN_OUTCOME SUCCEEDED (confirmed by them) or NOT_EXECUTED.
    A STARTED record found later means a process died mid-call: the outcome is unknown.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    idempotency_key: str
    run_id: str
    tool: str
    status: str
    result: Any = None
    updated_at: datetime
    grant_id: str | None = None  # the ONCE approval this call consumed: the store lets one key hold it
    fencing_token: int | None = None  # the writer's lease version: a STARTED write of a superseded holder is refused


class AttemptRecord(BaseModel):
    """One try of a tool call as recorded: outcome, error class, idempotency key and whether the handler ran."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    attempt_id: str
    run_id: str
    step: int
    sequence: int
    tool: str
    input_hash: str
    idempotency_key: str | None
    outcome: str
    error_code: str | None = None
    error: str | None = None
    duration_ms: float = 0.0
    handler_called: bool = False


def approval_consumed(record: SideEffectRecord) -> RunError:
    """The refusal every store gives when another call of the run already journalled its start under
    this single-use approval."""
    return RunError(
        f"approval {record.grant_id} of run {record.run_id} was already used by another call",
        code=ErrorCode.APPROVAL_CONSUMED,
        details={"run_id": record.run_id, "grant": record.grant_id, "tool": record.tool},
    )


def stale_journal_start(record: SideEffectRecord, current: int) -> StaleLeaseError:
    """A holder whose lease was taken over may not start a side effect: the new holder decides."""
    return StaleLeaseError(
        f"run {record.run_id} is held with lease version {current}; a call under {record.fencing_token} may not start",
        code=ErrorCode.STALE_LEASE,
        details={"run_id": record.run_id, "fencing_token": record.fencing_token, "lease_version": current},
    )


def superseded(record: SideEffectRecord, lease_version: int | None) -> bool:
    """Whether ``record`` starts a call under a lease the run no longer holds."""
    return (
        record.status == SideEffectStatus.STARTED
        and record.fencing_token is not None
        and lease_version is not None
        and lease_version > record.fencing_token
    )
