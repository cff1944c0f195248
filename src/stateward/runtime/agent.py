"""An agent definition: a controller over a tool set, plus the rules the Runtime enforces for it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal, get_args

from stateward.core.budget import Budget
from stateward.core.canonical import action_digest
from stateward.core.contract import Controller, FinishCheck, FinishPolicy, RefusalReason, WaitCheck, WaitPolicy
from stateward.core.decision import ControlDecision
from stateward.core.errors import ErrorCode, UserError
from stateward.core.state import AgentRef, GuardedAction, RunState
from stateward.tools.registry import ToolRegistry
from stateward.tools.scope import ResourceScope

ExpiryPolicy = Literal["fail", "cancel", "escalate"]
"""What an expired request does to its run: fail it, cancel it, or re-ask another role (``escalation_role``)."""
RejectedSignalPolicy = Literal["fail", "correct_once"]
"""What a refused signal does: fail the run, or name the error to the model once and let it try again."""
RefusalPolicy = Literal["fail", "cancel"]
"""How a run ends that finishes after a person refused an approval."""


def accept_finish(decision: ControlDecision, state: RunState) -> FinishCheck:
    """The default: a run may finish when its signal source says so and no approval was refused since
    the last one given (the Runtime checks that part for every agent; see ``transition.handle``)."""
    return FinishCheck()


def require_question(decision: ControlDecision, state: RunState) -> WaitCheck:
    """The default precondition: a wait must ask something."""
    if not (decision.question or "").strip():
        return WaitCheck(rejected=RefusalReason.WAIT_SIGNAL_WITHOUT_QUESTION)
    return WaitCheck()


def guard(tool: str, args: dict[str, Any], plan_version: int | None = None) -> GuardedAction:
    """The exact action an approval admits: tool, canonical arguments and plan version, with their digest."""
    return GuardedAction(
        tool=tool, args=args, plan_version=plan_version, digest=action_digest(tool, args, plan_version)
    )


@dataclass
class Agent:
    """A controller over a tool set, and the rules the Runtime enforces for its runs.

    ``ref`` is what the store keeps to rebuild the agent elsewhere: its registered name and JSON
    parameters (by default ``AgentRef(name=name)``). A process rebuilds it only from an
    :class:`~stateward.runtime.agent_registry.AgentRegistry` its operator loaded.
    ``on_refusal`` says how a run ends when it finishes after a person refused an approval:
    ``"fail"`` (FAILED / rejected_by_approver) or ``"cancel"`` (CANCELLED / rejected_by_approver).
    """

    name: str
    controller: Controller
    tools: ToolRegistry
    ref: AgentRef | None = None
    wait_policy: WaitPolicy = require_question
    finish_policy: FinishPolicy = accept_finish
    budget: Budget = field(default_factory=Budget)
    permissions: frozenset[str] = frozenset()
    inventory: Sequence[str] = ()
    request_ttl: timedelta | None = None
    approver_role: str | None = None
    on_request_expiry: ExpiryPolicy = "fail"
    on_rejected_signal: RejectedSignalPolicy = "fail"
    escalation_role: str | None = None
    on_refusal: RefusalPolicy = "fail"
    resource_scope: ResourceScope | None = None  # what tools' scoped arguments may name (the goal's scope)
    max_question_chars: int = 4000  # a longer question is refused (QUESTION_TOO_LARGE) before it is stored

    def __post_init__(self) -> None:
        if self.ref is None:
            self.ref = AgentRef(name=self.name)
        # Checked at run time too: an agent built from parameters (JSON) is not type-checked.
        if self.on_refusal not in get_args(RefusalPolicy):
            raise UserError(f"on_refusal must be fail or cancel, not {self.on_refusal!r}", code=ErrorCode.INVALID_AGENT)
        if self.on_request_expiry not in get_args(ExpiryPolicy):
            raise UserError(
                f"on_request_expiry must be fail, cancel or escalate, not {self.on_request_expiry!r}",
                code=ErrorCode.INVALID_AGENT,
            )
        if self.on_rejected_signal not in get_args(RejectedSignalPolicy):
            raise UserError(
                f"on_rejected_signal must be fail or correct_once, not {self.on_rejected_signal!r}",
                code=ErrorCode.INVALID_AGENT,
            )
        if self.on_request_expiry == "escalate" and not self.escalation_role:
            raise UserError("escalating expired requests needs an escalation_role", code=ErrorCode.INVALID_AGENT)

    def approver_role_for(self, tool: str | None) -> str | None:
        """Who may answer a request about ``tool``: the tool's own ``approver_role``, else the agent's (a tool a
        communications team approves needs no finance role)."""
        spec = None if tool is None else self.tools.get(tool)
        if spec is not None and spec.approver_role is not None:
            return spec.approver_role
        return self.approver_role

    @property
    def agent_ref(self) -> AgentRef:
        """The stored reference (always set after construction)."""
        assert self.ref is not None
        return self.ref
