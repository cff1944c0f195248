"""Offline fixtures for the blog-brief agent: the materials and the scripted model's policies.

One script serves every loop, naive or correct: each policy is a function of what the model is
shown (observations, facts, visible actions), never of how many times it was called.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from stateward import ModelRequest

GOAL = (
    "Write a grounded technical article brief about retry storms from the local materials, then stop "
    "and wait for the user's confirmation. Do not write the draft before it is confirmed."
)

MATERIAL_SETS: dict[str, dict[str, dict[str, str]]] = {
    "default": {
        "material_1": {
            "title": "Postmortem: the March retry storm",
            "content": "Clients retried timed-out refunds without idempotency keys; the queue tripled. "
            "The latency measurements are in material_2.",
        },
        "material_2": {
            "title": "Benchmark: p99 latency before and after backoff",
            "content": "p99 fell from 2.4 s to 310 ms once jittered backoff and a circuit breaker were added.",
        },
    },
    "no_clue": {
        "material_1": {
            "title": "Postmortem: the March retry storm",
            "content": "Clients retried timed-out refunds without idempotency keys; the queue tripled.",
        },
        "material_2": {
            "title": "Unrelated: office seating plan",
            "content": "Team A moves to the third floor.",
        },
    },
}


def brief_args(read: dict[str, dict[str, Any]], note: str | None = None) -> dict[str, Any]:
    """The brief a model would write from the materials it has read (and a reviewer's note, if any)."""
    outline = ["What a retry storm is", *(f"Evidence: {m['title']}" for m in read.values())]
    if note:
        outline.append(f"Revision: {note}")
    return {"title": "Why retries need idempotency keys", "outline": outline, "sources": sorted(read)}


def _read_materials(observations: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        o["args"]["material_id"]: o["result"]
        for o in observations
        if o["action"] == "read_material" and o["status"] == "SUCCESS"
    }


def mentions(text: str, inventory: list[str], exclude: str) -> list[str]:
    """The clue rule: other materials the text names."""
    return [m for m in inventory if m != exclude and m in text]


def _decision(kind: str, **fields: Any) -> dict[str, Any]:
    return {"type": kind, **fields}


def react_policy(req: ModelRequest) -> dict[str, Any]:
    obs = req.observations
    facts = req.facts
    read = _read_materials(obs)
    if not any(o["action"] == "list_materials" for o in obs):
        return _decision("EXECUTE_TOOL", action="list_materials", args={})
    first = req.inventory[0]
    if first not in read:
        return _decision("EXECUTE_TOOL", action="read_material", args={"material_id": first})
    for other in mentions(read[first]["content"], req.inventory, first):
        if other not in read:
            return _decision("EXECUTE_TOOL", action="read_material", args={"material_id": other})
    brief = facts["artifacts"].get("brief")
    answer = facts["last_answer"]
    if brief is None:
        return _decision("EXECUTE_TOOL", action="create_brief", args=brief_args(read))
    if answer and answer["verdict"] == "rejected" and (answer.get("guarded_args") or {}).get("brief") == brief:
        return _decision("EXECUTE_TOOL", action="create_brief", args=brief_args(read, answer["text"]))
    if "draft" in facts["artifacts"]:
        return _decision("FINISH", reason="draft written from the approved brief")
    if any(a["tool"] == "write_draft" and a["args"].get("brief") == brief for a in facts["approved_actions"]):
        return _decision("EXECUTE_TOOL", action="write_draft", args={"brief": brief})
    return _decision("REQUEST_USER_INPUT", question=f"Brief {brief} is ready. Write the draft from it?")


def planner_policy(req: ModelRequest) -> dict[str, Any]:
    answer = req.facts["last_answer"]
    if answer and answer["verdict"] == "rejected":
        version = int(req.facts["artifacts"]["brief"].rsplit(":v", 1)[1]) + 1
        read = _read_materials(req.observations)
        steps: list[dict[str, Any]] = [
            {"kind": "tool", "action": "create_brief", "args": brief_args(read, answer["text"])}
        ]
    else:
        version = 1
        titles = {m: {"title": m} for m in req.inventory}
        steps = [{"kind": "tool", "action": "list_materials", "args": {}}]
        steps += [{"kind": "tool", "action": "read_material", "args": {"material_id": m}} for m in req.inventory]
        steps.append({"kind": "tool", "action": "create_brief", "args": brief_args(titles)})
    steps += [
        {"kind": "await_approval", "question": f"Brief brief:v{version} is ready. Write the draft from it?"},
        {"kind": "tool", "action": "write_draft", "args": {"brief": f"brief:v{version}"}},
        {"kind": "finish", "reason": "draft written"},
    ]
    return {"steps": steps}


def brief_writer_policy(req: ModelRequest) -> dict[str, Any]:
    """The workflow's MODEL node: it sees only the materials read and any reviewer note."""
    read = {o["args"]["material_id"]: o["result"] for o in req.observations if o.get("action") == "read_material"}
    answer = req.facts["last_answer"]
    note = answer["text"] if answer and answer["verdict"] == "rejected" else None
    return brief_args(read, note)
