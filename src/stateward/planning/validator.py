"""Plan Validator: a planner's output is a proposal; this decides whether it may be executed.

The validator only reads the plan (it never repairs it) and returns a verdict:

* REJECT - the plan is structurally unusable or reaches outside what the run may do; the planner has to
  produce a new plan: EMPTY_PLAN, GOAL_MISMATCH, DUPLICATE_ID, UNKNOWN_DEPENDENCY, CYCLE,
  UNKNOWN_CAPABILITY, OUT_OF_SCOPE.
* REVISE - the graph is sound but something fixable is missing; a targeted revision suffices:
  UNKNOWN_MILESTONE, NO_COMPLETION_CRITERIA, MISSING_APPROVAL, BUDGET_INFEASIBLE.
* ACCEPT - no issue at all.

Dependency edges point from an item to what it depends on, so the cycle ``a -> b -> a`` reads
"a depends on b, b depends on a". Cycle detection is iterative (no recursion limit at 10,000 items).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Collection, Iterable
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict

from stateward.planning.goal import GoalContract, Scope
from stateward.planning.plan import (
    OUTSIDE_TASK_TYPES,
    Plan,
    RemainingBudget,
    RiskLevel,
    schema_problem,
    total_cost,
)


class Verdict(StrEnum):
    """The Plan Validator's answer: ACCEPT runs, REVISE and REJECT never do."""

    ACCEPT = "ACCEPT"
    REVISE = "REVISE"
    REJECT = "REJECT"


class IssueCode(StrEnum):
    """The stable code of one problem the Plan Validator found."""

    EMPTY_PLAN = "EMPTY_PLAN"
    GOAL_MISMATCH = "GOAL_MISMATCH"
    DUPLICATE_ID = "DUPLICATE_ID"
    UNKNOWN_DEPENDENCY = "UNKNOWN_DEPENDENCY"
    CYCLE = "CYCLE"
    UNKNOWN_CAPABILITY = "UNKNOWN_CAPABILITY"
    OUT_OF_SCOPE = "OUT_OF_SCOPE"
    UNKNOWN_MILESTONE = "UNKNOWN_MILESTONE"
    NO_COMPLETION_CRITERIA = "NO_COMPLETION_CRITERIA"
    MISSING_APPROVAL = "MISSING_APPROVAL"
    BUDGET_INFEASIBLE = "BUDGET_INFEASIBLE"
    INVALID_OUTPUT_SCHEMA = "INVALID_OUTPUT_SCHEMA"  # an output_spec schema no artifact could be checked against


REJECT_CODES: frozenset[IssueCode] = frozenset(
    {
        IssueCode.EMPTY_PLAN,
        IssueCode.GOAL_MISMATCH,
        IssueCode.DUPLICATE_ID,
        IssueCode.UNKNOWN_DEPENDENCY,
        IssueCode.CYCLE,
        IssueCode.UNKNOWN_CAPABILITY,
        IssueCode.OUT_OF_SCOPE,
    }
)
REVISE_CODES: frozenset[IssueCode] = frozenset(IssueCode) - REJECT_CODES


