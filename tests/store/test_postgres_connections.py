"""The PostgreSQL store's own stack of connections (store/_pg_conns.py): a thread calling again gets its
connection back; more threads than connections all get served; a connection the server ended is replaced
before the next step; a forked child neither uses nor ends its parent's sessions; connections go back
to the pool after a while."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from stateward.core.errors import StoreError
from stateward.core.events import EventType, NewEvent
from stateward.core.state import AgentRef, RunState
from stateward.store import _pg_conns
from stateward.store._pg_check import IdleCheck
from stateward.store._pg_conns import Connections
from stateward.store.postgres import PostgresStore
from stateward.store.records import StepWrite

pytestmark = pytest.mark.postgres


def _state(run_id: str) -> RunState:
    return RunState(run_id=run_id, agent=AgentRef(name="tests.store:agent"), goal="conns")


def _events(n: int) -> list[NewEvent]:
    return [NewEvent(type=EventType.TOOL_ATTEMPTED, payload={"n": i}) for i in range(n)]


def _backends(pg_url: str, app: str) -> set[int]:
    with psycopg.connect(pg_url, autocommit=True) as admin:
        rows = admin.execute("SELECT pid FROM pg_stat_activity WHERE application_name=%s", (app,)).fetchall()
    return {int(r[0]) for r in rows}


@pytest.fixture
def store(pg_url: str) -> Iterator[PostgresStore]:
    opened = PostgresStore(pg_url + "&application_name=sw_conns", max_size=2, connect_timeout=3)
    yield opened
    opened.close()


def test_one_thread_calling_again_gets_its_own_connection_back(store: PostgresStore) -> None:
    store.create_run(_state("run_1"), _events(1))
    pids = set()
    for _ in range(20):
        with store._lent() as lent:  # what every call borrows
            pids.add(lent.conn.info.backend_pid)
        store.last_seq("run_1")
    assert len(pids) == 1


def test_more_threads_than_connections_are_all_served_and_the_pool_stays_bounded(
    store: PostgresStore, pg_url: str
) -> None:
    for i in range(8):
        store.create_run(_state(f"run_{i}"), _events(1))
    seen: set[int] = set()
    failures: list[BaseException] = []

    def work(i: int) -> None:
        try:
            seq = 1
            lease = store.acquire_lease(f"run_{i}", f"w{i}", ttl_s=30)
            for _ in range(25):
                seq = store.commit_step(f"run_{i}", seq, StepWrite(state=_state(f"run_{i}"), events=_events(2)), lease)
                seen.update(_backends(pg_url, "sw_conns"))
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]  # 8 threads, 2 connections
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert failures == []
    assert [store.last_seq(f"run_{i}") for i in range(8)] == [51] * 8
    assert 1 <= len(_backends(pg_url, "sw_conns")) <= 2  # the threads ended: nothing leaked, nothing grew
    assert len(seen) <= 2


def test_a_connection_handed_back_goes_to_a_caller_waiting_in_the_pool(pg_url: str) -> None:
    def make() -> ConnectionPool[Any]:
        pool: ConnectionPool[Any] = ConnectionPool(
            pg_url, min_size=1, max_size=1, open=False, kwargs={"autocommit": True}, timeout=3
        )
        pool.open(wait=True)
        return pool

    conns = Connections(make, IdleCheck())
    try:
        held = conns.take()
        got: list[Any] = []
        waiter = threading.Thread(target=lambda: got.append(conns.take()))
        waiter.start()
        time.sleep(0.3)  # the waiter found the stack empty and waits in the pool
        started = time.monotonic()
        conns.give(held)  # not onto the stack, where the waiter would never look again
        waiter.join(5)
        assert got and got[0].conn is held.conn and time.monotonic() - started < 1.5
        conns.give(got[0])
    finally:
        conns.close()


def test_a_terminated_backend_is_replaced_and_the_next_step_loses_nothing(store: PostgresStore, pg_url: str) -> None:
    store.create_run(_state("run_1"), _events(1))
    lease = store.acquire_lease("run_1", "w1", ttl_s=30)
    seq = store.commit_step("run_1", 1, StepWrite(state=_state("run_1"), events=_events(3)), lease)
    (before,) = _backends(pg_url, "sw_conns")
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (before,))
    time.sleep(0.2)  # the server said goodbye on the idle socket
    seq = store.commit_step("run_1", seq, StepWrite(state=_state("run_1"), events=_events(2)), lease)
    assert seq == 6 and store.last_seq("run_1") == 6
    assert [e.seq for e in store.read_events("run_1")] == [1, 2, 3, 4, 5, 6]
    assert before not in _backends(pg_url, "sw_conns")


def test_a_forked_child_opens_its_own_sessions_and_leaves_the_parents_alone(store: PostgresStore, pg_url: str) -> None:
    store.create_run(_state("run_1"), _events(1))
    (parent,) = _backends(pg_url, "sw_conns")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            with store._lent() as lent:
                child = lent.conn.info.backend_pid
            store.last_seq("run_1")
            store.create_run(_state("run_child"), _events(2))
            os.write(write, str(child).encode())
            code = 0
        finally:
            os._exit(code)  # no close(): the child leaves as a crashed worker would
    os.close(write)
    _, status = os.waitpid(pid, 0)
    child = int(os.read(read, 64) or b"0")
    os.close(read)
    assert os.waitstatus_to_exitcode(status) == 0
    assert child not in (0, parent)  # its own session, not the parent's socket
    assert store.last_seq("run_child") == 2 and store.last_seq("run_1") == 1  # the parent's session still works
    with store._lent() as lent:
        assert lent.conn.info.backend_pid == parent


def test_connections_go_back_to_the_pool_after_a_while(store: PostgresStore, monkeypatch: pytest.MonkeyPatch) -> None:
    store.create_run(_state("run_1"), _events(1))
    pool = store._conns.pool
    with store._lent():
        pass
    assert pool.get_stats()["pool_available"] == 0  # on the store's stack, out of the pool
    monkeypatch.setattr(_pg_conns, "RETURN_AFTER_S", 0.0)
    with store._lent():
        time.sleep(0.01)
    assert pool.get_stats()["pool_available"] == 1  # given back: the pool's lifetime and shrinking apply


def test_a_connection_killed_mid_call_fails_that_call_as_retryable_and_is_not_lent_again(
    store: PostgresStore, pg_url: str
) -> None:
    store.create_run(_state("run_1"), _events(1))
    lease = store.acquire_lease("run_1", "w1", ttl_s=30)
    (victim,) = _backends(pg_url, "sw_conns")

    def kill() -> None:
        time.sleep(0.3)
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (victim,))

    killer = threading.Thread(target=kill)
    killer.start()
    with pytest.raises(StoreError) as err, store._lent() as lent:
        lent.conn.execute("SELECT pg_sleep(5)")  # a call in flight when its backend is terminated
    killer.join()
    assert err.value.code == "STORE_UNAVAILABLE"
    assert store.commit_step("run_1", 1, StepWrite(state=_state("run_1"), events=_events(2)), lease) == 3
    assert store.last_seq("run_1") == 3 and victim not in _backends(pg_url, "sw_conns")


def test_a_session_without_the_prepared_step_statements_still_steps_once(store: PostgresStore) -> None:
    store.create_run(_state("run_1"), _events(1))
    lease = store.acquire_lease("run_1", "w1", ttl_s=30)
    seq = store.commit_step("run_1", 1, StepWrite(state=_state("run_1"), events=_events(2)), lease)
    with store._lent() as lent:
        lent.conn.execute("DEALLOCATE ALL")  # as a reset session would be: the direct path finds nothing
    seq = store.commit_step("run_1", seq, StepWrite(state=_state("run_1"), events=_events(2)), lease)
    assert seq == 5 and [e.seq for e in store.read_events("run_1")] == [1, 2, 3, 4, 5]
