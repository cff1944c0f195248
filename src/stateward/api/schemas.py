"""Request and response bodies of the HTTP API, built from the library's own pydantic types.

Request bodies forbid unknown fields: who answers, their tenant and roles come from the credential,
so a body that tries to say ``by``, ``tenant`` or ``roles`` is a validation error (422), never obeyed.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from stateward.core.events import Event
from stateward.core.run_inputs import MAX_GOAL_CHARS
from stateward.core.state import AnswerVerdict, PendingRequest
from stateward.core.status import RunStatus
from stateward.store.records import RunRow

MAX_NAME_CHARS = 128
MAX_DIGEST_CHARS = 128


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class StartRun(_Body):
    """Start a registered agent by name with JSON params; the run belongs to the caller's tenant."""

    agent: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    goal: str = Field(min_length=1, max_length=MAX_GOAL_CHARS)
    params: dict[str, Any] = Field(default_factory=dict)
    drive: bool = False  # drive to the next stop in the service; by default a worker drives it


class ForkRun(_Body):
    """Fork a run of the caller's tenant at one of its events (a fork point); params as for a new run
    (the model is the operator's choice, not a request's: ``model_spec`` is refused)."""

    at: int = Field(ge=1, le=2**53)
    agent_version: str | None = Field(default=None, min_length=1, max_length=100)
    params: dict[str, Any] = Field(default_factory=dict)
    drive: bool = False


class ApproveOrReject(_Body):
    """An approval or rejection; ``digest`` is the guarded action's digest the approver saw (checked if given)."""

    comment: str | None = None
    digest: str | None = Field(default=None, max_length=MAX_DIGEST_CHARS)


class Reply(_Body):
    """A reply to a question (an input or handoff request)."""

    text: str


class ErrorDetail(BaseModel):
    code: str
    message: str


class ErrorBody(BaseModel):
    """Every refusal: a stable code and a one-line message."""

    error: ErrorDetail


class RunSummary(BaseModel):
    """A run as ``stateward runs show --json`` shows it (``suspended`` computed from the state)."""

    run_id: str
    tenant: str
    agent: str
    agent_version: str | None = None
    status: RunStatus
    terminal_reason: str | None
    suspended: bool
    pending: dict[str, Any] | None
    counters: dict[str, int]
    setback: dict[str, Any] | None
    approvals: list[dict[str, Any]]
    artifacts: list[dict[str, Any]]
    lineage: dict[str, Any] | None = None  # forked_from, at_seq, forks


class RunList(BaseModel):
    """A page of the caller's runs, newest first; pass ``next_cursor`` back with the same filters."""

    runs: list[RunRow]
    next_cursor: str | None


class EventPage(BaseModel):
    """Events numbered above ``after``; ``next_after`` is the ``after`` of the next call."""

    events: list[Event]
    next_after: int


class InboxItem(BaseModel):
    """An open request the caller may answer, with the exact guarded action (tool, args, digest, plan version);
    ``request.asked_by`` says who wrote the question, ``request.model_text`` is the model's words."""

    run_id: str
    tenant: str
    request: PendingRequest
    # A child run's request: the runs above it, root first, down to the run whose call started it.
    chain: list[str] = Field(default_factory=list)


class Inbox(BaseModel):
    """A page of the inbox; a page may hold fewer items than asked (requests the caller may not answer are left
    out); continue while ``next_cursor`` is not null."""

    items: list[InboxItem]
    next_cursor: str | None


class AnswerOutcome(BaseModel):
    """What an answer did: the recorded answer (``by`` is the caller's key), and the run's status after it.

    ``already_answered`` is true when an identical earlier answer stands (nothing was done again)."""

    run_id: str
    request_id: str
    verdict: AnswerVerdict
    by: str
    at: datetime
    text: str | None
    already_answered: bool
    status: RunStatus


class Health(BaseModel):
    status: str
