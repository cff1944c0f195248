"""Rows the stores return and the one write a step makes."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from stateward.core.events import CheckpointReason, NewEvent
from stateward.core.journal import AttemptRecord
from stateward.core.state import AnswerVerdict, PendingRequest, RunState


class ArtifactRecord(BaseModel):
    """A stored artifact version: name, version, media type, content and its sha256 (never overwritten)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str
    name: str
    version: int
    sha256: str
    media_type: str
    content: str
    created_at: datetime

    @property
    def ref(self) -> str:
        """The artifact's stable reference, ``name:vN``, as events and reports cite it."""
        return f"{self.name}:v{self.version}"


class NewArtifact(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    version: int
    content: str
    media_type: str = "text/markdown"


class RequestAnswer(BaseModel):
    """How a pending request was closed: answered by a person, or closed by the run (cancel, expiry)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    request_id: str
    verdict: AnswerVerdict
    text: str | None = None
    by: str
    at: datetime


class PendingRecord(BaseModel):
    """A pending request as stored, with how (and whether) it was answered."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str
    request: PendingRequest
    answer: RequestAnswer | None = None

    @property
    def is_open(self) -> bool:
        return self.answer is None


class Lease(BaseModel):
    """The right to write one run. ``version`` is the fencing token every write of the holder carries."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str
    owner: str
    version: int
    expires_at: float  # seconds since the epoch, by the store's clock


class StepWrite(BaseModel):
    """Everything one step changes, committed in one transaction or not at all.

    ``checkpoint`` names why this step's snapshot is also kept as a checkpoint (a wait, a pause, the
    end of the run); ``clear_control`` acknowledges a pause or cancel request. ``not_before`` holds
    the run back until then (a backoff or a retry time, by the runtime's clock): ``claim_next`` skips a
    held run and ``due_runs`` lists it once due; every write without one clears the hold.
    ``release_lease`` gives the writer's lease up in the same transaction (a drive's last write: the run
    is claimable the moment it commits, with no separate release); it means nothing without a lease.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    state: RunState
    events: list[NewEvent] = Field(default_factory=list)
    open_request: PendingRequest | None = None
    close_request: RequestAnswer | None = None
    close_all_requests: RequestAnswer | None = None
    artifacts: list[NewArtifact] = Field(default_factory=list)
    attempts: list[AttemptRecord] = Field(default_factory=list)
    checkpoint: CheckpointReason | None = None
    clear_control: bool = False
    not_before: datetime | None = None
    release_lease: bool = False
    set_agent_version: bool = False  # a migration: the run row's version column follows ``state.agent.version``

    @property
    def has_contents(self) -> bool:
        """Whether the step writes more than its events and the run row (most steps do not)."""
        return bool(self.attempts) or self.has_contents_besides_attempts

    @property
    def has_contents_besides_attempts(self) -> bool:
        """Whether the step writes more than its events, the run row and tool attempts (a tool step's)."""
        return bool(
            self.open_request
            or self.close_request
            or self.close_all_requests
            or self.artifacts
            or self.checkpoint
            or self.set_agent_version
        )


class Checkpoint(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str
    seq: int
    reason: str
    state: RunState
    created_at: datetime


class RunRow(BaseModel):
    """One run as listings show it: id, tenant, agent and version, status, terminal reason, last event, lease owner,
    times, and the start of its goal."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str
    tenant: str
    agent: str
    status: str
    terminal_reason: str | None
    last_seq: int
    lease_owner: str | None = None
    created_at: datetime
    updated_at: datetime
    agent_version: str | None = None
    goal: str | None = None  # its first GOAL_SEARCH_CHARS characters (None: recorded before goals were kept)
    forked_from: str | None = None  # the run whose history up to ``fork_seq`` this one shares
    fork_seq: int | None = None
