"""One operation's whole write: the new state, every event in order, what it added to the usage counters, the
requests it opens or closes, and why its snapshot is kept as a checkpoint.

``runtime/transition.py`` builds every Write that moves a status (and the few that only record); the driver,
the expiry sweep, continuation and recovery put their own notes in front (``after``), join a tool call's
write to the decision's (``then``) and persist the result (``stored``): none of them assembles a move.
The writes that move nothing but the usage counters (``charge``, ``model_attempt_failed``, ``illegal``) are
built here too.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from stateward.core.budget import UsageDelta
from stateward.core.contract import Proposal
from stateward.core.decision import ControlDecision
from stateward.core.errors import StatewardError
from stateward.core.events import CHECKPOINT_EVENTS, CheckpointReason, EventType, NewEvent
from stateward.core.state import PendingRequest, RunState
from stateward.core.status import RunStatus, TransitionKind
from stateward.store.records import RequestAnswer, StepWrite

if TYPE_CHECKING:
    from collections.abc import Sequence

    from stateward.core.model_io import Usage as ModelUsage

_HELD = {RunStatus.WAITING_FOR_USER: CheckpointReason.WAIT, RunStatus.PAUSED: CheckpointReason.PAUSE}


@dataclass(frozen=True)
class Write:
    """Everything one operation changes, committed in one transaction or not at all (see ``StepWrite``)."""

    state: RunState
    events: tuple[NewEvent, ...] = ()
    usage: UsageDelta = field(default_factory=UsageDelta)  # what this write added (``state.usage`` counts it)
    open_request: PendingRequest | None = None
    close_request: RequestAnswer | None = None
    close_all_requests: RequestAnswer | None = None
    clear_control: bool = False  # acknowledges a pause or cancel request

    @property
    def checkpoint(self) -> CheckpointReason | None:
        """Why the snapshot is also kept: a move that leaves the run not RUNNING keeps one (a wait, a pause, an
        end); otherwise the first design moment among the events (a plan change, a work item, an artifact)."""
        status = self.state.status
        if status is not RunStatus.RUNNING and any(e.type is EventType.STATE_TRANSITION for e in self.events):
            return _HELD.get(status, CheckpointReason.TERMINAL)
        kinds = {e.type for e in self.events}
        return next((reason for kind, reason in CHECKPOINT_EVENTS if kind in kinds), None)

    def after(self, *events: NewEvent) -> Write:
        """This write with ``events`` recorded before its own (a controller's notes, an answer, a setback)."""
        return dataclasses.replace(self, events=(*events, *self.events))

    def with_state(self, state: RunState) -> Write:
        """This write leaving ``state`` instead (a change that moves nothing: the memo a decision keeps)."""
        return dataclasses.replace(self, state=state)

    def then(self, other: Write) -> Write:
        """This write followed by ``other``, made from this one's state (a decision, then the call it made)."""
        if self.state.status is not RunStatus.RUNNING:
            raise ValueError(f"nothing follows a write that leaves the run {self.state.status.value}")
        return Write(
            state=other.state,
            events=(*self.events, *other.events),
            usage=self.usage + other.usage,
            open_request=other.open_request or self.open_request,
            close_request=other.close_request or self.close_request,
            close_all_requests=other.close_all_requests or self.close_all_requests,
            clear_control=self.clear_control or other.clear_control,
        )

    def stored(self, **extras: Any) -> StepWrite:
        """The store's transaction for this write; ``extras``: what only the store needs (artifacts, attempts,
        a hold until ``not_before``)."""
        return StepWrite(
            state=self.state,
            events=list(self.events),
            open_request=self.open_request,
            close_request=self.close_request,
            close_all_requests=self.close_all_requests,
            checkpoint=self.checkpoint,
            clear_control=self.clear_control,
            **extras,
        )


def charge(state: RunState, model_usage: Sequence[ModelUsage]) -> Write:
    """Model calls that answered in a step that did not go on (it gave way to a pause): spent, no step counted."""
    delta = UsageDelta.of_model_calls(model_usage)
    return Write(state.model_copy(update={"usage": state.usage.plus(delta)}), usage=delta)


def model_attempt_failed(state: RunState, attempt: dict[str, Any]) -> Write:
    """A failed model attempt, durable (and counted against the budget) before any retry."""
    delta = UsageDelta(model_calls=1)
    failed = NewEvent(type=EventType.MODEL_CALL_FAILED, payload=attempt)
    return Write(state.model_copy(update={"usage": state.usage.plus(delta)}), (failed,), delta)


def illegal(state: RunState, exc: StatewardError) -> Write:
    """An illegal move asked for (a bug somewhere): recorded and counted, nothing moved."""
    delta = UsageDelta(illegal_transitions=1)
    event = NewEvent(type=EventType.ILLEGAL_TRANSITION, payload=exc.to_dict())
    return Write(state.model_copy(update={"usage": state.usage.plus(delta)}), (event,), delta)


@dataclass(frozen=True)
class Transition:
    """What ``handle`` decided about one signal: the kind of move, whether the signal was accepted and why,
    and the write that records it."""

    kind: TransitionKind
    state_before: RunStatus
    state_after: RunStatus
    accepted: bool
    reason: str | None
    decision: ControlDecision | None
    write: Write

    @property
    def state(self) -> RunState:
        """The run's state after the decision."""
        return self.write.state

    @property
    def events(self) -> tuple[NewEvent, ...]:
        """Every event of the decision, in order."""
        return self.write.events

    @property
    def pending(self) -> PendingRequest | None:
        """The request the decision opened, if it entered a wait."""
        return self.write.open_request


def accepted_step(transition: Transition, proposal: Proposal) -> Write:
    """The write of a decided step: an accepted proposal's notes go first and its memo is kept (a refused one
    leaves no trace of the controller's own: its notes describe the memo it would have kept); a step that
    completes ends the run's run of setbacks."""
    write = transition.write
    update: dict[str, Any] = {}
    if write.state.setback is not None:
        update["setback"] = None
    if transition.accepted and proposal.memo is not None:
        update["memo"] = proposal.memo
    if update:
        write = write.with_state(write.state.model_copy(update=update))
    return write.after(*proposal.notes) if transition.accepted else write
