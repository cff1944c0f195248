"""The stop-signal comparison: each controller driven by a naive loop and by the Runtime.

Same tools, same gateway, same scripted model, same budget. The naive loops are counter-examples
(see ``naive.py``); the correct rows come from real runs on a real store.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stateward import Model, RunState, Runtime
from stateward_demos import blog, blog_fixtures, naive

COLUMNS = (
    "mode",
    "variant",
    "terminal_reason",
    "status",
    "waiting_marker",
    "model_calls",
    "tool_attempts",
    "rejected_actions",
    "pending_request_id",
    "draft_written",
    "approval_granted",
    "model_calls_after_wait",
    "tool_calls_after_wait",
)
BUDGET_STEPS = 8


def correct_row(mode: str, state: RunState) -> dict[str, Any]:
    model_after, tool_after = state.calls_after_wait()
    return {
        "mode": mode,
        "variant": "correct",
        "terminal_reason": state.terminal_reason,
        "status": state.status.value,
        "waiting_marker": False,
        "model_calls": state.usage.model_calls,
        "tool_attempts": state.usage.tool_attempts,
        "rejected_actions": state.usage.rejected_actions,
        "pending_request_id": None if state.pending is None else state.pending.request_id,
        "draft_written": "draft" in state.artifacts,
        "approval_granted": bool(state.approvals),
        "model_calls_after_wait": model_after,
        "tool_calls_after_wait": tool_after,
    }


def compare(
    db_dir: Path, materials: str = "default", model_spec: str | None = None, *, model: Model | None = None
) -> list[dict[str, Any]]:
    """Six rows: naive then correct, for react, plan_and_execute and workflow.

    ``model_spec`` (``--model``) or ``model``: every row's signals come from that one model instead of the
    scripted ones - the same comparison, one run per controller and variant (as ``stateward eval stop-signal
    --runs 1`` does for the correct rows).
    """
    if model is None and model_spec is not None:
        from stateward.models import model_from_spec

        model = model_from_spec(model_spec)
    rows = [
        naive.naive_react(materials, max_model_calls=BUDGET_STEPS, model=model).row(),
        naive.naive_plan_and_execute(materials, model=model).row(),
        naive.naive_workflow(materials, model=model).row(),
    ]
    runtime = Runtime.open(str(db_dir / "stop-signal.db"))
    try:
        for mode in blog.MODES:
            agent = blog.build_agent(
                mode, max_steps=BUDGET_STEPS, materials=materials, model=model, model_spec=model_spec
            )
            rows.append(correct_row(mode, runtime.start(agent, blog_fixtures.GOAL)))
    finally:
        runtime.close()
    return rows
