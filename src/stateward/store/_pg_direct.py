"""A common step's one statement sent straight through libpq, prepared on each connection beforehand.

psycopg's cursor spends, per call, more client CPU than the step's own serialization: the query's
conversion, a dumper per value, the generator-driven wait for the reply, the result's objects. A
common step needs none of that. Its statements (``_pg_sql.prepare_steps``: every variant, a handful)
are prepared once, when the pool opens a connection; a step then sends its values as text in one
``PQexecPrepared`` (Bind, Execute, Sync: one round trip, the GIL released while it waits) and reads
one answer, whether the guard matched a row. Everything else the store sends goes through psycopg.

Should a connection lack the statements (their preparation failed, or the session was reset), the
caller is told so and sends the statement through psycopg instead: nothing has been executed then.
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg
from psycopg import pq
from psycopg.errors import error_from_result

from stateward.store._pg_sql import Positional, prepare_steps

log = logging.getLogger("stateward.store")

_ROWS = pq.ExecStatus.TUPLES_OK
_OK = pq.ConnStatus.OK
_NOT_PREPARED = b"26000"  # invalid_sql_statement_name: no such prepared statement in this session


def prepare(conn: psycopg.Connection[Any]) -> None:
    """Prepare every step statement on a new connection; a failure only costs the fast path."""
    result = conn.pgconn.exec_(prepare_steps())
    if result.status != pq.ExecStatus.COMMAND_OK:
        log.warning("step statements not prepared: %s", result.get_error_message(conn.info.encoding))


def _text(value: Any) -> bytes | None:
    if value is None:
        return None
    if type(value) is str:
        return value.encode()
    if type(value) is int:
        return b"%d" % value
    if type(value) is float:
        return repr(value).encode()  # the shortest text that reads back as the same double
    raise TypeError(f"no text form for a step parameter of type {type(value).__name__}")


def run(conn: psycopg.Connection[Any], statement: Positional, values: tuple[Any, ...]) -> int | None:
    """Rows ``statement`` (prepared) returned for ``values``; None if it is not prepared on ``conn`` (then
    nothing was executed). A failure raises psycopg's error for it, as a cursor would."""
    pgconn = conn.pgconn
    result = pgconn.exec_prepared(statement.name, [_text(v) for v in values])  # type: ignore[misc]  # None: NULL, as psycopg sends it
    if result.status == _ROWS:
        return result.ntuples
    if pgconn.status != _OK:
        raise psycopg.OperationalError(result.get_error_message(conn.info.encoding) or "the connection was lost")
    if result.error_field(pq.DiagnosticField.SQLSTATE) == _NOT_PREPARED:
        return None
    raise error_from_result(result, encoding=conn.info.encoding)
