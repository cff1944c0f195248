"""The PostgreSQL store's base: the pool and its borrowed connections (driver errors become StoreErrors),
migrations under an advisory lock, the integrity check, and the lookups every concern shares."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import sql as pg_sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import ConnectionPool, PoolClosed, PoolTimeout

from stateward.core.errors import ErrorCode, RunNotFoundError, StoreError, UserError
from stateward.core.state import RunState
from stateward.store import _pg_direct
from stateward.store import _pg_sql as q
from stateward.store._pg_check import DEFAULT_IDLE_S, IdleCheck
from stateward.store._pg_conns import Connections, Lent
from stateward.store.base import PayloadLimits
from stateward.store.migrations import POSTGRES_MIGRATIONS
from stateward.store.parts import PartCache, referenced

Conn = psycopg.Connection[tuple[Any, ...]]


_FORK_CACHE = 10_000  # runs whose lineage one store object remembers


_UNREACHABLE = (psycopg.OperationalError, psycopg.InterfaceError, PoolTimeout, PoolClosed)


def first_line(exc: BaseException) -> str:
    """The first line of a driver error, white space folded: what a StoreError's message quotes."""
    text = " ".join(str(exc).split("\n")[0].split())
    return text or type(exc).__name__


def _configure(conn: Conn) -> None:
    """Every pooled session reports times in UTC, like the SQLite store, and has the step statements
    prepared (store/_pg_direct.py)."""
    conn.execute("SET TIME ZONE 'UTC'")
    _pg_direct.prepare(conn)


def _both(first: Callable[[Conn], None], then: Callable[[Conn], None]) -> Callable[[Conn], None]:
    def configure(conn: Conn) -> None:
        first(conn)
        then(conn)

    return configure


def execute(
    cursor: psycopg.RawCursor[tuple[Any, ...]], statement: q.Positional, params: dict[str, Any]
) -> psycopg.RawCursor[tuple[Any, ...]]:
    """``statement`` with its ``$n`` placeholders sent as they are (see ``_pg_sql.Positional``)."""
    return cursor.execute(statement.sql, statement.values(params))


class _Borrowed:
    """``with`` a connection the store lends (and takes back), driver errors turned into StoreErrors: a
    class rather than a generator, as it wraps every call (a few µs less per call)."""

    __slots__ = ("lent", "store")

    def __init__(self, store: PostgresBase):
        self.store = store

    def __enter__(self) -> Lent:
        try:
            self.lent = self.store._conns.take()
        except _UNREACHABLE as exc:
            raise self.store._unavailable(exc) from exc
        return self.lent

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        self.store._conns.give(self.lent)
        if exc is None or not isinstance(exc, psycopg.Error | PoolTimeout | PoolClosed):
            return
        if isinstance(exc, _UNREACHABLE):
            raise self.store._unavailable(exc) from exc
        raise StoreError(
            f"PostgreSQL store at {self.store.where}: {first_line(exc)}", code=ErrorCode.STORE_ERROR
        ) from exc


def pipeline(conn: Conn) -> contextlib.AbstractContextManager[Any]:
    """Statements queued and sent together, waiting only where a result is read (libpq >= 14)."""
    return conn.pipeline() if psycopg.Pipeline.is_supported() else contextlib.nullcontext()


