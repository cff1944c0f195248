"""Plan versions, patches, and work-item states derived from facts.

A plan is never edited in place: a :class:`PlanPatch` names the version it was made against, why the
plan must change (scope, facts, capabilities or constraints changed - a transient failure is retried, not
replanned), the evidence for that, and which completed work it keeps. :func:`apply_patch` produces
version + 1 or refuses with a named error. Work-item states come from recorded facts (attempts,
verification, approvals), never from a model saying "done".
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Mapping
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, ValidationError

from stateward.core.errors import ErrorCode, RunError
from stateward.planning.goal import field_errors, parse_json_document, summarize_field_errors
from stateward.planning.plan import Milestone, Plan, RemainingBudget, WorkItem


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ReplanReason(StrEnum):
    """The only reasons a plan may change. Timeouts and rate limits are handled by retry policies."""

    SCOPE_CHANGED = "SCOPE_CHANGED"
    FACTS_CHANGED = "FACTS_CHANGED"
    CAPABILITY_CHANGED = "CAPABILITY_CHANGED"
    CONSTRAINT_CHANGED = "CONSTRAINT_CHANGED"


class PlanPatch(_Frozen):
    """The only way a plan changes: a new version from a base version, with a non-transient reason and the evidence
    behind it."""

    base_version: PositiveInt
    reason: ReplanReason
    evidence_ids: tuple[str, ...] = Field(min_length=1)
    summary: str = ""
    added_milestones: tuple[Milestone, ...] = ()
    added_items: tuple[WorkItem, ...] = ()
    changed_items: tuple[WorkItem, ...] = ()
    removed_items: tuple[str, ...] = ()
    kept_completed: tuple[str, ...] = ()


class PlanPatchError(RunError):
    """A patch was refused; the plan is unchanged.

    Codes: INVALID_PLAN_PATCH, STALE_PLAN_VERSION, SUCCEEDED_ITEM_DISCARDED, REPLAN_LIMIT.
    """

    default_code = ErrorCode.INVALID_PLAN_PATCH


def load_patch(doc: Mapping[str, Any] | str | bytes) -> PlanPatch:
    """Parse a patch document; an unknown reason (e.g. ``TIMEOUT``) is refused here."""
    data = parse_json_document(doc, PlanPatchError)
    try:
        return PlanPatch.model_validate(data)
    except ValidationError as exc:
        errors = field_errors(exc)
        raise PlanPatchError(summarize_field_errors(errors), details={"errors": errors}) from None


def apply_patch(plan: Plan, patch: PlanPatch, succeeded: Collection[str], replans_used: int, max_replans: int) -> Plan:
    """Return ``plan`` at version + 1 with the patch applied, or raise :class:`PlanPatchError`."""
    if replans_used >= max_replans:
        raise PlanPatchError(
            f"replan limit reached ({replans_used} of {max_replans} used)",
            code=ErrorCode.REPLAN_LIMIT,
            details={"replans_used": replans_used, "max_replans": max_replans},
        )
    if patch.base_version != plan.version:
        raise PlanPatchError(
            f"patch is based on version {patch.base_version}, the current plan is version {plan.version}",
            code=ErrorCode.STALE_PLAN_VERSION,
            details={"base_version": patch.base_version, "current_version": plan.version},
        )
    _check_consistent(plan, patch, set(succeeded))
    _check_keeps_succeeded(plan, patch, set(succeeded))

    changed = {w.work_item_id: w for w in patch.changed_items}
    removed = set(patch.removed_items)
    items = [changed.get(w.work_item_id, w) for w in plan.work_items if w.work_item_id not in removed]
    return Plan(
        plan_id=plan.plan_id,
        version=plan.version + 1,
        goal_id=plan.goal_id,
        milestones=(*plan.milestones, *patch.added_milestones),
        work_items=(*items, *patch.added_items),
    )


def _check_consistent(plan: Plan, patch: PlanPatch, succeeded: set[str]) -> None:
    existing = {w.work_item_id for w in plan.work_items}
    added = [w.work_item_id for w in patch.added_items]
    changed = [w.work_item_id for w in patch.changed_items]
    problems: list[str] = []
    touched = added + changed + list(patch.removed_items)
    if dupes := sorted({i for i in touched if touched.count(i) > 1}):
        problems.append(f"items listed more than once: {', '.join(dupes)}")
    if clash := sorted(set(added) & existing):
        problems.append(f"added items already exist: {', '.join(clash)}")
    if missing := sorted((set(changed) | set(patch.removed_items)) - existing):
        problems.append(f"changed or removed items do not exist: {', '.join(missing)}")
    known_milestones = {m.milestone_id for m in plan.milestones}
    if m_clash := sorted({m.milestone_id for m in patch.added_milestones} & known_milestones):
        problems.append(f"added milestones already exist: {', '.join(m_clash)}")
    if false_keep := sorted(set(patch.kept_completed) - (succeeded & existing)):
        problems.append(f"kept items are not succeeded items of this plan: {', '.join(false_keep)}")
    if problems:
        raise PlanPatchError("; ".join(problems), details={"problems": problems})


def _check_keeps_succeeded(plan: Plan, patch: PlanPatch, succeeded: set[str]) -> None:
    """Completed work is never thrown away or redefined by a replan; the patch must keep it explicitly."""
    done = succeeded & {w.work_item_id for w in plan.work_items}
    touched = done & ({w.work_item_id for w in patch.changed_items} | set(patch.removed_items))
    unkept = done - set(patch.kept_completed)
    bad = sorted(touched | unkept)
    if bad:
        raise PlanPatchError(
            f"patch would change, drop or not keep succeeded work items: {', '.join(bad)}",
            code=ErrorCode.SUCCEEDED_ITEM_DISCARDED,
            details={"work_item_ids": bad},
        )


# --------------------------------------------------------------------------- states from facts


class WorkItemState(StrEnum):
    """A work item's state, derived from recorded facts on every decision (never set by a model)."""

    PENDING = "PENDING"
    READY = "READY"
    RUNNING = "RUNNING"
    RETRY_WAIT = "RETRY_WAIT"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    BLOCKED = "BLOCKED"
    WAITING_FOR_APPROVAL = "WAITING_FOR_APPROVAL"
    CANCELLED = "CANCELLED"


