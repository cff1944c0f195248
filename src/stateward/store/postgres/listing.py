"""Listing runs on PostgreSQL: newest first, filtered, searched and paged (store/paging.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from stateward.store import _pg_sql as q
from stateward.store.paging import (
    DEFAULT_PAGE_SIZE,
    SEARCH_WINDOW,
    RunPage,
    decode_run_cursor,
    encode_cursor,
    like_escaped,
    page_size,
    run_filters,
    search_scope,
    search_term,
)
from stateward.store.postgres.base import PostgresBase
from stateward.store.records import (
    RunRow,
)


class PostgresListing(PostgresBase):
    """:class:`~stateward.store.protocols.RunListing` on PostgreSQL."""

    def list_runs(self, limit: int = 100) -> list[RunRow]:
        with self._conn() as conn:
            rows = conn.execute(q.LIST_RUNS, (limit,)).fetchall()
        return [_run_row(r) for r in rows]

    def page_runs(
        self,
        *,
        status: str | None = None,
        tenant: str | None = None,
        agent: str | None = None,
        limit: int = DEFAULT_PAGE_SIZE,
        cursor: str | None = None,
        version: str | None = None,
        search: str | None = None,
    ) -> RunPage:
        size = page_size(limit)
        filters = run_filters(status, tenant, agent, version)
        term = search_term(search)
        scope = search_scope(filters, term)
        columns = [column for column, value in filters.items() if value is not None]
        params: list[Any] = [filters[column] for column in columns]
        if cursor is not None:
            created, last_id = decode_run_cursor(cursor, scope)
            params += [datetime.fromisoformat(created), last_id]
        after = cursor is not None
        edge = None
        with self._conn() as conn:
            if term is None:
                rows = conn.execute(q.page_runs(columns, after), (*params, size + 1)).fetchall()
            else:
                pattern = like_escaped(term)
                args = (*params, SEARCH_WINDOW, f"{pattern}%", f"%{pattern}%", size + 1)
                rows = conn.execute(q.page_runs(columns, after, search=True), args).fetchall()
                if len(rows) <= size:  # a short page: go on past the window, if it was full
                    edge = conn.execute(q.runs_window_edge(columns, after), (*params, SEARCH_WINDOW - 1)).fetchone()
        more = len(rows) > size
        items = [_run_row(r) for r in rows[:size]]
        key = (
            [items[-1].created_at.isoformat(), items[-1].run_id]
            if more
            else None
            if edge is None
            else [edge[0].isoformat(), edge[1]]
        )
        return RunPage(items=items, next_cursor=None if key is None else encode_cursor("runs", scope, key))


def _run_row(r: tuple[Any, ...]) -> RunRow:
    return RunRow(
        run_id=r[0],
        tenant=r[1],
        agent=r[2],
        status=r[3],
        terminal_reason=r[4],
        last_seq=r[5],
        created_at=r[6],
        updated_at=r[7],
        lease_owner=r[8],
        agent_version=r[9],
        goal=r[10],
        forked_from=r[11],
        fork_seq=r[12],
    )
