"""Store fixtures: one ``backend`` fixture that runs every conformance clause on SQLite and on
PostgreSQL (the server fixtures live in ``tests/pg_fixtures.py``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from stateward.store.base import Store


# -- one fixture, both stores -------------------------------------------------------------------------
@dataclass
class Backend:
    """One store kind at one location: opens stores there and reads what the Store protocol does not expose."""

    kind: str
    location: str
    opened: list[Store] = field(default_factory=list)

    def open(self, **options: Any) -> Store:
        """A store on this database; ``options`` go to the store's constructor (e.g. ``limits``)."""
        store: Store
        if self.kind == "sqlite":
            from stateward.store.sqlite import SQLiteStore

            store = SQLiteStore(self.location, **options)
        else:
            from stateward.store.postgres import PostgresStore

            store = PostgresStore(self.location, **options)
        self.opened.append(store)
        return store

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        """Raw SQL outside any store (``?`` placeholders, rewritten for PostgreSQL)."""
        if self.kind == "sqlite":
            db = sqlite3.connect(self.location)
            try:
                with db:
                    return [tuple(r) for r in db.execute(sql, params).fetchall()]
            finally:
                db.close()
        import psycopg

        with psycopg.connect(self.location, autocommit=True) as conn:
            cur = conn.execute(sql.replace("?", "%s"), params)
            return [tuple(r) for r in cur.fetchall()] if cur.description else []

    def count(self, table: str, run_id: str) -> int:
        return int(self.query(f"SELECT count(*) FROM {table} WHERE run_id=?", run_id)[0][0])

    def schema_version(self) -> int:
        if self.kind == "sqlite":
            return int(self.query("PRAGMA user_version")[0][0])
        return int(self.query("SELECT max(version) FROM stateward_schema")[0][0])

    def set_schema_version(self, version: int) -> None:
        if self.kind == "sqlite":
            self.query(f"PRAGMA user_version={version}")
        else:
            self.query("INSERT INTO stateward_schema(version) VALUES (?)", version)

    def close_all(self) -> None:
        for store in self.opened:
            store.close()


BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "sqlite":
        made = Backend("sqlite", str(tmp_path / "conformance.db"))
    else:
        made = Backend("postgres", request.getfixturevalue("pg_url"))
    yield made
    made.close_all()


@pytest.fixture
def store(backend: Backend) -> Store:
    return backend.open()


@pytest.fixture
def open_store(backend: Backend) -> Callable[[], Store]:
    """Another store on the same database: another process, or this one after a restart."""
    return backend.open
