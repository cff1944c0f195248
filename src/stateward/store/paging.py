"""Listing runs and requests a page at a time: filters, page sizes and opaque keyset cursors.

Both stores page the same way. Runs come newest first, ordered by ``(created_at, run_id)``
descending; requests in byte order of ``(run_id, request_id)``. A cursor carries the key of the last
item of a page, so the next page starts strictly after it: runs created between two fetches never
shift a page, and every run that existed when the first page was read is listed exactly once.

A cursor is bound to the filters it was issued for; one presented with other filters, or one that is
not a cursor at all, is ``INVALID_CURSOR``. A page holds 1 to :data:`MAX_PAGE_SIZE` items
(``INVALID_PAGE_SIZE`` otherwise): nothing is listed unbounded.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from stateward.core.canonical import canonical_json, sha256_hex
from stateward.core.errors import ErrorCode, UserError
from stateward.core.state import PendingRequest, RequestKind
from stateward.core.status import RunStatus
from stateward.store.records import PendingRecord, RequestAnswer, RunRow

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000
MAX_CURSOR_CHARS = 2048
# A search (run id prefix or goal text) reads at most this many runs of the listing's order per page:
# a page of a search may hold fewer than its size, and its ``next_cursor`` goes on past what was read.
SEARCH_WINDOW = 10_000
MAX_SEARCH_CHARS = 200
GOAL_SEARCH_CHARS = 500  # the first characters of a run's goal, which a search matches


class RunPage(BaseModel):
    """One page of runs, newest first; ``next_cursor`` is None on the last page."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    items: list[RunRow]
    next_cursor: str | None = None


class RequestRow(PendingRecord):
    """A pending request with the tenant of its run, and the run that started its run (a child's parent; None
    for a root): the inbox draws a request's chain from it without loading the run."""

    tenant: str
    parent_run_id: str | None = None
    # The run's agent, version and the start of its goal, where the listing holds them (a Temporal listing reads
    # them from each workflow's memo): the inbox page then shows a row without reading its run.
    agent: str | None = None
    agent_version: str | None = None
    goal: str | None = None


class RequestPage(BaseModel):
    """One page of pending requests in ``(run_id, request_id)`` order; ``next_cursor`` is None on the last page."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    items: list[RequestRow]
    next_cursor: str | None = None


def page_size(limit: object, maximum: int = MAX_PAGE_SIZE) -> int:
    """``limit`` if it is a whole number from 1 to ``maximum``; else INVALID_PAGE_SIZE."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= maximum:
        raise UserError(
            f"a page holds 1 to {maximum} items, not {limit!r}",
            code=ErrorCode.INVALID_PAGE_SIZE,
            details={"limit": repr(limit)[:40], "max": maximum},
        )
    return limit


def run_status_filter(status: RunStatus | str | None) -> str | None:
    """A status filter as stored; a value that is no RunStatus is INVALID_FILTER (a typo lists nothing)."""
    if status is None:
        return None
    try:
        return RunStatus(status).value
    except ValueError:
        raise UserError(
            f"unknown run status {str(status)[:40]!r}; one of {', '.join(s.value for s in RunStatus)}",
            code=ErrorCode.INVALID_FILTER,
            details={"status": str(status)[:40]},
        ) from None


def _scope(kind: str, filters: Mapping[str, Any]) -> str:
    return sha256_hex(canonical_json({"kind": kind, **filters}))[:16]


def encode_cursor(kind: str, filters: Mapping[str, Any], key: list[str]) -> str:
    """An opaque cursor: the last key of a page and the filters it belongs to (URL-safe, no padding)."""
    raw = json.dumps({"s": _scope(kind, filters), "k": key}, separators=(",", ":"), ensure_ascii=False)
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str, kind: str, filters: Mapping[str, Any], arity: int) -> list[str]:
    """The key a cursor carries, if it was issued for exactly these filters; else INVALID_CURSOR."""
    try:
        if not isinstance(cursor, str) or not cursor or len(cursor) > MAX_CURSOR_CHARS:
            raise ValueError("not a cursor of this store")
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        body = json.loads(raw.decode())
        key = body["k"] if isinstance(body, dict) else None
        if not isinstance(key, list) or len(key) != arity or not all(isinstance(part, str) for part in key):
            raise ValueError("not a cursor of this store")
        if body.get("s") != _scope(kind, filters):
            raise ValueError("issued for other filters")
    except (ValueError, KeyError, TypeError, binascii.Error, UnicodeDecodeError) as exc:
        why = str(exc) if str(exc) == "issued for other filters" else "not a cursor of this store"
        raise UserError(
            f"invalid {kind} cursor: {why}; start again without a cursor",
            code=ErrorCode.INVALID_CURSOR,
            details={"kind": kind},
        ) from None
    return [str(part) for part in key]


