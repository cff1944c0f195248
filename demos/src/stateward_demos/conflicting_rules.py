"""The conflicting-rules task (source 001, "same task, three ways"): two rules that contradict each other -
"create the brief and wait for the user's confirmation" and "do not stop, write the full draft" - run by
ReAct, Plan-and-Execute and Workflow over the same in-memory article store, each twice: a naive loop (the
counter-examples of :mod:`stateward_demos.naive`) and the Runtime.

The naive rows are the source's: the ReAct loop picks ``create_brief`` every step and never waits; the naive
executor records the plan's wait as a marker, still tries ``write_draft`` (blocked by the gateway) and
finishes; the naive workflow runner suspends with no ``write_draft`` in its trace but calls itself done.

In the corrected rows every model follows rule two: it never asks to wait and goes straight for
``write_draft``. Which rule wins is not the model's to say: ``write_draft`` needs an approval bound to that
exact brief, and the step-plan validator answers REVISE to a plan that puts ``write_draft`` before its
approval step, so in all three modes the run stops WAITING_FOR_USER before any draft exists. Each corrected
row is read back from the store.
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
COLUMNS = (
    "mode",
    "variant",
    "status",
    "briefs",
    "write_draft_calls",
    "draft_written",
    "waiting_marker",
    "waits_for",
    "asked_by",
    "validator",
)
NAIVE_REACT_STEPS = 3  # the source's live run: three create_brief steps, then its step limit


def _brief(req: ModelRequest) -> dict[str, Any]:
    return fx.brief_args({m: {"title": m} for m in req.inventory})


def no_stop_react(req: ModelRequest) -> dict[str, Any]:
    """A ReAct model obeying rule two: a brief, then the draft at once, never a wait."""
    brief = req.facts["artifacts"].get("brief")
    if brief is None:
        return {"type": "EXECUTE_TOOL", "action": "create_brief", "args": _brief(req)}
    return {"type": "EXECUTE_TOOL", "action": "write_draft", "args": {"brief": brief}}


def no_stop_planner(req: ModelRequest) -> dict[str, Any]:
    """A planner obeying rule two: its plan has no wait step between the brief and the draft, until the
    validator answers REVISE (named in the request's correction); then it puts the approval step first."""
    steps: list[dict[str, Any]] = [{"kind": "tool", "action": "create_brief", "args": _brief(req)}]
    if req.correction and "REVISE" in req.correction:
        steps.append({"kind": "await_approval", "question": "Brief brief:v1 is ready. Write the draft from it?"})
    steps += [
        {"kind": "tool", "action": "write_draft", "args": {"brief": "brief:v1"}},
        {"kind": "finish", "reason": "draft written without stopping"},
    ]
    return {"steps": steps}


def brief_again_react(req: ModelRequest) -> dict[str, Any]:
    """The source's live ReAct model under both rules: it makes the brief at every step, never waits."""
    return {"type": "EXECUTE_TOOL", "action": "create_brief", "args": _brief(req)}


def both_rules_planner(req: ModelRequest) -> dict[str, Any]:
    """The source's planner: its plan writes the wait (rule one) and then the draft (rule two)."""
    return {
        "steps": [
            {"kind": "tool", "action": "create_brief", "args": _brief(req)},
            {"kind": "await_approval", "question": "Brief brief:v1 is ready. Write the draft from it?"},
            {"kind": "tool", "action": "write_draft", "args": {"brief": "brief:v1"}},
            {"kind": "finish", "reason": "draft written"},
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
    verdicts = [
        e.payload["validator"]
        for e in runtime.store.read_events(state.run_id)
        if e.type is EventType.PLAN_RECORDED and "validator" in e.payload
    ]
    return {
        "mode": mode,
        "variant": "corrected",
        "status": state.status.value,
        "briefs": state.artifacts.get("brief", 0),
        "write_draft_calls": sum(1 for a in attempts if a["action"] == "write_draft"),  # any outcome
        "draft_written": "draft" in state.artifacts,
        "waiting_marker": None,
        "waits_for": None if guarded is None else f"{guarded.tool} {guarded.args.get('brief')}",
        "asked_by": None if pending is None else pending.asked_by.value,
        "validator": " -> ".join(verdicts) or None,
    }


def naive_row(mode: str) -> dict[str, Any]:
    """The same task under the naive loop of ``mode``, with the source's model: what the loop itself reports
    (a status it set, a waiting marker nobody reads) and what its gateway saw."""
    from stateward_demos import naive

    run: naive.NaiveRun
    if mode == "react":
        model = ScriptedModel(brief_again_react, name="source-react")
        run = naive.naive_react(max_model_calls=NAIVE_REACT_STEPS, model=model)
    elif mode == "plan_and_execute":
        run = naive.naive_plan_and_execute(model=ScriptedModel(both_rules_planner, name="source-planner"))
    else:
        run = naive.naive_workflow(model=ScriptedModel(fx.brief_writer_policy, name="source-brief-writer"))
    return {
        "mode": mode,
        "variant": "naive",
        "status": run.status,
        "briefs": run.artifacts.get("brief", 0),
        "write_draft_calls": sum(1 for o in run.observations if o.action == "write_draft"),
        "draft_written": "draft" in run.artifacts,
        "waiting_marker": run.waiting_marker,
        "waits_for": None,
        "asked_by": None,
        "validator": "ACCEPT" if mode == "plan_and_execute" else None,  # the naive executor's parse-and-whitelist
    }


def run_conflicting_rules(directory: str | Path | None = None) -> list[dict[str, Any]]:
    """Two rows per controller, naive then corrected, the corrected one on a fresh store (in ``directory``, or a
    temporary one)."""
    if directory is None:
        with tempfile.TemporaryDirectory() as tmp:
            return run_conflicting_rules(tmp)
    rows = []
    for mode in MODES:
        where = Path(directory) / mode
        where.mkdir(parents=True, exist_ok=True)
        runtime = temporary_runtime(where)
        rows.append(naive_row(mode))
        try:
            rows.append(run_mode(runtime, mode))
        finally:
            runtime.close()
    return rows
