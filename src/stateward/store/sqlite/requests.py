"""Requests and answers on SQLite: pending requests, their pages, and a run's pause/cancel control."""

from __future__ import annotations

import sqlite3
from typing import Any

from stateward.core.errors import ErrorCode, RunError, RunNotFoundError
from stateward.core.state import PendingRequest, RunState
from stateward.store.paging import (
    DEFAULT_PAGE_SIZE,
    REQUEST_FILTER_COLUMNS,
    RequestPage,
    decode_cursor,
    encode_cursor,
    page_size,
    request_filters,
    request_row,
)
from stateward.store.records import (
    PendingRecord,
    RequestAnswer,
)
from stateward.store.sqlite.base import SQLiteBase

_INSERT_REQUEST = (
    "INSERT INTO pending_requests(run_id, request_id, body, answer, tenant, kind, approver_role, agent)"
    " VALUES (?,?,?,NULL,?,?,?,?)"
)


def insert_request(db: sqlite3.Connection, state: RunState, opened: PendingRequest) -> None:
    """Open ``opened`` for ``state``'s run, with the copies of its run's tenant and agent its indexes order by."""
    db.execute(
        _INSERT_REQUEST,
        (
            state.run_id,
            opened.request_id,
            opened.model_dump_json(),
            state.tenant,
            opened.kind.value,
            opened.approver_role,
            state.agent.name,
        ),
    )


def close_request(db: sqlite3.Connection, run_id: str, answer: RequestAnswer) -> None:
    """Answer one open request in the step's transaction; REQUEST_NOT_OPEN if it is not open."""
    cur = db.execute(
        "UPDATE pending_requests SET answer=? WHERE run_id=? AND request_id=? AND answer IS NULL",
        (answer.model_dump_json(), run_id, answer.request_id),
    )
    if cur.rowcount != 1:
        raise RunError(
            f"request {answer.request_id} of run {run_id} is not open",
            code=ErrorCode.REQUEST_NOT_OPEN,
            details={"run_id": run_id, "request_id": answer.request_id},
        )


class SQLiteRequests(SQLiteBase):
    """:class:`~stateward.store.protocols.RequestBook` on SQLite: pending requests and controls."""

    def get_control(self, run_id: str) -> str | None:
        value = self._one("SELECT control FROM runs WHERE run_id=?", run_id)[0]
        return None if value is None else str(value)

    def set_control(self, run_id: str, control: str | None) -> None:
        with self._tx() as db:
            if db.execute("UPDATE runs SET control=? WHERE run_id=?", (control, run_id)).rowcount != 1:
                raise RunNotFoundError(f"no run {run_id!r}", details={"run_id": run_id})

    def get_request(self, run_id: str, request_id: str) -> PendingRecord | None:
        with self._lock:
            row = self._db.execute(
                "SELECT body, answer FROM pending_requests WHERE run_id=? AND request_id=?",
                (run_id, request_id),
            ).fetchone()
        return None if row is None else self._pending(run_id, row[0], row[1])

    def list_requests(self, run_id: str | None = None, open_only: bool = True) -> list[PendingRecord]:
        sql = "SELECT run_id, body, answer FROM pending_requests WHERE 1=1"
        params: list[Any] = []
        if run_id is not None:
            sql += " AND run_id=?"
            params.append(run_id)
        if open_only:
            sql += " AND answer IS NULL"
        with self._lock:
            rows = self._db.execute(sql + " ORDER BY run_id, request_id", params).fetchall()
        return [self._pending(r[0], r[1], r[2]) for r in rows]

    def page_requests(
        self,
        *,
        run_id: str | None = None,
        tenant: str | None = None,
        open_only: bool = True,
        limit: int = DEFAULT_PAGE_SIZE,
        cursor: str | None = None,
        kind: str | None = None,
        agent: str | None = None,
        role: str | None = None,
    ) -> RequestPage:
        size = page_size(limit)
        filters = request_filters(run_id, tenant, open_only, kind=kind, agent=agent, role=role)
        where: list[str] = []
        params: list[Any] = []
        if run_id is not None:
            where.append("p.run_id=?")
            params.append(run_id)
        if tenant is not None:
            where.append("p.tenant=?")  # the request's own copy of its run's tenant: its index orders the page
            params.append(tenant)
        for column in REQUEST_FILTER_COLUMNS:  # the request's own copies too, each indexed after the tenant
            if column in filters:
                where.append(f"p.{column}=?")
                params.append(filters[column])
        if open_only:
            where.append("p.answer IS NULL")
        if cursor is not None:
            where.append("(p.run_id, p.request_id) > (?, ?)")
            params += decode_cursor(cursor, "requests", filters, 2)
        sql = (
            "SELECT p.run_id, p.body, p.answer, r.tenant, p.request_id, json_extract(r.snapshot, '$.parent.run_id')"
            # CROSS JOIN keeps requests the outer loop: their index gives the order; a tenant's runs do not.
            " FROM pending_requests AS p CROSS JOIN runs AS r ON r.run_id=p.run_id"
        )
        if where:
            sql += " WHERE " + " AND ".join(where)
        with self._lock:
            rows = self._db.execute(sql + " ORDER BY p.run_id, p.request_id LIMIT ?", (*params, size + 1)).fetchall()
        more = len(rows) > size
        rows = rows[:size]
        items = [request_row(r[0], r[1], r[2], r[3], r[5]) for r in rows]
        last = rows[-1] if more else None
        return RequestPage(
            items=items, next_cursor=None if last is None else encode_cursor("requests", filters, [last[0], last[4]])
        )

    @staticmethod
    def _pending(run_id: str, body: str, answer: str | None) -> PendingRecord:
        return PendingRecord(
            run_id=run_id,
            request=PendingRequest.model_validate_json(body),
            answer=None if answer is None else RequestAnswer.model_validate_json(answer),
        )