class AttemptOutcome(StrEnum):
    """How one attempt of a work item ended, as the runtime recorded it."""

    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"  # produced output; the item succeeds only once that output is verified
    FAILED = "FAILED"


class AttemptFact(_Frozen):
    """One recorded attempt of a work item: its id, the hash of what it was given, the tool calls it made (by
    their evidence ids), its outcome and, when it failed, the error class."""

    outcome: AttemptOutcome
    error_class: str | None = None  # e.g. TIMEOUT, RATE_LIMITED, VERIFICATION_FAILED
    attempt_id: str | None = None  # ``W06#2``: the item's second attempt (None on records older than ids)
    input_hash: str | None = None  # the item, plan version, inputs and correction it started from
    tool_calls: tuple[str, ...] = ()  # evidence ids of the observations this attempt made


class ExecutionFacts(_Frozen):
    """What the runtime has recorded; the only input to work-item states."""

    attempts: dict[str, tuple[AttemptFact, ...]] = Field(default_factory=dict)
    verified: tuple[str, ...] = ()  # items whose output passed verification
    approved: tuple[str, ...] = ()
    cancelled: tuple[str, ...] = ()
    remaining_budget: RemainingBudget | None = None
    # Attempts a person authorised at a handoff (continue_authorized): item -> attempts it may reach. A failed
    # item under that count may run again, whatever its own retry policy says; nothing else is reset.
    authorized_attempts: dict[str, int] = Field(default_factory=dict)


_DEAD = frozenset({WorkItemState.FAILED, WorkItemState.CANCELLED, WorkItemState.BLOCKED})


def _own_state(item: WorkItem, facts: ExecutionFacts) -> WorkItemState | None:
    """The state that follows from the item's own facts, or None if it depends on its dependencies."""
    wid = item.work_item_id
    if wid in facts.cancelled:
        return WorkItemState.CANCELLED
    if wid in facts.verified:
        return WorkItemState.SUCCEEDED
    attempts = facts.attempts.get(wid, ())
    if not attempts:
        return None
    last = attempts[-1]
    if last.outcome is not AttemptOutcome.FAILED:
        return WorkItemState.RUNNING  # running, or completed and awaiting verification
    retryable = last.error_class is not None and last.error_class in item.retry_policy.retryable_errors
    if retryable and len(attempts) < item.retry_policy.max_attempts:
        return WorkItemState.RETRY_WAIT
    if len(attempts) < facts.authorized_attempts.get(wid, 0):
        return WorkItemState.RETRY_WAIT
    return WorkItemState.FAILED


def derive_states(plan: Plan, facts: ExecutionFacts) -> dict[str, WorkItemState]:
    """State of every work item (first definition wins for a duplicated id), in plan order.

    An item is READY only when every dependency SUCCEEDED, its approval (if required) is recorded and
    the remaining budget covers its estimate. A failed, cancelled or blocked dependency, an unknown
    dependency, a dependency cycle or an uncovered estimate make it BLOCKED.
    """
    items: dict[str, WorkItem] = {}
    for w in plan.work_items:
        items.setdefault(w.work_item_id, w)
    states: dict[str, WorkItemState | None] = {wid: _own_state(w, facts) for wid, w in items.items()}

    dependents: dict[str, list[str]] = {wid: [] for wid in items}
    waiting = {wid: 0 for wid in items}
    for wid, w in items.items():
        for dep in dict.fromkeys(w.dependencies):
            if dep in items:
                dependents[dep].append(wid)
                waiting[wid] += 1
    queue = deque(wid for wid, n in waiting.items() if n == 0)
    while queue:  # Kahn's order: every dependency is settled before its dependents
        wid = queue.popleft()
        if states[wid] is None:
            states[wid] = _from_dependencies(items[wid], states, facts)
        for nxt in dependents[wid]:
            waiting[nxt] -= 1
            if waiting[nxt] == 0:
                queue.append(nxt)
    # Anything still unsettled sits on or behind a cycle and can never start.
    return {wid: state or WorkItemState.BLOCKED for wid, state in states.items()}


def _from_dependencies(
    item: WorkItem, states: Mapping[str, WorkItemState | None], facts: ExecutionFacts
) -> WorkItemState:
    deps = [states.get(d) for d in item.dependencies]
    if any(s is None or s in _DEAD for s in deps):
        return WorkItemState.BLOCKED
    if any(s is not WorkItemState.SUCCEEDED for s in deps):
        return WorkItemState.PENDING
    if item.approval_required and item.work_item_id not in facts.approved:
        return WorkItemState.WAITING_FOR_APPROVAL
    if facts.remaining_budget is not None and facts.remaining_budget.shortfalls(item.estimated_cost):
        return WorkItemState.BLOCKED
    return WorkItemState.READY


def ready_items(plan: Plan, facts: ExecutionFacts) -> list[str]:
    """Work items that may start now, in plan order."""
    return [wid for wid, state in derive_states(plan, facts).items() if state is WorkItemState.READY]
