"""What the gateway needs from durable storage. Both stores implement it; so does an in-memory fake."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict


class BreakerPosition(StrEnum):
    CLOSED = "CLOSED"
    OPEN = "OPEN"
    HALF_OPEN = "HALF_OPEN"


class BreakerState(BaseModel):
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


class SideEffectRecord(BaseModel):
    """Write-ahead record of one side-effecting handler call, keyed by idempotency key.

    ``status`` is STARTED before the handler runs, then SUCCEEDED / FAILED / UNKNOWN_OUTCOME.
    A STARTED record found later means a process died mid-call: the outcome is unknown.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    idempotency_key: str
    run_id: str
    tool: str
    status: str
    result: Any = None
    updated_at: datetime


class GatewayStore(Protocol):
    def get_breaker(self, tool: str) -> BreakerState | None: ...

    def put_breaker(self, state: BreakerState) -> None: ...

    def get_side_effect(self, idempotency_key: str) -> SideEffectRecord | None: ...

    def put_side_effect(self, record: SideEffectRecord) -> None:
        """Committed immediately (its own transaction): it must survive a crash of the step."""
        ...
