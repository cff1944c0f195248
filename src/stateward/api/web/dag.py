"""A plan's work-item DAG drawn as SVG on the server: items as boxes coloured by state, dependencies as
edges, laid out in columns by dependency depth. No script and no style attribute: the colours come from
classes in the inbox's stylesheet, so the page keeps its strict Content-Security-Policy.

The plan and the item states come from a plan run's memo, read the way its controller reads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from stateward.controllers.plan_run.memo import MemoSeals
from stateward.core.inert import inert
from stateward.planning.patch import ExecutionFacts, WorkItemState, derive_states
from stateward.planning.plan import Plan

BOX_W, BOX_H, GAP_X, GAP_Y, PAD = 120, 40, 36, 14, 10


@dataclass(frozen=True)
class Box:
    """One work item placed in the drawing."""

    work_item_id: str
    title: str
    state: WorkItemState
    x: int
    y: int


@dataclass(frozen=True)
class Edge:
    """A dependency: ``source`` must succeed before ``target`` starts."""

    source: str
    target: str
    d: str  # the SVG path


@dataclass(frozen=True)
class PlanDrawing:
    """Everything the template needs to draw one plan version."""

    plan_id: str
    version: int
    width: int
    height: int
    boxes: tuple[Box, ...]
    edges: tuple[Edge, ...]
    counts: dict[str, int]


def plan_of(memo: Mapping[str, Any]) -> tuple[Plan, dict[str, WorkItemState]] | None:
    """The plan of a plan run's memo and each item's state, or None for a run without a plan."""
    if not memo or "plan" not in memo:
        return None
    try:
        typed = MemoSeals().read(memo)
    except ValueError:  # another controller's memo: not a plan run
        return None
    if typed.plan is None:
        return None
    facts = ExecutionFacts(
        attempts={wid: tuple(run.attempts) for wid, run in typed.items.items()}, verified=tuple(typed.verified)
    )
    return typed.plan, derive_states(typed.plan, facts)


def _depths(plan: Plan) -> dict[str, int]:
    """Each item's column: one more than its deepest known dependency (cycles cut, unknown ids ignored)."""
    deps = {w.work_item_id: [d for d in w.dependencies] for w in plan.work_items}
    depth: dict[str, int] = {}

    def visit(wid: str, seen: frozenset[str]) -> int:
        if wid in depth:
            return depth[wid]
        known = [d for d in deps.get(wid, []) if d in deps and d not in seen]
        value = 1 + max((visit(d, seen | {wid}) for d in known), default=-1)
        depth[wid] = value
        return value

    for wid in deps:
        visit(wid, frozenset())
    return depth


def draw(plan: Plan, states: Mapping[str, WorkItemState]) -> PlanDrawing:
    """Lay the plan out left to right by dependency depth."""
    depth = _depths(plan)
    columns: dict[int, list[str]] = {}
    for w in plan.work_items:
        if w.work_item_id not in columns.get(depth[w.work_item_id], []):
            columns.setdefault(depth[w.work_item_id], []).append(w.work_item_id)
    titles = {w.work_item_id: w.title for w in reversed(plan.work_items)}
    place: dict[str, tuple[int, int]] = {}
    for col, ids in columns.items():
        for row, wid in enumerate(ids):
            place[wid] = (PAD + col * (BOX_W + GAP_X), PAD + row * (BOX_H + GAP_Y))
    boxes = tuple(
        Box(wid, inert(titles[wid], 60), states.get(wid, WorkItemState.PENDING), x, y) for wid, (x, y) in place.items()
    )
    edges: list[Edge] = []
    for w in plan.work_items:
        for dep in dict.fromkeys(w.dependencies):
            if dep in place and w.work_item_id in place:
                (x1, y1), (x2, y2) = place[dep], place[w.work_item_id]
                sx, sy, tx, ty = x1 + BOX_W, y1 + BOX_H // 2, x2, y2 + BOX_H // 2
                mid = (sx + tx) // 2
                edges.append(Edge(dep, w.work_item_id, f"M{sx},{sy} C{mid},{sy} {mid},{ty} {tx - 6},{ty}"))
    width = PAD * 2 + (max(columns, default=0) + 1) * (BOX_W + GAP_X) - GAP_X
    height = PAD * 2 + max((len(v) for v in columns.values()), default=1) * (BOX_H + GAP_Y) - GAP_Y
    counts: dict[str, int] = {}
    for box in boxes:
        counts[box.state.value] = counts.get(box.state.value, 0) + 1
    return PlanDrawing(plan.plan_id, plan.version, width, height, boxes, tuple(edges), counts)


__all__ = ["Box", "Edge", "PlanDrawing", "draw", "plan_of"]
