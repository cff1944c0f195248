"""A run as the CLI and API show it. ``suspended`` is computed from the state, never stored."""

from __future__ import annotations

from typing import Any

from stateward.core.state import RunState, is_run_suspended
from stateward.store.base import Store


def run_summary(store: Store, state: RunState) -> dict[str, Any]:
    model_after, tool_after = state.calls_after_wait()
    pending = state.pending
    usage = state.usage
    return {
        "run_id": state.run_id,
        "agent": state.agent.factory,
        "status": state.status.value,
        "terminal_reason": state.terminal_reason,
        "suspended": is_run_suspended(state),
        "pending": None
        if pending is None
        else {
            "request_id": pending.request_id,
            "kind": pending.kind,
            "question": pending.question,
            "state_before": pending.state_before.value,
            "guarded_action": None
            if pending.guarded_action is None
            else pending.guarded_action.model_dump(mode="json"),
            "expires_at": None if pending.expires_at is None else pending.expires_at.isoformat(),
        },
        "counters": {
            "steps": usage.steps,
            "model_calls": usage.model_calls,
            "tool_attempts": usage.tool_attempts,
            "model_calls_after_wait": model_after,
            "tool_calls_after_wait": tool_after,
            "rejected_signals": usage.rejected_signals,
            "rejected_actions": usage.rejected_actions,
            "illegal_transitions": usage.illegal_transitions,
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
        },
        "setback": None if state.setback is None else state.setback.model_dump(mode="json"),
        "approvals": [{"tool": a.tool, "args": a.args, "digest": a.digest} for a in state.approvals],
        "artifacts": [
            {"name": a.name, "version": a.version, "sha256": a.sha256} for a in store.list_artifacts(state.run_id)
        ],
    }