class PostgresBase:
    """The pool, migrations and the lookups every concern shares; a PostgresStore is this plus one mixin
    per concern (store/postgres/__init__.py). Thread-safe: each call borrows a connection (the one it last
    used, from the store's own stack in front of its pool: store/_pg_conns.py); every write is one transaction."""

    _PLACEHOLDER = "%s"

    _CLAIM_LOCK = " FOR UPDATE OF d SKIP LOCKED"

    def __init__(
        self,
        url: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        connect_timeout: float = 10.0,
        create: bool = True,
        limits: PayloadLimits | None = None,
        check_idle_s: float = DEFAULT_IDLE_S,
        configure: Callable[[Conn], None] | None = None,
    ):
        """``limits`` caps event payloads and snapshots (default: 1 MiB and 4 MiB, or
        STATEWARD_MAX_EVENT_BYTES / STATEWARD_MAX_SNAPSHOT_BYTES). A pooled connection idle longer
        than ``check_idle_s`` is pinged before it is lent (see store/_pg_check.py). ``configure`` is
        called on every new pooled connection after the store's own settings (e.g. to trace its protocol)."""
        self.limits = limits if limits is not None else PayloadLimits.from_env()
        self._parts = PartCache()
        self._forks: dict[str, tuple[str, int] | None] = {}  # run_id -> (source, shared seq): fixed at creation
        try:
            params = conninfo_to_dict(url)
        except psycopg.Error as exc:
            raise UserError(f"not a PostgreSQL URL: {first_line(exc)}", code=ErrorCode.CONFIGURATION_ERROR) from None
        params.setdefault("connect_timeout", max(1, round(connect_timeout)))
        params.setdefault("application_name", "stateward")
        self._conninfo = make_conninfo("", **params)
        self.where = self._describe(params)
        try:
            with psycopg.connect(self._conninfo, autocommit=True) as conn:
                if not create and conn.execute(q.SCHEMA_TABLE_EXISTS).fetchone() != (True,):
                    raise StoreError(f"no stateward schema in {self.where}", code=ErrorCode.STORE_NOT_FOUND)
                self._migrate(conn)
        except psycopg.OperationalError as exc:
            raise self._unavailable(exc) from exc
        except psycopg.Error as exc:
            raise StoreError(f"cannot migrate {self.where}: {first_line(exc)}", code=ErrorCode.STORE_ERROR) from exc
        self._idle = IdleCheck(check_idle_s)
        pool_options: dict[str, Any] = {
            "min_size": min_size,
            "max_size": max_size,
            "kwargs": {"autocommit": True, "client_encoding": "UTF8"},  # what _pg_direct sends its text in
            "configure": _configure if configure is None else _both(_configure, configure),
            "check": self._idle,
            "name": f"stateward {self.where}",
            "timeout": connect_timeout,
        }
        self._conns = Connections(lambda: self._open_pool(pool_options, connect_timeout), self._idle)

    def _open_pool(self, options: dict[str, Any], connect_timeout: float) -> ConnectionPool[Conn]:
        """The pool behind the store's connections (opened again in a forked child: see store/_pg_conns.py)."""
        pool: ConnectionPool[Conn] = ConnectionPool(self._conninfo, open=False, **options)
        try:
            pool.open(wait=True, timeout=connect_timeout)
        except PoolTimeout as exc:
            pool.close()
            raise self._unavailable(exc) from exc
        return pool

    @staticmethod
    def _describe(params: dict[str, Any]) -> str:
        """Where the store is, for messages: never the password."""
        host = params.get("host") or params.get("hostaddr") or "localhost"
        port = params.get("port") or "5432"
        return f"postgresql://{host}:{port}/{params.get('dbname') or ''}"

    def _unavailable(self, exc: BaseException) -> StoreError:
        return StoreError(
            f"cannot use the PostgreSQL store at {self.where}: {first_line(exc)}",
            code=ErrorCode.STORE_UNAVAILABLE,
            details={"store": self.where},
        )

    def _lent(self) -> _Borrowed:
        """A connection in autocommit mode with the cursor kept for it (``with``); driver errors become
        StoreErrors. The store's own stack first (store/_pg_conns.py), the pool when it is empty."""
        return _Borrowed(self)

    @contextmanager
    def _conn(self) -> Iterator[Conn]:
        """As :meth:`_lent`, the connection alone (a read is one statement)."""
        with _Borrowed(self) as lent:
            yield lent.conn

    @contextmanager
    def _tx(self) -> Iterator[Conn]:
        """One transaction: committed on exit, rolled back on any error (a refused write leaves nothing)."""
        with self._conn() as conn, conn.transaction():
            yield conn

    def _migrate(self, conn: Conn) -> None:
        """Apply missing migrations in one transaction, serialised across processes by an advisory lock.

        An up-to-date database is only read, so opening never waits behind another process's lock.
        """
        up_to_date = (len(POSTGRES_MIGRATIONS),)
        if conn.execute(q.SCHEMA_TABLE_EXISTS).fetchone() == (True,) and (
            conn.execute(q.SCHEMA_VERSION).fetchone() == up_to_date
        ):
            return
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (q.MIGRATION_LOCK_KEY,))
            conn.execute(q.SCHEMA_TABLE)
            row = conn.execute(q.SCHEMA_VERSION).fetchone()
            current = int(row[0]) if row else 0
            if current > len(POSTGRES_MIGRATIONS):
                raise StoreError(
                    f"{self.where} has schema version {current}; this stateward knows {len(POSTGRES_MIGRATIONS)}",
                    code=ErrorCode.SCHEMA_TOO_NEW,
                )
            for version, script in enumerate(POSTGRES_MIGRATIONS[current:], start=current + 1):
                for statement in script:
                    conn.execute(statement)
                conn.execute(q.SCHEMA_RECORD, (version,))

    def close(self) -> None:
        self._conns.close()

    def _one(self, sql: str, run_id: str) -> tuple[Any, ...]:
        with self._conn() as conn:
            row = conn.execute(sql, (run_id,)).fetchone()
        if row is None:
            raise RunNotFoundError(f"no run {run_id!r}", details={"run_id": run_id})
        return row

    def _read_parts(self, run_id: str, refs: str | None) -> dict[str, str]:
        digests = referenced(refs)
        if not digests:
            return {}
        with self._conn() as conn:
            return {str(d): str(b) for d, b in conn.execute(q.READ_PARTS, (run_id, digests)).fetchall()}

    def _fork_of(self, run_id: str) -> tuple[str, int] | None:
        """(source, shared seq) of a fork, None for any other run; fixed at creation, so remembered."""
        if run_id in self._forks:
            return self._forks[run_id]
        with self._conn() as conn:
            row = conn.execute(q.FORK_OF, (run_id,)).fetchone()
        if row is None:
            return None  # not remembered: the run may be created later
        found = None if row[0] is None else (str(row[0]), int(row[1]))
        if len(self._forks) >= _FORK_CACHE:
            self._forks.clear()
        self._forks[run_id] = found
        return found

    def check_integrity(self) -> None:
        """A read of one row of every table of the store's schema: a page the server cannot read (SQLSTATE
        class XX, data_corrupted / index_corrupted) is STORE_CORRUPT; an unreachable server stays
        STORE_UNAVAILABLE. The server checks its own pages (checksums) as it reads them."""
        try:
            with self._conn() as conn:
                tables = [
                    str(row[0])
                    for row in conn.execute(
                        "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY tablename"
                    ).fetchall()
                ]
                for table in tables:
                    conn.execute(pg_sql.SQL("SELECT 1 FROM {} LIMIT 1").format(pg_sql.Identifier(table)))
        except StoreError as exc:
            cause = exc.__cause__
            state = getattr(cause, "sqlstate", None) or ""
            if state.startswith("XX"):
                raise StoreError(
                    f"the PostgreSQL store is damaged ({first_line(cause) if cause else exc.message})",
                    code=ErrorCode.STORE_CORRUPT,
                ) from None
            raise

    def load_run(self, run_id: str) -> RunState:
        """The run's snapshot: :class:`~stateward.store.postgres.runs.PostgresRuns` reads it (declared here for
        the concerns that read a run, e.g. an artifact's lineage)."""
        raise NotImplementedError
