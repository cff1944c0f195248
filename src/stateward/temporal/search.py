"""The run's search attributes: what a listing filters on is a visibility query, never a scan of workflows."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from temporalio.common import SearchAttributeKey, SearchAttributePair, SearchAttributeUpdate, TypedSearchAttributes

from stateward.core.state import RunState
from stateward.store.paging import GOAL_SEARCH_CHARS, RequestRow
from stateward.store.records import PendingRecord, RunRow

STATUS = SearchAttributeKey.for_keyword("StatewardStatus")
TENANT = SearchAttributeKey.for_keyword("StatewardTenant")
AGENT = SearchAttributeKey.for_keyword("StatewardAgent")
VERSION = SearchAttributeKey.for_keyword("StatewardVersion")
PENDING_KIND = SearchAttributeKey.for_keyword("StatewardPendingKind")
APPROVER_ROLE = SearchAttributeKey.for_keyword("StatewardApproverRole")
KEYS = (STATUS, TENANT, AGENT, VERSION, PENDING_KIND, APPROVER_ROLE)
NO_PENDING = "none"  # a keyword attribute cannot be unset by a query: "none" stands for no open request


def _values(state: RunState) -> list[tuple[SearchAttributeKey[str], str]]:
    pending = state.pending
    role = None if pending is None else pending.approver_role
    return [
        (STATUS, state.status.value),
        (TENANT, state.tenant),
        (AGENT, state.agent.name),
        (VERSION, state.agent.version or ""),
        (PENDING_KIND, NO_PENDING if pending is None else pending.kind.value),
        (APPROVER_ROLE, role or NO_PENDING),
    ]


def updates(state: RunState) -> list[SearchAttributeUpdate[str]]:
    """The attribute values ``state`` has, as a workflow upserts them."""
    return [key.value_set(value) for key, value in _values(state)]


def attributes(state: RunState) -> TypedSearchAttributes:
    """The attributes a run starts with."""
    return TypedSearchAttributes([SearchAttributePair(key, value) for key, value in _values(state)])


def dev_server_flags() -> list[str]:
    """``--search-attribute`` flags that register the keys on ``temporal server start-dev``."""
    return [flag for key in KEYS for flag in ("--search-attribute", f"{key.name}=Keyword")]


def memo(
    state: RunState, requests: Iterable[PendingRecord], created_at: datetime, updated_at: datetime, last_seq: int
) -> dict[str, Any]:
    """The memo a listing reads with each workflow (no query, no worker needed): the run's row and its open
    requests, as the stores' listings return them, and its state (what a read of the run's state returns: as
    committed, with no worker up)."""
    parent = None if state.parent is None else state.parent.run_id
    row = RunRow(
        run_id=state.run_id,
        tenant=state.tenant,
        agent=state.agent.name,
        status=state.status.value,
        terminal_reason=state.terminal_reason,
        last_seq=last_seq,
        created_at=created_at,
        updated_at=updated_at,
        agent_version=state.agent.version,
        goal=state.goal[:GOAL_SEARCH_CHARS],
        forked_from=None if state.lineage is None else state.lineage.forked_from,
        fork_seq=None if state.lineage is None else state.lineage.at_seq,
    )
    open_requests = [
        RequestRow(
            run_id=r.run_id,
            request=r.request,
            tenant=state.tenant,
            parent_run_id=parent,
            agent=state.agent.name,
            agent_version=state.agent.version,
            goal=row.goal,
        ).model_dump(mode="json")
        for r in requests
        if r.is_open
    ]
    return {"row": row.model_dump(mode="json"), "requests": open_requests, "state": state.model_dump(mode="json")}
