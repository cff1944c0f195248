"""The run's search attributes: what a listing filters on is a visibility query, never a scan of workflows."""

from __future__ import annotations

from temporalio.common import SearchAttributeKey, SearchAttributePair, SearchAttributeUpdate, TypedSearchAttributes

from stateward.core.state import RunState

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