class Issue(BaseModel):
    """One problem in a plan: its code, the work item concerned and a message."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    code: IssueCode
    work_item_id: str | None
    message: str


class ValidationReport(BaseModel):
    """The Plan Validator's verdict and every issue behind it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    verdict: Verdict
    issues: tuple[Issue, ...] = ()

    @classmethod
    def from_issues(cls, issues: Iterable[Issue]) -> ValidationReport:
        """A report whose verdict follows from the issues: any rejecting code rejects, others ask to revise."""
        found = tuple(issues)
        if any(i.code in REJECT_CODES for i in found):
            verdict = Verdict.REJECT
        elif found:
            verdict = Verdict.REVISE
        else:
            verdict = Verdict.ACCEPT
        return cls(verdict=verdict, issues=found)

    @property
    def codes(self) -> set[IssueCode]:
        """The distinct issue codes found."""
        return {i.code for i in self.issues}

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data for events and the CLI."""
        return self.model_dump(mode="json")


def validate_plan(
    plan: Plan,
    *,
    capabilities: Collection[str] | None = None,
    budget: RemainingBudget | None = None,
    scope: Scope | None = None,
    goal: GoalContract | None = None,
    completed: Collection[str] = (),
) -> ValidationReport:
    """Judge ``plan`` without changing it.

    ``capabilities`` is the registry (None: not checked); ``scope`` defaults to ``goal.scope``;
    ``completed`` items have already been paid for and are left out of the budget estimate.
    """
    forbidden = goal.forbidden_capabilities() if goal else frozenset()
    issues: list[Issue] = []
    issues += _check_header(plan, goal)
    issues += _check_unique_ids(plan)
    issues += _check_milestones(plan)
    issues += _check_dependencies(plan)
    issues += _check_cycles(plan)
    issues += _check_completion_criteria(plan)
    issues += _check_output_schemas(plan)
    issues += _check_capabilities(plan, capabilities)
    issues += _check_scope(plan, scope if scope is not None else (goal.scope if goal else None), forbidden)
    issues += _check_approvals(plan)
    issues += _check_budget(plan, budget, completed)
    return ValidationReport.from_issues(issues)


# --------------------------------------------------------------------------- individual checks


def _check_header(plan: Plan, goal: GoalContract | None) -> list[Issue]:
    out: list[Issue] = []
    if not plan.work_items:
        out.append(Issue(code=IssueCode.EMPTY_PLAN, work_item_id=None, message="plan has no work items"))
    if goal is not None and plan.goal_id != goal.goal_id:
        msg = f"plan is for goal {plan.goal_id!r}, not {goal.goal_id!r}"
        out.append(Issue(code=IssueCode.GOAL_MISMATCH, work_item_id=None, message=msg))
    return out


def _check_unique_ids(plan: Plan) -> list[Issue]:
    out: list[Issue] = []
    for mid, n in Counter(m.milestone_id for m in plan.milestones).items():
        if n > 1:
            msg = f"milestone id {mid!r} appears {n} times"
            out.append(Issue(code=IssueCode.DUPLICATE_ID, work_item_id=None, message=msg))
    for wid, n in Counter(w.work_item_id for w in plan.work_items).items():
        if n > 1:
            msg = f"work item id {wid!r} appears {n} times"
            out.append(Issue(code=IssueCode.DUPLICATE_ID, work_item_id=wid, message=msg))
    return out


def _check_milestones(plan: Plan) -> list[Issue]:
    known = {m.milestone_id for m in plan.milestones}
    return [
        Issue(
            code=IssueCode.UNKNOWN_MILESTONE,
            work_item_id=w.work_item_id,
            message=f"{w.work_item_id} belongs to milestone {w.milestone_id!r}, which the plan lacks",
        )
        for w in plan.work_items
        if w.milestone_id not in known
    ]


def _check_dependencies(plan: Plan) -> list[Issue]:
    known = {w.work_item_id for w in plan.work_items}
    return [
        Issue(
            code=IssueCode.UNKNOWN_DEPENDENCY,
            work_item_id=w.work_item_id,
            message=f"{w.work_item_id} depends on {dep!r}, which is not a work item of this plan",
        )
        for w in plan.work_items
        for dep in dict.fromkeys(w.dependencies)
        if dep not in known
    ]


def _check_cycles(plan: Plan) -> list[Issue]:
    return [
        Issue(code=IssueCode.CYCLE, work_item_id=cycle[0], message=f"dependency cycle: {' -> '.join(cycle)}")
        for cycle in dependency_cycles(plan)
    ]


def _check_output_schemas(plan: Plan) -> list[Issue]:
    """A declared output schema must be a well-formed JSON Schema: an artifact is checked against it before
    its item succeeds, and a malformed one could never say yes or no."""
    out: list[Issue] = []
    for w in plan.work_items:
        schema = w.output_spec.json_schema
        problem = None if schema is None else schema_problem(schema)
        if problem is not None:
            msg = f"{w.work_item_id} declares a malformed output schema: {problem}"
            out.append(Issue(code=IssueCode.INVALID_OUTPUT_SCHEMA, work_item_id=w.work_item_id, message=msg))
    return out


def _check_completion_criteria(plan: Plan) -> list[Issue]:
    return [
        Issue(
            code=IssueCode.NO_COMPLETION_CRITERIA,
            work_item_id=w.work_item_id,
            message=f"{w.work_item_id} has no completion criteria, so it could never be accepted",
        )
        for w in plan.work_items
        if not any(c.strip() for c in w.completion_criteria)
    ]


def _check_capabilities(plan: Plan, capabilities: Collection[str] | None) -> list[Issue]:
    if capabilities is None:
        return []
    registry = set(capabilities)
    return [
        Issue(
            code=IssueCode.UNKNOWN_CAPABILITY,
            work_item_id=w.work_item_id,
            message=f"{w.work_item_id} requires capability {cap!r}, which is not registered",
        )
        for w in plan.work_items
        for cap in dict.fromkeys(w.required_capabilities)
        if cap not in registry
    ]


def _check_scope(plan: Plan, scope: Scope | None, forbidden: frozenset[str]) -> list[Issue]:
    out: list[Issue] = []

    def add(wid: str, why: str) -> None:
        out.append(Issue(code=IssueCode.OUT_OF_SCOPE, work_item_id=wid, message=f"{wid} {why}"))

    allowed = scope.allowed_capabilities if scope is not None else None
    for w in plan.work_items:
        for cap in dict.fromkeys(w.required_capabilities):
            if cap in forbidden:
                add(w.work_item_id, f"requires capability {cap!r}, which a hard constraint forbids")
            elif allowed is not None and cap not in allowed:
                add(w.work_item_id, f"requires capability {cap!r}, which the goal scope does not allow")
        if scope is None:
            continue
        for tag in dict.fromkeys(w.scope):
            if tag in scope.out_of_scope:
                add(w.work_item_id, f"touches {tag!r}, which is explicitly out of scope")
            elif scope.in_scope and tag not in scope.in_scope:
                add(w.work_item_id, f"touches {tag!r}, which is not in scope")
    return out


def _check_approvals(plan: Plan) -> list[Issue]:
    """High-risk items, and items a person or an outside event decides, must stop for an approval."""
    out: list[Issue] = []
    for w in plan.work_items:
        if w.approval_required:
            continue
        if w.risk_level is RiskLevel.HIGH:
            why = "is high risk"
        elif w.task_type in OUTSIDE_TASK_TYPES:
            why = f"is a {w.task_type.value} item (decided outside the run, never by a model)"
        else:
            continue
        out.append(
            Issue(
                code=IssueCode.MISSING_APPROVAL,
                work_item_id=w.work_item_id,
                message=f"{w.work_item_id} {why} but does not require approval",
            )
        )
    return out


def _check_budget(plan: Plan, budget: RemainingBudget | None, completed: Collection[str]) -> list[Issue]:
    if budget is None:
        return []
    done = set(completed)
    need = total_cost(w for w in plan.work_items if w.work_item_id not in done)
    return [
        Issue(
            code=IssueCode.BUDGET_INFEASIBLE,
            work_item_id=None,
            message=f"estimated {name} {needed} exceeds the remaining {left}",
        )
        for name, needed, left in budget.shortfalls(need)
    ]


# --------------------------------------------------------------------------- cycles


def dependency_cycles(plan: Plan) -> list[list[str]]:
    """One concrete cycle per strongly connected component, e.g. ``["a", "b", "a"]``.

    Unknown dependencies are ignored here (they are reported on their own); duplicate ids are merged.
    Each cycle starts at the component's first item in plan order, so output is deterministic.
    """
    graph: dict[str, list[str]] = {}
    for w in plan.work_items:
        graph.setdefault(w.work_item_id, []).extend(w.dependencies)
    graph = {k: [d for d in dict.fromkeys(v) if d in graph] for k, v in graph.items()}
    order = {k: i for i, k in enumerate(graph)}
    cycles: list[list[str]] = []
    for component in _strongly_connected(graph):
        start = min(component, key=order.__getitem__)
        if len(component) > 1 or start in graph[start]:
            cycles.append(_cycle_through(start, set(component), graph))
    cycles.sort(key=lambda c: order[c[0]])
    return cycles


def _strongly_connected(graph: dict[str, list[str]]) -> list[list[str]]:
    """Tarjan's algorithm with an explicit stack instead of recursion."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)

    for root in graph:
        if root in index:
            continue
        visit(root)
        work: list[tuple[str, int]] = [(root, 0)]
        while work:
            node, i = work[-1]
            successors = graph[node]
            if i < len(successors):
                work[-1] = (node, i + 1)
                nxt = successors[i]
                if nxt not in index:
                    visit(nxt)
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(component)
    return components


def _cycle_through(start: str, members: set[str], graph: dict[str, list[str]]) -> list[str]:
    """Shortest cycle from ``start`` back to itself inside one strongly connected component (BFS)."""
    parent: dict[str, str | None] = {start: None}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        if start in graph[node]:
            path = [node]
            while (prev := parent[path[-1]]) is not None:
                path.append(prev)
            path.reverse()
            return [*path, start]
        for nxt in graph[node]:
            if nxt in members and nxt not in parent:
                parent[nxt] = node
                queue.append(nxt)
    raise AssertionError(f"{start} is in a strongly connected component but on no cycle")  # pragma: no cover
