"""Setbacks: a step that could not be taken (it crashed, the agent cannot be built here, the model
provider is down). Each is counted on the run, so retries back off and stay bounded.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field


class SetbackKind(StrEnum):
    """What held the run back; also the name of the event recording it and of the run's reason."""

    STEP_CRASHED = "step_crashed"  # an unexpected exception inside one step
    AGENT_UNAVAILABLE = "agent_unavailable"  # this process cannot build the run's agent
    MODEL_UNAVAILABLE = "model_unavailable"  # the model provider stayed down after its retry budget


class Setback(BaseModel):
    """The run's latest setback and how many of each kind happened since its last completed step.

    Counts are cleared only by a step that completes; a resume (by a person or by the retry sweep)
    keeps them, so repeated trouble keeps backing off and reaches its bound.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: SetbackKind
    error: str  # the error's code (or its exception type), e.g. AGENT_NOT_REGISTERED, ValueError
    counts: dict[SetbackKind, int] = Field(default_factory=dict)
    retry_at: datetime | None = None  # when a worker tries again; None: an operator decides

    def count(self, kind: SetbackKind) -> int:
        return self.counts.get(kind, 0)


def next_setback(previous: Setback | None, kind: SetbackKind, error: str, retry_at: datetime | None) -> Setback:
    counts = dict(previous.counts) if previous is not None else {}
    counts[kind] = counts.get(kind, 0) + 1
    return Setback(kind=kind, error=error, counts=counts, retry_at=retry_at)


def without_retry(setback: Setback | None) -> Setback | None:
    """A setback once someone resumed the run: the counts stay, the retry time is spent."""
    return None if setback is None else setback.model_copy(update={"retry_at": None})
