"""Property tests: generated DAGs never report CYCLE; adding one back-edge always does."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from stateward.planning import (
    ExecutionFacts,
    IssueCode,
    Plan,
    WorkItemState,
    dependency_cycles,
    derive_states,
    load_plan,
    validate_plan,
)


def build(edges: dict[int, set[int]], n: int) -> Plan:
    items: list[dict[str, Any]] = [
        {
            "work_item_id": f"w{i}",
            "milestone_id": "M",
            "title": str(i),
            "task_type": "RULE",
            "dependencies": [f"w{d}" for d in sorted(edges.get(i, ()))],
            "output_spec": {"artifact_type": "a"},
            "completion_criteria": ["c"],
        }
        for i in range(n)
    ]
    return load_plan(
        {
            "plan_id": "p",
            "version": 1,
            "goal_id": "g",
            "milestones": [{"milestone_id": "M", "title": "m"}],
            "work_items": items,
        }
    )


@st.composite
def dags(draw: st.DrawFn) -> tuple[int, dict[int, set[int]]]:
    """Each item depends only on items with a smaller index, so the graph is acyclic by construction."""
    n = draw(st.integers(min_value=1, max_value=40))
    edges = {i: set(draw(st.lists(st.integers(0, i - 1), max_size=5))) if i else set() for i in range(n)}
    return n, edges


@settings(max_examples=150, deadline=None)
@given(dags())
def test_dags_never_report_cycle(dag: tuple[int, dict[int, set[int]]]) -> None:
    n, edges = dag
    plan = build(edges, n)
    report = validate_plan(plan)
    assert IssueCode.CYCLE not in report.codes
    assert report.verdict.value == "ACCEPT"
    assert dependency_cycles(plan) == []
    assert WorkItemState.BLOCKED not in derive_states(plan, ExecutionFacts()).values()


@settings(max_examples=150, deadline=None)
@given(dags(), st.data())
def test_back_edge_always_reports_cycle(dag: tuple[int, dict[int, set[int]]], data: st.DataObject) -> None:
    n, edges = dag
    existing = [(i, d) for i, deps in edges.items() for d in deps]
    if existing:
        # i depends on d (d < i); making d depend on i closes a cycle
        i, d = data.draw(st.sampled_from(existing))
    else:
        i = d = data.draw(st.integers(0, n - 1))  # self-dependency
    edges = {k: set(v) for k, v in edges.items()}
    edges[d].add(i)
    plan = build(edges, n)
    report = validate_plan(plan)
    cycles = [issue for issue in report.issues if issue.code is IssueCode.CYCLE]
    assert cycles
    assert report.verdict.value == "REJECT"
    # every reported path is a real cycle: consecutive items are dependency edges, ends meet
    for path in dependency_cycles(plan):
        assert path[0] == path[-1]
        for a, b in itertools.pairwise(path):
            assert int(b[1:]) in edges[int(a[1:])]
