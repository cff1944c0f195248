"""Acting on an accepted EXECUTE_TOOL: through the gateway, and only the gateway, to a side effect."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from stateward.core.budget import UsageDelta
from stateward.core.canonical import sha256_hex
from stateward.core.contract import Observation
from stateward.core.decision import ControlDecision
from stateward.core.events import EventType, NewEvent
from stateward.core.journal import AttemptRecord
from stateward.core.state import AskedBy, PendingRequest, Reconciles, RequestKind, RunState
from stateward.runtime.agent import Agent, guard
from stateward.runtime.child_call import child_calls
from stateward.runtime.transition import await_child, mint_request_id, suspend
from stateward.runtime.write import Write
from stateward.store.records import NewArtifact
from stateward.tools.gateway import ToolGateway
from stateward.tools.types import CallContext, OutcomeStatus, ToolCall, ToolErrorCode, ToolOutcome


@dataclass
class ToolStep:
    """An accepted call's part of the step: its write (state, events, usage, a reconciliation request), its
    observation, and what only the store keeps (artifacts, attempts)."""

    write: Write
    observation: Observation
    observed: dict[str, Any]  # the observation's JSON form, made once (the event and the run's log share it)
    artifacts: list[NewArtifact] = field(default_factory=list)
    attempts: list[AttemptRecord] = field(default_factory=list)
    outcome: ToolOutcome | None = None  # what the gateway answered (for telemetry)


def call_context(agent: Agent, state: RunState, fencing_token: int | None = None) -> CallContext:
    """What the gateway is told about the run's next call. A call a person reconciled carries their answer and
    the step its idempotency key was made at, so the gateway records the answer under that very key."""
    limit = state.budget.max_tool_calls
    said = None if state.next_call is None else state.next_call.reconciled
    return CallContext(
        run_id=state.run_id,
        step=state.usage.steps if said is None else said.key_step,
        permissions=agent.permissions,
        grants=state.approvals,
        resource_scope=agent.resource_scope,
        remaining_tool_calls=None if limit is None else max(0, limit - state.usage.tool_attempts),
        fencing_token=fencing_token,
        reconciliation=said,
        key_scope=None if state.lineage is None else state.lineage.key_scope,
    )


def execute_tool(
    gateway: ToolGateway,
    agent: Agent,
    state: RunState,
    decision: ControlDecision,
    *,
    now: datetime,
    fencing_token: int | None = None,
) -> ToolStep:
    """The call through the gateway, and the step it makes: one new state, one observation (serialized once)."""
    assert decision.action is not None
    args = decision.args or {}
    deferred = state.next_call
    ctx = call_context(agent, state, fencing_token)
    outcome = gateway.invoke(ToolCall(tool=decision.action, args=args), ctx)
    delta, changes = _spent(state, outcome)
    artifacts, written, versions = _artifacts(state, outcome)
    if artifacts:
        changes["artifacts"] = versions
    # An approved call the Runtime ran for a person reports as the step that proposed it.
    observation = _observe(
        state.usage.steps if deferred is None else deferred.step,
        decision,
        outcome,
        [f"{a.name}:v{a.version}" for a in artifacts],
    )
    spec = agent.tools.get(decision.action)
    child = None
    if spec is not None and spec.child_agent is not None and outcome.status is OutcomeStatus.SUCCESS:
        # An agent tool: the call starts a child run, carved from what the run has left after this step.
        child = child_calls(state.model_copy(update=changes), spec.child_agent, decision, outcome, agent.approver_role)
        shown = [c.model_dump(mode="json", exclude={"params"}) for c in child]
        observation = observation.model_copy(update={"result": shown[0] if len(shown) == 1 else {"children": shown}})
    observed = observation.model_dump(mode="json")
    events = [*written, NewEvent(type=EventType.TOOL_ATTEMPTED, payload=_attempted(observed, outcome))]
    if outcome.status is OutcomeStatus.BLOCKED:
        events.append(_blocked(decision.action, outcome))
    write = Write(state.model_copy(update=changes), tuple(events), delta)
    if child is not None:
        write = write.then(await_child(write.state, child, call_step=observation.step, now=now))
    if outcome.status is OutcomeStatus.PENDING_VERIFICATION:
        write = write.then(_await_reconciliation(write.state, observation, agent, decision, outcome, ctx.step, now))
    return ToolStep(
        write=write,
        observation=observation,
        observed=observed,
        artifacts=artifacts,
        attempts=list(outcome.attempts),
        outcome=outcome,
    )


def _spent(state: RunState, outcome: ToolOutcome) -> tuple[UsageDelta, dict[str, object]]:
    """What the call used (every attempt, a refusal, the grant it consumed) and the state's changes for it."""
    consumed = outcome.consumed_grant
    delta = UsageDelta(
        tool_attempts=max(1, outcome.budget_used),
        rejected_actions=1 if outcome.status is OutcomeStatus.BLOCKED else 0,
        approvals_consumed=1 if consumed else 0,
        scope_violations=1 if outcome.error_code is ToolErrorCode.SCOPE_VIOLATION else 0,
    )
    changes: dict[str, object] = {"usage": state.usage.plus(delta), "next_call": None}
    if consumed is not None:
        changes["approvals"] = tuple(g for g in state.approvals if g.request_id != consumed)
    return delta, changes


