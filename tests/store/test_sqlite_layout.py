"""SQLite-only behaviour: what a file written by another build of the schema gets, and key reuse."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from stateward.core.errors import RunNotFoundError, StoreError
from stateward.core.events import EventType, NewEvent
from stateward.core.state import AgentRef, RunState
from stateward.store.migrations import SQLITE_MIGRATIONS
from stateward.store.records import StepWrite
from stateward.store.sqlite import SQLiteStore


def _state(run_id: str) -> RunState:
    return RunState(run_id=run_id, agent=AgentRef(name="tests:layout"), goal="layout")


def test_a_file_with_the_version_but_an_older_layout_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE runs (run_id TEXT PRIMARY KEY, snapshot TEXT NOT NULL)")
    db.execute("CREATE TABLE events (run_id TEXT NOT NULL, seq INTEGER NOT NULL, payload TEXT NOT NULL)")
    db.execute("INSERT INTO runs VALUES ('run_old', '{}')")
    db.execute(f"PRAGMA user_version={len(SQLITE_MIGRATIONS)}")
    db.commit()
    db.close()
    with pytest.raises(StoreError) as err:
        SQLiteStore(path)
    assert err.value.code == "SCHEMA_MISMATCH"
    db = sqlite3.connect(path)  # and nothing in the file was touched
    assert db.execute("SELECT run_id FROM runs").fetchall() == [("run_old",)]
    db.close()


def test_a_run_deleted_by_hand_does_not_hand_its_key_to_the_next_run(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    try:
        store.create_run(_state("run_gone"), [NewEvent(type=EventType.RUN_STARTED)])
        store.commit_step("run_gone", 1, StepWrite(state=_state("run_gone")))  # the key is cached now
        with sqlite3.connect(tmp_path / "runs.db") as db:  # someone cleans up with the sqlite3 shell
            db.execute("DELETE FROM event_batches")
            db.execute("DELETE FROM runs")
        store.create_run(_state("run_new"), [NewEvent(type=EventType.RUN_STARTED)])
        late = StepWrite(state=_state("run_gone"), events=[NewEvent(type=EventType.TOOL_ATTEMPTED)])
        with pytest.raises(RunNotFoundError):  # the stale key finds no run; it never writes run_new's row
            store.commit_step("run_gone", 1, late)
        assert store.last_seq("run_new") == 1 and [e.seq for e in store.read_events("run_new")] == [1]
        assert store.load_run("run_new").run_id == "run_new"
    finally:
        store.close()


def test_create_false_refuses_a_missing_file_without_creating_it(tmp_path: Path) -> None:
    with pytest.raises(StoreError) as err:
        SQLiteStore(tmp_path / "typo.db", create=False)
    assert err.value.code == "STORE_NOT_FOUND"
    assert list(tmp_path.iterdir()) == []


def test_create_false_opens_an_existing_store(tmp_path: Path) -> None:
    SQLiteStore(tmp_path / "s.db").close()
    store = SQLiteStore(tmp_path / "s.db", create=False)
    assert store.list_runs() == []
    store.close()


def test_another_applications_database_is_refused_and_untouched(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE runs (id INTEGER PRIMARY KEY, note TEXT)")  # even a table called runs
    db.commit()
    db.close()
    before = path.read_bytes()
    with pytest.raises(StoreError) as err:
        SQLiteStore(path)
    assert err.value.code == "NOT_A_STATEWARD_STORE"
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.db"]


def test_a_file_that_is_not_sqlite_is_store_corrupt_and_the_connection_is_closed(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_bytes(b"plain text, not a database " * 200)
    with pytest.raises(StoreError) as err:
        SQLiteStore(path)
    assert err.value.code == "STORE_CORRUPT"
    assert path.read_bytes() == b"plain text, not a database " * 200


@pytest.mark.parametrize(
    "listing",
    [
        {},
        {"tenant": "acme"},
        {"agent": "tests:layout", "status": "RUNNING"},
        {"status": "WAITING_FOR_USER"},
    ],
)
def test_a_page_of_runs_reads_an_index_in_order_never_sorts_every_run(tmp_path: Path, listing: dict[str, str]) -> None:
    """The first and later pages are index range scans: their cost does not grow with the number of runs."""
    store = SQLiteStore(tmp_path / "runs.db")
    try:
        for i in range(3):
            store.create_run(_state(f"run_{i}"), [NewEvent(type=EventType.RUN_STARTED)])
        statements: list[str] = []
        store._db.set_trace_callback(statements.append)  # the SQL the store runs, values bound
        cursor = store.page_runs(limit=1, **listing).next_cursor
        store.page_runs(limit=1, cursor=cursor, **listing)
        store.page_requests(tenant="acme", limit=1)
        store._db.set_trace_callback(None)
        selects = [s for s in statements if s.lstrip().upper().startswith("SELECT")]
        assert len(selects) == 3
        for sql in selects:
            plan = " | ".join(row[3] for row in store._db.execute("EXPLAIN QUERY PLAN " + sql))
            assert "TEMP B-TREE" not in plan and "USING INDEX" in plan, plan
            assert "SCAN runs" not in plan or "USING INDEX runs_by_created" in plan, plan
    finally:
        store.close()