RunFilters = dict[str, str | None]


def run_filters(
    status: RunStatus | str | None, tenant: str | None, agent: str | None, version: str | None = None
) -> RunFilters:
    """The filters of a run listing as the stores apply them (column -> value; None: any)."""
    filters = {"status": run_status_filter(status), "tenant": tenant, "agent": agent}
    if version is not None:  # only when given: the cursors of listings without it stay valid
        filters["agent_version"] = version
    return filters


def search_term(search: str | None) -> str | None:
    """A search as the stores match it (surrounding space dropped; empty: none); over
    MAX_SEARCH_CHARS characters is INVALID_FILTER."""
    term = (search or "").strip()
    if len(term) > MAX_SEARCH_CHARS:
        raise UserError(
            f"a search is at most {MAX_SEARCH_CHARS} characters, not {len(term)}",
            code=ErrorCode.INVALID_FILTER,
            details={"search_chars": len(term)},
        )
    return term or None


def search_scope(filters: RunFilters, term: str | None) -> RunFilters:
    """What a cursor of a (possibly searched) listing is bound to."""
    return filters if term is None else {**filters, "search": term}


def goal_excerpt(goal: str) -> str:
    """The start of a goal as a run's row keeps it for search: GOAL_SEARCH_CHARS characters, a NUL or a lone
    surrogate (which no text column stores) replaced by U+FFFD (the snapshot keeps the goal exactly)."""
    cut = goal[:GOAL_SEARCH_CHARS]
    return "".join("\ufffd" if ch == "\x00" or "\ud800" <= ch <= "\udfff" else ch for ch in cut)


def like_escaped(text: str) -> str:
    """``text`` for a LIKE pattern with ``ESCAPE '\\'``: its ``%``, ``_`` and ``\\`` match themselves."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def request_filters(
    run_id: str | None,
    tenant: str | None,
    open_only: bool,
    *,
    kind: str | None = None,
    agent: str | None = None,
    role: str | None = None,
) -> dict[str, Any]:
    """The filters of a request listing; ``kind``, ``agent`` and ``role`` (the request's approver role) only
    when given, so the cursors of listings without them stay valid. An unknown kind is INVALID_FILTER."""
    filters: dict[str, Any] = {"run_id": run_id, "tenant": tenant, "open_only": bool(open_only)}
    if kind is not None:
        try:
            filters["kind"] = RequestKind(kind).value
        except ValueError:
            raise UserError(
                f"unknown request kind {str(kind)[:40]!r}; one of {', '.join(k.value for k in RequestKind)}",
                code=ErrorCode.INVALID_FILTER,
                details={"kind": str(kind)[:40]},
            ) from None
    if agent is not None:
        filters["agent"] = agent
    if role is not None:
        filters["approver_role"] = role
    return filters


# The request columns an equality filter names, in the order the stores add their conditions.
REQUEST_FILTER_COLUMNS = ("kind", "agent", "approver_role")


def decode_run_cursor(cursor: str, filters: RunFilters) -> list[str]:
    """``[created_at, run_id]`` of the last run of a page (its time checked, so every store refuses alike)."""
    key = decode_cursor(cursor, "runs", filters, 2)
    try:
        datetime.fromisoformat(key[0])
    except ValueError:
        raise UserError(
            "invalid runs cursor: not a cursor of this store; start again without a cursor",
            code=ErrorCode.INVALID_CURSOR,
            details={"kind": "runs"},
        ) from None
    return key


def request_row(run_id: str, body: str, answer: str | None, tenant: str, parent: str | None = None) -> RequestRow:
    return RequestRow(
        run_id=run_id,
        request=PendingRequest.model_validate_json(body),
        answer=None if answer is None else RequestAnswer.model_validate_json(answer),
        tenant=tenant,
        parent_run_id=parent,
    )
