"""Requests and answers on PostgreSQL: pending requests, their pages, and a run's pause/cancel control."""

from __future__ import annotations

from typing import Any

from stateward.core.errors import ErrorCode, RunError, RunNotFoundError
from stateward.core.state import PendingRequest, RunState
from stateward.store import _pg_sql as q
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
from stateward.store.postgres.base import Conn, PostgresBase
from stateward.store.records import (
    PendingRecord,
    RequestAnswer,
)


def insert_request(conn: Conn, state: RunState, opened: PendingRequest) -> None:
    """Open ``opened`` for ``state``'s run, with the copies of its run's tenant and agent its indexes order by."""
    conn.execute(
        q.OPEN_REQUEST,
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


def close_request(conn: Conn, run_id: str, answer: RequestAnswer) -> None:
    """Answer one open request in the step's transaction; REQUEST_NOT_OPEN if it is not open."""
    closed = conn.execute(q.CLOSE_REQUEST, (answer.model_dump_json(), run_id, answer.request_id)).fetchone()
    if closed is None:
        raise RunError(
            f"request {answer.request_id} of run {run_id} is not open",
            code=ErrorCode.REQUEST_NOT_OPEN,
            details={"run_id": run_id, "request_id": answer.request_id},
        )


def _pending(run_id: str, body: str, answer: str | None) -> PendingRecord:
    return PendingRecord(
        run_id=run_id,
        request=PendingRequest.model_validate_json(body),
        answer=None if answer is None else RequestAnswer.model_validate_json(answer),
    )


class PostgresRequests(PostgresBase):
    """:class:`~stateward.store.protocols.RequestBook` on PostgreSQL: pending requests and controls."""

    def get_control(self, run_id: str) -> str | None:
        value = self._one(q.GET_CONTROL, run_id)[0]
        return None if value is None else str(value)

    def set_control(self, run_id: str, control: str | None) -> None:
        with self._conn() as conn:
            if conn.execute(q.SET_CONTROL, (control, run_id)).rowcount != 1:
                raise RunNotFoundError(f"no run {run_id!r}", details={"run_id": run_id})

    def get_request(self, run_id: str, request_id: str) -> PendingRecord | None:
        with self._conn() as conn:
            row = conn.execute(q.GET_REQUEST, (run_id, request_id)).fetchone()
        return None if row is None else _pending(run_id, row[0], row[1])

    def list_requests(self, run_id: str | None = None, open_only: bool = True) -> list[PendingRecord]:
        with self._conn() as conn:
            rows = conn.execute(q.LIST_REQUESTS, {"run_id": run_id, "open_only": open_only}).fetchall()
        return [_pending(r[0], r[1], r[2]) for r in rows]

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
        columns = tuple(column for column in REQUEST_FILTER_COLUMNS if column in filters)
        params: list[Any] = [value for value in (run_id, tenant) if value is not None]
        params += [filters[column] for column in columns]
        if cursor is not None:
            params += decode_cursor(cursor, "requests", filters, 2)
        sql = q.page_requests(
            run_id=run_id is not None,
            tenant=tenant is not None,
            open_only=bool(open_only),
            after=cursor is not None,
            columns=columns,
        )
        with self._conn() as conn:
            rows = conn.execute(sql, (*params, size + 1)).fetchall()
        more = len(rows) > size
        rows = rows[:size]
        items = [request_row(r[0], r[1], r[2], r[3], r[5]) for r in rows]
        last = rows[-1] if more else None
        return RequestPage(
            items=items, next_cursor=None if last is None else encode_cursor("requests", filters, [last[0], last[4]])
        )
