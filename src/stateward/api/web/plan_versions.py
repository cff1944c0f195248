"""Earlier versions of a plan run's plan, read back from the run's checkpoints.

A ``PLAN_RECORDED`` event carries only a summary of the plan, but every step that records one keeps its
snapshot as a checkpoint (``CheckpointReason.PLAN_CHANGE``), and every later checkpoint's memo holds the
plan then in force. So version N is drawn from the last checkpoint whose plan is version N: its items and
edges as recorded, each item's state as it was when version N was superseded. Nothing new is recorded.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stateward.api.web.dag import plan_of
from stateward.core.errors import ErrorCode, UserError
from stateward.core.inert import inert
from stateward.planning.patch import WorkItemState
from stateward.planning.plan import Plan
from stateward.store.base import Store

MAX_SCANNED_CHECKPOINTS = 1000  # the checkpoints read to find an earlier version (the store's own default)
MAX_LISTED_VERSIONS = 50  # the newest versions the page offers to pick from


def parse_version(raw: str | None) -> int | None:
    """``?plan_version=`` as a number, None when absent or empty (the current plan); UNKNOWN_PLAN_VERSION
    for anything but a whole number."""
    if raw is None or not raw.strip():
        return None
    text = raw.strip()
    if not (text.isascii() and text.isdigit()) or len(text) > 9:
        raise UserError(
            f"plan_version must be a whole number, not {inert(text, 40)!r}", code=ErrorCode.UNKNOWN_PLAN_VERSION
        )
    return int(text)


def listed_versions(current: int) -> list[int]:
    """The versions the page links to, newest last: a patch makes version + 1, so they run up to the current."""
    return list(range(max(1, current - MAX_LISTED_VERSIONS + 1), current + 1))


def plan_at_version(
    store: Store, run_id: str, memo: Mapping[str, Any], version: int
) -> tuple[Plan, dict[str, WorkItemState]]:
    """Version ``version`` of the run's plan and its items' states when it was superseded (the current
    plan's states for the current version); UNKNOWN_PLAN_VERSION for a run without a plan, a version it
    never had, or one no checkpoint within the scanned ones recorded."""
    current = plan_of(memo)
    if current is None:
        raise UserError("this run has no plan, so no plan version to show", code=ErrorCode.UNKNOWN_PLAN_VERSION)
    if version == current[0].version:
        return current
    if not 1 <= version < current[0].version:
        raise UserError(
            f"plan version {version} is not one of this run's: the current plan is version {current[0].version}",
            code=ErrorCode.UNKNOWN_PLAN_VERSION,
        )
    found = None
    for checkpoint in store.checkpoints_of(run_id, MAX_SCANNED_CHECKPOINTS):
        drawn = plan_of(checkpoint.state.memo)
        if drawn is None:
            continue
        if drawn[0].version == version:
            found = drawn  # a later checkpoint of the same version: the states it reached
        elif drawn[0].version > version and found is not None:
            break
    if found is None:
        raise UserError(
            f"plan version {version} is not in this run's recorded checkpoints", code=ErrorCode.UNKNOWN_PLAN_VERSION
        )
    return found


__all__ = ["MAX_LISTED_VERSIONS", "MAX_SCANNED_CHECKPOINTS", "listed_versions", "parse_version", "plan_at_version"]
