"""What only the PostgreSQL store has to show: the URL route, the database clock, SKIP LOCKED claims,
clear errors when the server is away, and pooled connections that survive a server-side disconnect."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from stateward.core.errors import RunError, StoreError, UserError
from stateward.core.events import EventType, NewEvent
from stateward.core.state import AgentRef, RunState
from stateward.store.backends import open_store
from stateward.store.postgres import PostgresStore
from stateward.store.records import Lease, StepWrite


def _state(run_id: str) -> RunState:
    return RunState(run_id=run_id, agent=AgentRef(name="tests.store:agent"), goal="pg")


def _start(store: PostgresStore, run_id: str) -> None:
    store.create_run(_state(run_id), [NewEvent(type=EventType.RUN_STARTED)])


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def pg(pg_url: str) -> Iterator[PostgresStore]:
    store = PostgresStore(pg_url)
    yield store
    store.close()


# -- opening --------------------------------------------------------------------------------------------
@pytest.mark.postgres
@pytest.mark.parametrize("scheme", ["postgresql://", "postgres://"])
def test_open_store_routes_both_url_schemes_to_postgres(pg_url: str, scheme: str) -> None:
    store = open_store(scheme + pg_url.split("://", 1)[1])
    try:
        assert isinstance(store, PostgresStore)
    finally:
        store.close()


@pytest.mark.postgres
def test_create_false_refuses_a_schema_without_stateward_tables(pg_url: str) -> None:
    with pytest.raises(StoreError) as err:
        PostgresStore(pg_url, create=False)
    assert err.value.code == "STORE_NOT_FOUND"
    PostgresStore(pg_url).close()  # creates the schema
    store = PostgresStore(pg_url, create=False)
    assert store.list_runs() == []
    store.close()


@pytest.mark.slow
def test_the_sqlite_default_never_imports_psycopg(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from stateward.store.backends import open_store\n"
        f"open_store({str(tmp_path / 'x.db')!r}).close()\n"
        "import stateward.runtime.worker, stateward.cli.main\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('psycopg'))\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_an_unreachable_server_is_store_unavailable_without_the_password() -> None:
    url = f"postgresql://stateward:s3cret@127.0.0.1:{_closed_port()}/runs"
    with pytest.raises(StoreError) as err:
        PostgresStore(url, connect_timeout=2)
    assert err.value.code == "STORE_UNAVAILABLE"
    assert "127.0.0.1" in err.value.message and "s3cret" not in str(err.value)
    assert "\n" not in err.value.message


def test_a_malformed_url_is_a_configuration_error() -> None:
    with pytest.raises(UserError) as err:
        PostgresStore("postgresql://host/db?no_such_option=1")
    assert err.value.code == "CONFIGURATION_ERROR"


@pytest.mark.slow
def test_the_cli_reports_an_unreachable_store_in_one_line() -> None:
    url = f"postgresql://stateward@127.0.0.1:{_closed_port()}/runs?connect_timeout=2"
    proc = subprocess.run(
        [sys.executable, "-m", "stateward.cli.main", "runs", "list", "--db", url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert proc.stderr.startswith("error: STORE_UNAVAILABLE: cannot use the PostgreSQL store at postgresql://127.0.0.1")
    assert "Traceback" not in proc.stderr and "psycopg" not in proc.stderr


# -- the database clock ---------------------------------------------------------------------------------
@pytest.mark.postgres
@pytest.mark.parametrize("skew_s", [3600.0, -3600.0])
def test_leases_follow_the_database_clock_not_the_workers(
    pg: PostgresStore, monkeypatch: pytest.MonkeyPatch, skew_s: float
) -> None:
    """A worker whose clock is an hour off neither steals a live lease nor keeps a dead one."""
    _start(pg, "run_live")
    _start(pg, "run_dead")
    pg.acquire_lease("run_live", "w1", ttl_s=30)
    dead = pg.acquire_lease("run_dead", "w1", ttl_s=0.05)
    time.sleep(0.15)
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + skew_s)

    with pytest.raises(RunError) as held:
        pg.acquire_lease("run_live", "skewed", ttl_s=30)
    assert held.value.code == "LEASE_HELD"
    taken = pg.acquire_lease("run_dead", "skewed", ttl_s=30)
    assert taken.version == dead.version + 1
    assert pg.claim_next("skewed", ttl_s=30) is None
    with pytest.raises(RunError) as unleased:
        pg.commit_step("run_live", 1, StepWrite(state=_state("run_live")))
    assert unleased.value.code == "LEASE_HELD"
    assert abs(taken.expires_at - (real_time() + 30)) < 5


# -- claims on many machines ----------------------------------------------------------------------------
@pytest.mark.postgres
def test_claim_next_skips_a_run_another_claimer_has_locked(pg: PostgresStore, pg_url: str) -> None:
    """The oldest run is locked by a claimer mid-transaction: the next claim takes the next run at once."""
    _start(pg, "run_1")
    _start(pg, "run_2")
    claimed: list[Lease | None] = []
    with psycopg.connect(pg_url) as other:
        other.execute("SELECT run_id FROM runs WHERE run_id='run_1' FOR UPDATE")
        worker = threading.Thread(target=lambda: claimed.append(pg.claim_next("w", ttl_s=30)), daemon=True)
        worker.start()
        worker.join(timeout=10)
        assert not worker.is_alive(), "claim_next waited for a locked row instead of skipping it"
        other.rollback()
    assert [c.run_id if c else None for c in claimed] == ["run_2"]


# -- connections ----------------------------------------------------------------------------------------
@pytest.mark.postgres
def test_the_pool_replaces_connections_the_server_dropped(pg_url: str) -> None:
    store = PostgresStore(pg_url + "&application_name=sw_dropped", max_size=2)
    try:
        _start(store, "run_1")
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name='sw_dropped'")
        time.sleep(0.1)
        assert store.last_seq("run_1") == 1
    finally:
        store.close()


@pytest.mark.postgres
def test_json_is_stored_as_text_that_casts_to_jsonb(pg: PostgresStore, pg_url: str) -> None:
    _start(pg, "run_1")
    with psycopg.connect(pg_url) as conn:
        row = conn.execute("SELECT snapshot::jsonb->>'goal', snapshot FROM runs").fetchone()
    assert row is not None and row[0] == "pg"
    assert RunState.model_validate_json(row[1]) == _state("run_1")


# -- what a step costs the server (schema 7) ------------------------------------------------------------
def _table_counts(pg_url: str, table: str, expected_updates: int) -> tuple[int, int, int]:
    """(inserts, updates, HOT updates) of ``table`` once every closed store's backend has reported them
    (a backend sends its statistics as it exits)."""
    deadline = time.monotonic() + 20
    while True:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT n_tup_ins, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relid = %s::regclass",
                (table,),
            ).fetchone()
        assert row is not None
        if row[1] >= expected_updates or time.monotonic() > deadline:
            return int(row[0]), int(row[1]), int(row[2])
        time.sleep(0.1)


@pytest.mark.postgres
def test_a_workers_step_rewrites_the_run_row_in_place_and_appends_one_row(pg_url: str) -> None:
    """Under a lease a step changes no indexed column of runs, so PostgreSQL updates the row without
    touching any of its indexes (HOT), and the step's events are one row, however many there are."""
    store = PostgresStore(pg_url)
    _start(store, "run_1")
    lease = store.acquire_lease("run_1", "w", ttl_s=30)
    seq = 1
    for i in range(20):
        state = _state("run_1").model_copy(update={"facts": {"step": i}})
        events = [NewEvent(type=EventType.TOOL_ATTEMPTED, payload={"n": n}) for n in range(3)]
        seq = store.commit_step("run_1", seq, StepWrite(state=state, events=events), lease)
    store.close()
    _, updates, hot = _table_counts(pg_url, "runs", 21)
    assert (updates, hot) == (21, 21)  # the lease and 20 steps
    inserted, _, _ = _table_counts(pg_url, "event_batches", 0)
    assert inserted == 21  # the run's first event, then one row per step
    reopened = PostgresStore(pg_url)
    try:
        assert [e.seq for e in reopened.read_events("run_1", after_seq=55, limit=3)] == [56, 57, 58]
        assert reopened.read_events("run_1", after_seq=56)[-1].payload == {"n": 2}
    finally:
        reopened.close()


