"""Trace event types and the event record. The event log is append-only and ordered per run."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class EventType(StrEnum):
    """What an event records; the stable names that appear in traces, golden logs and the HTTP stream."""

    RUN_STARTED = "run_started"
    MODEL_CALL_FAILED = "model_call_failed"
    CALL_CANCELLED = "call_cancelled"  # a model or read-only tool call in flight gave way to a pause
    SIGNAL_RECEIVED = "signal_received"
    RUNTIME_VALIDATED = "runtime_validated"
    STATE_TRANSITION = "state_transition"
    ILLEGAL_TRANSITION = "illegal_transition"
    TOOL_ATTEMPTED = "tool_attempted"
    ACTION_BLOCKED = "action_blocked"
    ACTION_REFUSED = "action_refused"  # a person rejected a call the Runtime asked about
    BRANCH_TAKEN = "branch_taken"
    PLAN_RECORDED = "plan_recorded"
    WORK_ITEM_STARTED = "work_item_started"
    WORK_ITEM_ENDED = "work_item_ended"
    WORK_ITEM_BLOCKED = "work_item_blocked"
    VERIFICATION_RECORDED = "verification_recorded"
    TERMINATION_RECORDED = "termination_recorded"
    CONSTRAINT_DEVIATION_RECORDED = "constraint_deviation_recorded"
    HANDOFF_RECORDED = "handoff_recorded"
    HANDOFF_ANSWERED = "handoff_answered"
    READINESS_EVALUATED = "readiness_evaluated"
    REACT_DECISION = "react_decision"
    ARTIFACT_WRITTEN = "artifact_written"
    PENDING_RECORDED = "pending_recorded"
    REQUEST_ANSWERED = "request_answered"
    RUN_RESUMED = "run_resumed"
    CHILD_RUN_STARTED = "child_run_started"  # a parent's call started a child run (recorded on the child)
    CHILD_RUN_RETURNED = "child_run_returned"  # the child ended: its outcome is the call's observation (parent)
    RUN_EXITED = "run_exited"
    BUDGET_EXHAUSTED = "budget_exhausted"
    STEP_CRASHED = "step_crashed"
    AGENT_UNAVAILABLE = "agent_unavailable"
    MODEL_UNAVAILABLE = "model_unavailable"
    AGENT_MIGRATED = "agent_migrated"  # an operator moved a stopped run to another version of its agent
    RUN_FORKED = "run_forked"  # the first event of a fork's own: the run and event its history is shared up to


class CheckpointReason(StrEnum):
    """Why a step's snapshot is also kept as a checkpoint: before a wait, a pause or an end, and at the
    moments a plan changes, a work item starts or ends, or an artifact is written (the stored names)."""

    WAIT = "wait"
    PAUSE = "pause"
    TERMINAL = "terminal"
    PLAN_CHANGE = "plan_change"
    WORK_ITEM_END = "work_item_end"
    WORK_ITEM_START = "work_item_start"
    ARTIFACT = "artifact"
    MIGRATION = "migration"  # a run moved to another agent version (runs migrate)
    FORK = "fork"  # a fork's first state, at its fork point


# The moments the design keeps a checkpoint besides waits, pauses and endings, first match wins.
CHECKPOINT_EVENTS = (
    (EventType.PLAN_RECORDED, CheckpointReason.PLAN_CHANGE),
    (EventType.WORK_ITEM_ENDED, CheckpointReason.WORK_ITEM_END),
    (EventType.WORK_ITEM_STARTED, CheckpointReason.WORK_ITEM_START),
    (EventType.ARTIFACT_WRITTEN, CheckpointReason.ARTIFACT),
)


class Event(BaseModel):
    """One recorded event of a run: type and payload, numbered in order (seq), with the writing lease version."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str
    seq: int
    type: EventType
    payload: dict[str, Any] = Field(default_factory=dict)
    lease_version: int = 0
    at: datetime


class NewEvent(BaseModel):
    """An event before the store assigns its sequence number."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: EventType
    payload: dict[str, Any] = Field(default_factory=dict)
