"""A run as the CLI and API show it. ``suspended`` is computed from the state, never stored."""

from __future__ import annotations

from typing import Any

from stateward.core.state import PendingRequest, RunState, is_run_suspended
from stateward.observability.payloads import is_payload_artifact
from stateward.store.base import Store


def run_summary(store: Store, state: RunState) -> dict[str, Any]:
    pending = state.pending
    return {
        "run_id": state.run_id,
        "tenant": state.tenant,
        "agent": state.agent.name,
        "agent_version": state.agent.version,
        "status": state.status.value,
        "terminal_reason": state.terminal_reason,
        "suspended": is_run_suspended(state),
        "pending": None if pending is None else pending_summary(pending),
        "counters": _counters(state),
        "setback": None if state.setback is None else state.setback.model_dump(mode="json"),
        "approvals": [
            {
                "tool": g.action.tool,
                "args": g.action.args,
                "digest": g.digest,
                "request_id": g.request_id,
                "scope": g.scope.value,
            }
            for g in state.approvals
        ],
        "artifacts": [
            {"name": a.name, "version": a.version, "sha256": a.sha256}
            for a in store.list_artifacts(state.run_id)
            if not is_payload_artifact(a.name)
        ],
        "lineage": {  # a fork's source and fork point, and the forks of this run (same tenant: a fork keeps it)
            "forked_from": None if state.lineage is None else state.lineage.forked_from,
            "at_seq": None if state.lineage is None else state.lineage.at_seq,
            "forks": store.forks_of(state.run_id),
        },
    }


def pending_summary(pending: PendingRequest) -> dict[str, Any]:
    """The request a run waits on, as ``runs show`` prints it (an escalated handoff says so)."""
    return {
        "request_id": pending.request_id,
        "kind": pending.kind,
        "question": pending.question,
        "state_before": pending.state_before.value,
        "guarded_action": None if pending.guarded_action is None else pending.guarded_action.model_dump(mode="json"),
        "approver_role": pending.approver_role,
        "expires_at": None if pending.expires_at is None else pending.expires_at.isoformat(),
        "approval_scope": pending.approval_scope.value,
        "asked_by": pending.asked_by,
        "model_text": pending.model_text,
        **({} if pending.reconciles is None else {"reconciles": pending.reconciles.model_dump(mode="json")}),
        **({} if pending.escalation is None else {"escalation": pending.escalation.model_dump(mode="json")}),
    }


def _counters(state: RunState) -> dict[str, int]:
    """What the run has used, and the calls made since its last wait (zero after a wait: the stop held)."""
    model_after, tool_after = state.calls_after_wait()
    usage = state.usage
    return {
        "steps": usage.steps,
        "model_calls": usage.model_calls,
        "tool_attempts": usage.tool_attempts,
        "model_calls_after_wait": model_after,
        "tool_calls_after_wait": tool_after,
        "rejected_signals": usage.rejected_signals,
        "rejected_actions": usage.rejected_actions,
        "illegal_transitions": usage.illegal_transitions,
        "approvals_consumed": usage.approvals_consumed,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
    }


def family_summary(store: Store, state: RunState) -> dict[str, Any]:
    """A run's place in its tree, as ``runs show`` lists it: the runs above it (root first) and the child
    runs its calls started, with their statuses."""
    from stateward.runtime.children import chain, children_of

    return {
        "chain": chain(store, state),
        "children": [
            {"run_id": c.run_id, "agent": c.agent.name, "status": c.status.value, "terminal_reason": c.terminal_reason}
            for c in children_of(store, state.run_id)
        ],
    }
