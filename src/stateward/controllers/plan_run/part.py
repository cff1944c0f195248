"""What each part of a plan run shares: the coordinator it belongs to, and through it the current config."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stateward.controllers.plan_run.controller import PlanRunController
    from stateward.controllers.plan_run.memo import PlanRunConfig


class Part:
    """One job of a plan run (planning, item execution, delivery, reading facts), reached through its coordinator
    so the parts can hand work to each other; the config is read through the coordinator, never copied."""

    def __init__(self, owner: PlanRunController) -> None:
        self.owner = owner

    @property
    def config(self) -> PlanRunConfig:
        return self.owner.config