@pytest.mark.postgres
def test_events_written_before_schema_7_read_back_and_the_run_goes_on(pg_url: str) -> None:
    from stateward.store import _pg_sql
    from stateward.store.migrations import POSTGRES_MIGRATIONS

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(_pg_sql.SCHEMA_TABLE)
        for version, script in enumerate(POSTGRES_MIGRATIONS[:6], start=1):
            for statement in script:
                conn.execute(statement)
            conn.execute(_pg_sql.SCHEMA_RECORD, (version,))
        conn.execute(
            "INSERT INTO runs(run_id, agent, status, snapshot, last_seq, updated_at)"
            " VALUES ('run_old', 'tests.store:agent', 'RUNNING', %s, 2, now() - interval '1 hour')",
            (_state("run_old").model_dump_json(),),
        )
        conn.execute(
            "INSERT INTO events(run_id, seq, type, payload, lease_version, at) VALUES"
            """ ('run_old', 1, 'run_started', '{"goal":"pg"}', 0, now()),"""
            """ ('run_old', 2, 'tool_attempted', '{"n":1,"text":"a \\"quoted\\" word"}', 3, now())"""
        )
    store = PostgresStore(pg_url)
    try:
        _start(store, "run_new")
        assert [(e.seq, e.type.value, e.payload, e.lease_version) for e in store.read_events("run_old")] == [
            (1, "run_started", {"goal": "pg"}, 0),
            (2, "tool_attempted", {"n": 1, "text": 'a "quoted" word'}, 3),
        ]
        lease = store.claim_next("w", ttl_s=30)  # queued since its last write, before run_new
        assert lease is not None and lease.run_id == "run_old"
        event = NewEvent(type=EventType.TOOL_ATTEMPTED, payload={"n": 2})
        assert store.commit_step("run_old", 2, StepWrite(state=_state("run_old"), events=[event, event]), lease) == 4
        with psycopg.connect(pg_url, autocommit=True) as conn:
            rows = conn.execute("SELECT seq, type, payload FROM events WHERE run_id='run_old' ORDER BY seq").fetchall()
        assert [r[0] for r in rows] == [1, 2, 3, 4] and rows[3][2] == '{"n":2}'
    finally:
        store.close()


@pytest.mark.postgres
def test_a_large_snapshot_is_compressed_with_lz4_where_the_server_has_it(pg: PostgresStore, pg_url: str) -> None:
    state = _state("run_1").model_copy(update={"facts": {"notes": " ".join(f"note {i}" for i in range(2000))}})
    pg.create_run(state, [NewEvent(type=EventType.RUN_STARTED)])
    with psycopg.connect(pg_url, autocommit=True) as conn:
        has_lz4 = conn.execute(
            "SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'"
        ).fetchone()
        row = conn.execute("SELECT pg_column_compression(snapshot), length(snapshot) FROM runs").fetchone()
    assert has_lz4 is not None and row is not None and row[1] > 10_000
    assert row[0] == ("lz4" if has_lz4[0] else "pglz")
    assert pg.load_run("run_1") == state
