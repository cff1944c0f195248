"""The global stages of a plan run (source 2: "Workflow manages the global stages"): fixed, in order,
recorded on the run as it enters each one, so a person sees where a long run is without reading events."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, NonNegativeInt

MAX_STAGE_ENTRIES = 200  # stage changes kept on a run; the oldest go first (the run's events keep them all)


class RunStage(StrEnum):
    """INTAKE -> PLAN -> VALIDATE_PLAN -> EXECUTE -> VERIFY -> HUMAN_APPROVAL -> DELIVER (the source's list).
    EXECUTE, VERIFY and HUMAN_APPROVAL alternate while work items run; a replan enters PLAN again."""

    INTAKE = "INTAKE"
    PLAN = "PLAN"
    VALIDATE_PLAN = "VALIDATE_PLAN"
    EXECUTE = "EXECUTE"
    VERIFY = "VERIFY"
    HUMAN_APPROVAL = "HUMAN_APPROVAL"
    DELIVER = "DELIVER"


class StageEntry(BaseModel):
    """The run entered ``stage`` at decision ``step`` (the Runtime's step counter)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    stage: RunStage
    step: NonNegativeInt


def entered(history: list[StageEntry], stage: RunStage, step: int) -> list[StageEntry]:
    """The history with ``stage`` entered at ``step``; unchanged if the run is already in it."""
    if history and history[-1].stage is stage:
        return history
    return [*history, StageEntry(stage=stage, step=step)][-MAX_STAGE_ENTRIES:]