def _blocked(action: str, outcome: ToolOutcome) -> NewEvent:
    """The gateway refused the action before it ran (permission, approval, policy)."""
    payload = {"action": action, "reason": "blocked_by_action_gateway", "message": outcome.error}
    return NewEvent(type=EventType.ACTION_BLOCKED, payload=payload)


def _observe(step: int, decision: ControlDecision, outcome: ToolOutcome, artifacts: list[str]) -> Observation:
    return Observation(
        step=step,
        action=outcome.tool,
        args=decision.args or {},
        status=outcome.status,
        result=outcome.result,
        error_code=None if outcome.error_code is None else outcome.error_code.value,
        artifacts=artifacts,
    )


def _artifacts(state: RunState, outcome: ToolOutcome) -> tuple[list[NewArtifact], list[NewEvent], dict[str, int]]:
    """Artifacts are versioned, never overwritten: each write of a name is the next version. The new
    artifacts, their artifact_written events and the latest version per name."""
    versions = dict(state.artifacts)
    artifacts: list[NewArtifact] = []
    events: list[NewEvent] = []
    for draft in outcome.artifacts:
        versions[draft.name] = versions.get(draft.name, 0) + 1
        art = NewArtifact(
            name=draft.name, version=versions[draft.name], content=draft.content, media_type=draft.media_type
        )
        artifacts.append(art)
        events.append(
            NewEvent(
                type=EventType.ARTIFACT_WRITTEN,
                payload={
                    "name": art.name,
                    "version": art.version,
                    "sha256": sha256_hex(art.content),
                },
            )
        )
    return artifacts, events, versions


def _await_reconciliation(
    state: RunState,
    observation: Observation,
    agent: Agent,
    decision: ControlDecision,
    outcome: ToolOutcome,
    key_step: int,
    now: datetime,
) -> Write:
    """Nobody can say whether the side effect happened: no retry, no claimed success — the run waits for a person
    who may answer for the tool (its approver role, else the agent's), within the agent's request TTL."""
    tool = decision.action or ""
    key = outcome.idempotency_key or ""
    spec = agent.tools.get(tool)
    may_retry = spec is not None and spec.retry.max_attempts > 1 and not outcome.retried_once
    pending = PendingRequest(
        request_id=mint_request_id(state),
        kind=RequestKind.RECONCILIATION,
        question=reconciliation_question(tool, key, may_retry=may_retry),
        state_before=state.status,
        guarded_action=guard(tool, decision.args or {}),
        asked_by=AskedBy.RUNTIME,
        call_step=observation.step,
        approver_role=agent.approver_role_for(tool),
        created_at=now,
        expires_at=None if agent.request_ttl is None else now + agent.request_ttl,
        reconciles=Reconciles(idempotency_key=key, key_step=key_step, retry_spent=not may_retry),
    )
    write = suspend(state, pending, "awaiting_reconciliation")
    describe = getattr(agent.controller, "reconciliation_notes", None)
    if callable(describe):  # e.g. a plan run's handoff package for the person who will answer
        return write.after(*describe(state, observation, pending.question))
    return write


def reconciliation_question(tool: str, key: str, *, may_retry: bool) -> str:
    """The Runtime's own question (no model wrote it), saying what each answer does."""
    not_happened = (
        "the call is retried once under the same key"
        if may_retry
        else "the step fails with NOT_EXECUTED (no retry is allowed)"
    )
    return (
        f"The outcome of {tool} (idempotency key {key}) is unknown: the call did not report back and the tool has "
        "no lookup that can say. Check the system it acts on. 'It happened' records the call as succeeded, "
        "confirmed by you, and the run goes on as after a success; 'It did not happen' records NOT_EXECUTED and "
        f"{not_happened}."
    )


_LEFT_OUT_EMPTY = frozenset({"error_code", "artifacts", "evidence_id"})  # evidence_id: given by the log


def _attempted(observed: dict[str, Any], outcome: ToolOutcome) -> dict[str, Any]:
    """The ``tool_attempted`` payload: an absent error code, artifact list or idempotency status is left out
    (readers take the Observation's defaults) rather than repeated as null on every step of a long run."""
    payload: dict[str, Any] = {
        "observation": {k: v for k, v in observed.items() if v or k not in _LEFT_OUT_EMPTY},
        "runtime_action": outcome.runtime_action.value,
        "idempotency_key": outcome.idempotency_key,
        "attempts": len(outcome.attempts),
        "handler_calls": outcome.handler_calls,
    }
    if outcome.idempotency_status is not None:
        payload["idempotency_status"] = outcome.idempotency_status.value
    return payload
