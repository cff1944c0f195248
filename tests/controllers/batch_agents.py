"""A plan run with one batch of four independent items and one that depends on them, for the batch tests.

Imported by the test process and by the child process it kills: both build the same agent from this
registry. Every call of ``stamp`` appends a line to the file named by ``BATCH_LOG`` (the world's record
of what ran); with ``BATCH_CRASH_AT=n`` the process dies (``os._exit``) as the n-th call starts, before
it does anything.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from stateward import Agent, AgentRegistry, Budget, ToolRegistry, tool
from stateward.controllers.plan_run import PlanRunConfig, PlanRunController
from stateward.controllers.plan_support import cite_evidence, plan_finish_policy, plan_run_tools
from stateward.core.state import AgentRef
from stateward.models.base import ModelRequest
from stateward.models.scripted import ScriptedModel
from stateward.planning.goal import GoalContract

GOAL = GoalContract(goal_id="g1", objective="Stamp four ledgers, then sum them")
CALLS_PER_ITEM = 2


def _item(wid: str, deps: list[str]) -> dict[str, Any]:
    return {
        "work_item_id": wid,
        "milestone_id": "M1",
        "title": f"item {wid}",
        "task_type": "LOCAL_REACT",
        "dependencies": deps,
        "required_capabilities": ["stamp"],
        "output_spec": {"artifact_type": f"out-{wid.lower()}"},
        "completion_criteria": ["written"],
        "max_react_steps": 5,
        "estimated_cost": {"tool_calls": 3, "model_calls": 3},
    }


# Listed out of id order on purpose: a batch is taken in work-item id order, not in the plan's.
PLAN = {
    "plan_id": "p1",
    "version": 1,
    "goal_id": "g1",
    "milestones": [{"milestone_id": "M1", "title": "all"}],
    "work_items": [_item("W3", []), _item("W1", []), _item("W4", []), _item("W2", []), _item("W5", ["W1", "W2"])],
}


def worker(req: ModelRequest) -> dict[str, Any]:
    wid = req.facts["work_item"]["work_item_id"]
    done = [o for o in req.observations if o["action"] == "stamp" and o["status"] == "SUCCESS"]
    if len(done) < CALLS_PER_ITEM:
        return {"type": "EXECUTE_TOOL", "action": "stamp", "args": {"item": wid, "n": len(done) + 1}}
    content = json.dumps({"stamped": [o["result"]["stamp"] for o in done]})
    args = {"artifact_type": f"out-{wid.lower()}", "content": content, "evidence": cite_evidence(req)}
    return {"type": "EXECUTE_TOOL", "action": "record_output", "args": args}


def _stamp(item: str, n: int) -> dict[str, Any]:
    log = Path(os.environ["BATCH_LOG"])
    ran = log.read_text().splitlines() if log.exists() else []
    crash_at = os.environ.get("BATCH_CRASH_AT")
    if crash_at is not None and len(ran) + 1 == int(crash_at):
        os._exit(9)  # the process dies as this call starts: nothing of it ran
    with log.open("a") as f:
        f.write(f"{item}#{n}\n")
    return {"stamp": f"{item}#{n}", "evidence_id": f"ev:{item}:{n}"}


@tool(description="Stamp one ledger line.")
def stamp(item: str, n: int) -> dict[str, Any]:
    return _stamp(item, n)


@tool(
    name="stamp",
    description="Stamp one ledger line (a side effect: journalled under its idempotency key).",
    side_effect=True,
)
def stamp_once(item: str, n: int) -> dict[str, Any]:
    return _stamp(item, n)


def build(max_parallel: int | None = None, side_effect: bool = False) -> Agent:
    """The agent; ``side_effect``: its ``stamp`` is a side effect (journalled, run once per key)."""
    extra = {} if max_parallel is None else {"max_parallel": max_parallel}
    config = PlanRunConfig(goal=GOAL, **extra)  # max_parallel: the default (4) unless given
    controller = PlanRunController(ScriptedModel(lambda req: PLAN), ScriptedModel(worker), config)
    return Agent(
        name="batches",
        controller=controller,
        tools=ToolRegistry([stamp_once if side_effect else stamp, *plan_run_tools()]),
        ref=AgentRef(name="batches", params={"side_effect": side_effect}),
        finish_policy=plan_finish_policy,
        budget=Budget(max_steps=60),
    )


AGENTS = AgentRegistry()
AGENTS.agent("batches")(build)
