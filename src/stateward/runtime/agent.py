"""An agent definition: a controller over a tool set, plus the rules the Runtime enforces for it."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from stateward.controllers.base import Controller, FinishCheck
from stateward.core.budget import Budget
from stateward.core.canonical import action_digest
from stateward.core.decision import ControlDecision
from stateward.core.errors import UserError
from stateward.core.state import AgentRef, GuardedAction, RunState
from stateward.tools.registry import ToolRegistry


@dataclass(frozen=True)
class WaitCheck:
    """The Runtime's verdict on a wait signal: a rejection reason, or what the wait guards."""

    rejected: str | None = None
    guarded_action: GuardedAction | None = None
    kind: str = "input"


WaitPolicy = Callable[[ControlDecision, RunState], WaitCheck]


FinishPolicy = Callable[[ControlDecision, RunState], FinishCheck]


def accept_finish(decision: ControlDecision, state: RunState) -> FinishCheck:
    """The default: a run may finish whenever its signal source says so."""
    return FinishCheck()


def require_question(decision: ControlDecision, state: RunState) -> WaitCheck:
    """The default precondition: a wait must ask something."""
    if not (decision.question or "").strip():
        return WaitCheck(rejected="wait_signal_without_question")
    return WaitCheck()


def guard(tool: str, args: dict[str, Any], plan_version: int | None = None) -> GuardedAction:
    return GuardedAction(
        tool=tool, args=args, plan_version=plan_version, digest=action_digest(tool, args, plan_version)
    )


@dataclass
class Agent:
    name: str
    controller: Controller
    tools: ToolRegistry
    ref: AgentRef
    wait_policy: WaitPolicy = require_question
    finish_policy: FinishPolicy = accept_finish
    budget: Budget = field(default_factory=Budget)
    permissions: frozenset[str] = frozenset()
    inventory: Sequence[str] = ()
    request_ttl: timedelta | None = None
    approver_role: str | None = None
    on_request_expiry: str = "fail"  # "fail" | "cancel" | "escalate"
    on_rejected_signal: str = "fail"  # "fail" | "correct_once"
    escalation_role: str | None = None

    def __post_init__(self) -> None:
        if self.on_request_expiry not in {"fail", "cancel", "escalate"}:
            raise UserError(
                f"on_request_expiry must be fail, cancel or escalate, not {self.on_request_expiry!r}",
                code="INVALID_AGENT",
            )
        if self.on_rejected_signal not in {"fail", "correct_once"}:
            raise UserError(
                f"on_rejected_signal must be fail or correct_once, not {self.on_rejected_signal!r}",
                code="INVALID_AGENT",
            )
        if self.on_request_expiry == "escalate" and not self.escalation_role:
            raise UserError("escalating expired requests needs an escalation_role", code="INVALID_AGENT")


def resolve_agent(ref: AgentRef) -> Agent:
    """Rebuild a run's agent in any process from its stored reference."""
    module_name, _, attr = ref.factory.partition(":")
    if not module_name or not attr:
        raise UserError(f"agent factory {ref.factory!r} is not 'module:function'", code="INVALID_AGENT_REF")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise UserError(f"cannot import agent factory {ref.factory!r}: {exc}", code="INVALID_AGENT_REF") from exc
    agent = factory(**ref.params)
    if not isinstance(agent, Agent):
        raise UserError(f"{ref.factory} returned {type(agent).__name__}, not an Agent", code="INVALID_AGENT_REF")
    return agent
