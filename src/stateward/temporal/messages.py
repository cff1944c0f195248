"""What crosses the workflow's boundary: its input, its activities' inputs and results, its Updates' arguments
and replies, and the book a query returns. pydantic models all, carried by the SDK's pydantic data converter."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from stateward.core.contract import Observation, SignalFailure, WaitSpec
from stateward.core.decision import ControlDecision, SignalSource
from stateward.core.events import Event, NewEvent
from stateward.core.journal import BreakerState, SideEffectRecord
from stateward.core.model_io import Usage
from stateward.core.state import RequestKind, RunState
from stateward.runtime.continuation import Answerer
from stateward.store.outbox import Notice
from stateward.store.records import ArtifactRecord, PendingRecord, RequestAnswer
from stateward.tools.types import CallContext, ToolCall, ToolOutcome

ControlKind = Literal["pause", "cancel"]
# Temporal events one workflow execution gathers before it continues as new (the server suggests it sooner for
# a large history): a long run's history stays bounded, its book carried over whole.
DEFAULT_HISTORY_EVENTS = 2000
# Bytes of events and artifacts a run's book may hold before its next step: the book crosses every
# continue-as-new, query and result as one payload, and Temporal refuses one over 2 MiB (a workflow task that
# would carry it fails, retried forever). Past this the run ends FAILED / book_full, readable, rather than stuck.
DEFAULT_BOOK_BYTES = 1536 * 1024
MAX_BOOK_BYTES = 2048 * 1024


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ProposeInput(_Frozen):
    """What the controller reads for one proposal: the run's state and its observations so far."""

    state: RunState
    observations: list[Observation] = Field(default_factory=list)


class ProposeFailure(_Frozen):
    """A signal source that broke (a provider down, a controller's own error): how the workflow ends or parks."""

    code: str
    message: str
    retryable: bool = False


class ProposeResult(_Frozen):
    """A ``Proposal`` as data (or the failure that stood in for one)."""

    signal: ControlDecision | SignalFailure | str | None = None
    source: SignalSource = SignalSource.MODEL
    visible_actions: list[str] = Field(default_factory=list)
    model_usage: list[Usage] = Field(default_factory=list)
    memo: dict[str, Any] | None = None
    notes: list[NewEvent] = Field(default_factory=list)
    wait: WaitSpec | None = None
    failure: ProposeFailure | None = None


class ToolInput(_Frozen):
    """One call through the gateway: the run (for its agent), the call, its context, and the journal the gateway
    reads (the workflow keeps it: an entry left STARTED by a lost attempt is reconciled, never run blind)."""

    state: RunState
    call: ToolCall
    ctx: CallContext
    journal: list[SideEffectRecord] = Field(default_factory=list)
    breakers: list[BreakerState] = Field(default_factory=list)


class ToolResult(_Frozen):
    """What the gateway answered, and its journal and breakers as it left them."""

    outcome: ToolOutcome
    journal: list[SideEffectRecord] = Field(default_factory=list)
    breakers: list[BreakerState] = Field(default_factory=list)


class AnswerInput(_Frozen):
    """An approve, reject or reply, with what the answerer vouches for (as ``continuation.Answerer``)."""

    request_id: str
    verdict: str
    by: str
    text: str | None = None
    tenant: str | None = None
    roles: list[str] = Field(default_factory=list)
    digest: str | None = None
    expects: str | None = None

    def answerer(self) -> Answerer:
        """Who answers, and what they vouch for, as the Runtime's answer checks take it."""
        return Answerer(
            by=self.by,
            tenant=self.tenant,
            roles=frozenset(self.roles),
            digest=self.digest,
            expects=None if self.expects is None else RequestKind(self.expects),
        )


class AnswerReply(_Frozen):
    """The run after the answer; ``already_answered``: an identical repeat, nothing done again."""

    state: RunState
    already_answered: bool
    answer: RequestAnswer


class ControlInput(_Frozen):
    """A pause, resume or cancel, by whom and holding which roles."""

    by: str = "operator"
    roles: list[str] = Field(default_factory=list)
    tenant: str | None = None


class Book(_Frozen):
    """Everything the workflow knows of its run, as a query returns it: the state, every event in order, every
    request with its answer, the artifacts, and a pause or cancel asked but not yet honoured."""

    state: RunState
    events: list[Event] = Field(default_factory=list)
    requests: list[PendingRecord] = Field(default_factory=list)
    artifacts: list[ArtifactRecord] = Field(default_factory=list)
    journal: list[SideEffectRecord] = Field(default_factory=list)
    breakers: list[BreakerState] = Field(default_factory=list)
    control: str | None = None  # a ControlRequest, encoded as the stores keep it
    created_at: datetime
    updated_at: datetime


class NotifyInput(_Frozen):
    """The webhook notices one step caused (a wait, an end), for the service store's outbox."""

    state: RunState
    notices: list[Notice]


class StartRun(_Frozen):
    """The workflow's input: the run as created (RUNNING, nothing spent) and its ``run_started`` event; after a
    continue-as-new, the book the previous execution left, which the new one goes on from."""

    state: RunState
    started: NewEvent
    book: Book | None = None
    max_history_events: int = Field(default=DEFAULT_HISTORY_EVENTS, ge=20)
    max_book_bytes: int = Field(default=DEFAULT_BOOK_BYTES, ge=1024, le=MAX_BOOK_BYTES)
