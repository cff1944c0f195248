"""The conflicting-rules task (source 001, "same task, three ways"): two rules that contradict each other -
"create the brief and wait for the user's confirmation" and "do not stop, write the full draft" - run by
ReAct, Plan-and-Execute and Workflow over the same in-memory article store.

Every model here follows rule two: it never asks to wait and goes straight for ``write_draft``. Which rule
wins is not the model's to say: ``write_draft`` needs an approval bound to that exact brief, so in all three
modes the run stops WAITING_FOR_USER before any draft exists. Each row is read back from the store.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from stateward import Agent, EventType, Runtime
from stateward.models import ModelRequest, ScriptedModel
from stateward.testing import temporary_runtime
from stateward_demos import blog_fixtures as fx
from stateward_demos.blog import MODES, build_agent

RULES = (
    "Rule one: create the brief first and wait for the user to confirm it.",
    "Rule two: do not stop; write the complete draft straight away.",
)
GOAL = f"{fx.GOAL} {RULES[0]} {RULES[1]}"
COLUMNS = ("mode", "status", "briefs", "write_draft_calls", "draft_written", "waits_for", "asked_by")


def _brief(req: ModelRequest) -> dict[str, Any]:
    return fx.brief_args({m: {"title": m} for m in req.inventory})


def no_stop_react(req: ModelRequest) -> dict[str, Any]:
    """A ReAct model obeying rule two: a brief, then the draft at once, never a wait."""
    brief = req.facts["artifacts"].get("brief")
    if brief is None:
        return {"type": "EXECUTE_TOOL", "action": "create_brief", "args": _brief(req)}
    return {"type": "EXECUTE_TOOL", "action": "write_draft", "args": {"brief": brief}}


def no_stop_planner(req: ModelRequest) -> dict[str, Any]:
    """A planner obeying rule two: its plan has no wait step between the brief and the draft."""
    return {
        "steps": [
            {"kind": "tool", "action": "create_brief", "args": _brief(req)},
            {"kind": "tool", "action": "write_draft", "args": {"brief": "brief:v1"}},
            {"kind": "finish", "reason": "draft written without stopping"},
        ]
    }


def _models() -> dict[str, ScriptedModel]:
    return {
        "react": ScriptedModel(no_stop_react, name="rule-two-react"),
        "plan_and_execute": ScriptedModel(no_stop_planner, name="rule-two-planner"),
        # The workflow's model only fills the brief's content: it has no say over what comes next.
        "workflow": ScriptedModel(fx.brief_writer_policy, name="rule-two-brief-writer"),
    }


def run_mode(runtime: Runtime, mode: str) -> dict[str, Any]:
    """Run the task under one controller and read what happened back from the store."""
    agent: Agent = build_agent(mode, max_steps=12, model=_models()[mode])
    state = runtime.start(agent, GOAL)
    attempts = [
        e.payload["observation"] for e in runtime.store.read_events(state.run_id) if e.type is EventType.TOOL_ATTEMPTED
    ]
    pending = state.pending
    guarded = None if pending is None or pending.guarded_action is None else pending.guarded_action
    return {
        "mode": mode,
        "status": state.status.value,
        "briefs": state.artifacts.get("brief", 0),
        "write_draft_calls": sum(1 for a in attempts if a["action"] == "write_draft"),  # any outcome
        "draft_written": "draft" in state.artifacts,
        "waits_for": None if guarded is None else f"{guarded.tool} {guarded.args.get('brief')}",
        "asked_by": None if pending is None else pending.asked_by.value,
    }


def run_conflicting_rules(directory: str | Path | None = None) -> list[dict[str, Any]]:
    """One row per controller, each on a fresh store (in ``directory``, or a temporary one)."""
    if directory is None:
        with tempfile.TemporaryDirectory() as tmp:
            return run_conflicting_rules(tmp)
    rows = []
    for mode in MODES:
        where = Path(directory) / mode
        where.mkdir(parents=True, exist_ok=True)
        runtime = temporary_runtime(where)
        try:
            rows.append(run_mode(runtime, mode))
        finally:
            runtime.close()
    return rows
