"""RunState: the snapshot of one run, changed only through the Runtime.

The state is immutable; every change produces a new value, so a step either commits whole or not at
all. It carries only what the next decision needs: observation history lives in the event log.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from stateward.core.budget import Budget, Usage
from stateward.core.setback import Setback
from stateward.core.status import RunStatus


class AgentRef(BaseModel):
    """How any process rebuilds the agent of a run: an import path and its JSON parameters."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    factory: str
    params: dict[str, Any] = Field(default_factory=dict)


class GuardedAction(BaseModel):
    """The exact action a pending approval is about."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tool: str
    args: dict[str, Any] = Field(default_factory=dict)
    plan_version: int | None = None
    digest: str


class PendingRequest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    request_id: str
    kind: str = "approval"
    question: str
    state_before: RunStatus
    guarded_action: GuardedAction | None = None
    options: tuple[str, ...] = ()  # for a handoff: the choices an answer must name
    approver_role: str | None = None
    created_at: datetime
    expires_at: datetime | None = None
    replaces: str | None = None  # an escalation's new request: the id of the one first asked (kept on re-escalation)


class Answer(BaseModel):
    """A person's answer to a pending request, as the controller sees it on resume."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    request_id: str
    verdict: str  # "approved" | "rejected" | "replied"
    text: str | None = None
    by: str
    at: datetime
    guarded_action: GuardedAction | None = None
    replaces: str | None = None  # answered an escalation of this request: a controller waiting on it takes it

    def answers(self, request_id: str | None) -> bool:
        """Whether this answers ``request_id``, directly or through an escalation that replaced it."""
        return request_id is not None and request_id in (self.request_id, self.replaces)


class WaitSnapshot(BaseModel):
    """Counters frozen in the same step that entered the wait, so "calls after the wait" is measurable."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    step: int
    model_calls: int
    tool_attempts: int


class RunState(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str
    tenant: str = "default"
    agent: AgentRef
    goal: str
    status: RunStatus = RunStatus.RUNNING
    terminal_reason: str | None = None
    usage: Usage = Field(default_factory=Usage)
    budget: Budget = Field(default_factory=Budget)
    pending: PendingRequest | None = None
    wait: WaitSnapshot | None = None
    requests_issued: int = 0
    last_answer: Answer | None = None
    correction: str | None = None  # the error the next model request must name (correct-once policy)
    approvals: tuple[GuardedAction, ...] = ()
    artifacts: dict[str, int] = Field(default_factory=dict)  # latest version per artifact name
    facts: dict[str, Any] = Field(default_factory=dict)
    memo: dict[str, Any] = Field(default_factory=dict)
    setback: Setback | None = None  # a crash or outage being retried (see core/setback.py)

    def calls_after_wait(self) -> tuple[int, int]:
        """(model calls, tool attempts) since the wait began; (0, 0) when not waiting."""
        if self.wait is None:
            return 0, 0
        return (
            self.usage.model_calls - self.wait.model_calls,
            self.usage.tool_attempts - self.wait.tool_attempts,
        )


def is_run_suspended(state: RunState) -> bool:
    """The proof that a run stopped: the status alone proves nothing."""
    model_delta, tool_delta = state.calls_after_wait()
    return (
        state.status is RunStatus.WAITING_FOR_USER
        and state.pending is not None
        and state.wait is not None
        and model_delta == 0
        and tool_delta == 0
    )
