"""The stop-signal task against a real model: what each controller's runs actually end in.

A real model is a signal source like any other, so the interesting numbers are not accuracy but
outcomes: how often a run really stopped at the wait, ran out of budget, or was refused (and by which
name), and whether the Runtime ever continued past a refused decision (it must not: a refused run's
events end state_transition -> FAILED, run_exited, with no tool attempt after the refusal).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from stateward import ErrorCode, Event, EventType, RunState, Runtime, UserError, is_run_suspended
from stateward_demos import blog, blog_fixtures

ROW_COLUMNS = (
    "mode",
    "run_id",
    "outcome",
    "status",
    "terminal_reason",
    "rejection_code",
    "suspended",
    "model_calls",
    "tool_attempts",
)


def rejection_of(events: Sequence[Event]) -> tuple[int, str] | None:
    """(index, code) of the event where the Runtime refused a signal, if it did."""
    for index, event in enumerate(events):
        if event.type is EventType.RUNTIME_VALIDATED and event.payload.get("runtime_decision") == "rejected":
            return index, str(event.payload.get("code"))
    return None


def continued_after_rejection(events: Sequence[Event]) -> bool:
    """True when anything but state_transition -> FAILED and run_exited follows a refusal."""
    found = rejection_of(events)
    if found is None:
        return False
    tail = events[found[0] + 1 :]
    return not (
        [e.type for e in tail] == [EventType.STATE_TRANSITION, EventType.RUN_EXITED]
        and tail[0].payload.get("state_after") == "FAILED"
    )


def outcome_of(state: RunState, rejection_code: str | None) -> str:
    if is_run_suspended(state):
        return "wait_suspended"
    if state.terminal_reason == "rejected_signal":
        return f"rejected_signal:{rejection_code}"
    if state.status.value == "COMPLETED":
        return "completed"
    return state.terminal_reason or state.status.value.lower()


def run_row(mode: str, state: RunState, events: Sequence[Event]) -> dict[str, Any]:
    found = rejection_of(events)
    code = None if found is None else found[1]
    return {
        "mode": mode,
        "run_id": state.run_id,
        "outcome": outcome_of(state, code),
        "status": state.status.value,
        "terminal_reason": state.terminal_reason,
        "rejection_code": code,
        "suspended": is_run_suspended(state),
        "model_calls": state.usage.model_calls,
        "tool_attempts": state.usage.tool_attempts,
        "input_tokens": state.usage.input_tokens,
        "output_tokens": state.usage.output_tokens,
        "continued_after_rejection": continued_after_rejection(events),
    }


def run_live_eval(
    model_spec: str,
    runs: int,
    db: str | Path,
    *,
    modes: Sequence[str] = blog.MODES,
    max_steps: int = 8,
    materials: str = "default",
) -> dict[str, Any]:
    """``runs`` runs of the blog task per controller, each driven by ``model_spec`` through the Runtime."""
    if not modes:
        raise UserError(
            f"no controller to evaluate; choose from {', '.join(blog.MODES)}", code=ErrorCode.UNKNOWN_CONTROLLER
        )
    runtime = Runtime.open(str(db))
    rows: list[dict[str, Any]] = []
    try:
        for mode in modes:
            for _ in range(runs):
                agent = blog.build_agent(mode, max_steps=max_steps, materials=materials, model_spec=model_spec)
                state = runtime.start(agent, blog_fixtures.GOAL)
                rows.append(run_row(mode, state, runtime.store.read_events(state.run_id)))
    finally:
        runtime.close()
    distribution = {mode: dict(Counter(r["outcome"] for r in rows if r["mode"] == mode)) for mode in modes}
    rejected = [r for r in rows if r["rejection_code"] is not None]
    return {
        "model": model_spec,
        "runs_per_controller": runs,
        "max_steps": max_steps,
        "distribution": distribution,
        "rows": rows,
        "integrity": {
            "rejected_runs": len(rejected),
            "continued_after_rejection": sum(r["continued_after_rejection"] for r in rows),
            "suspended_with_calls_after_wait": sum(
                1 for r in rows if r["status"] == "WAITING_FOR_USER" and not r["suspended"]
            ),
        },
    }
