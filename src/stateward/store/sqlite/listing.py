"""Listing runs on SQLite: newest first, filtered, searched and paged (store/paging.py)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

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
from stateward.store.records import (
    RunRow,
)
from stateward.store.sqlite.base import SQLiteBase


class SQLiteListing(SQLiteBase):
    """:class:`~stateward.store.protocols.RunListing` on SQLite."""

    _RUN_COLUMNS = (
        "run_id, tenant, agent, status, terminal_reason, last_seq, created_at, updated_at,"
        " CASE WHEN lease_expires_at > ? THEN lease_owner END, agent_version, goal, forked_from, fork_seq"
    )

    def list_runs(self, limit: int = 100) -> list[RunRow]:
        with self._lock:
            rows = self._db.execute(
                f"SELECT {self._RUN_COLUMNS} FROM runs ORDER BY created_at DESC, run_id DESC LIMIT ?",
                (time.time(), limit),
            ).fetchall()
        return [self._run_row(r) for r in rows]

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
        where = [f"{column}=?" for column, value in filters.items() if value is not None]
        params: list[Any] = [value for value in filters.values() if value is not None]
        if cursor is not None:
            where.append("(created_at, run_id) < (?, ?)")
            params += decode_run_cursor(cursor, scope)
        clause = (" WHERE " + " AND ".join(where)) if where else ""
        order = " ORDER BY created_at DESC, run_id DESC"
        if term is None:
            sql, args = f"SELECT {self._RUN_COLUMNS} FROM runs{clause}{order} LIMIT ?", [*params, size + 1]
        else:
            # The newest SEARCH_WINDOW runs past the cursor (read from runs_search alone for a tenant), then
            # the rows of the ones whose id starts with the term or whose goal holds it (LIKE: ASCII case
            # ignored, the term's wildcards escaped).
            # Only the page's keys are picked from the window (rows are read for those alone).
            scanned = f"SELECT run_id, created_at, goal FROM runs{clause}{order} LIMIT ?"
            sql = (
                f"SELECT {self._RUN_COLUMNS} FROM runs WHERE run_id IN (SELECT run_id FROM ({scanned})"
                f" WHERE run_id LIKE ? ESCAPE '\\' OR goal LIKE ? ESCAPE '\\'{order} LIMIT ?)"
                f"{order}"
            )
            pattern = like_escaped(term)
            args = [*params, SEARCH_WINDOW, f"{pattern}%", f"%{pattern}%", size + 1]
        with self._lock:
            rows = self._db.execute(sql, (time.time(), *args)).fetchall()
            edge = None
            if term is not None and len(rows) <= size:  # a short page: go on past the window, if it was full
                edge = self._db.execute(
                    f"SELECT created_at, run_id FROM runs{clause}{order} LIMIT 1 OFFSET ?", (*params, SEARCH_WINDOW - 1)
                ).fetchone()
        more = len(rows) > size
        rows = rows[:size]
        key = [rows[-1][6], rows[-1][0]] if more else None if edge is None else [edge[0], edge[1]]
        return RunPage(
            items=[self._run_row(r) for r in rows],
            next_cursor=None if key is None else encode_cursor("runs", scope, key),
        )

    @staticmethod
    def _run_row(r: tuple[Any, ...]) -> RunRow:
        return RunRow(
            run_id=r[0],
            tenant=r[1],
            agent=r[2],
            status=r[3],
            terminal_reason=r[4],
            last_seq=r[5],
            created_at=datetime.fromisoformat(r[6]),
            updated_at=datetime.fromtimestamp(r[7], UTC),
            lease_owner=r[8],
            agent_version=r[9],
            goal=r[10],
            forked_from=r[11],
            fork_seq=r[12],
        )
