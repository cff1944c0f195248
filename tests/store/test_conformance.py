"""The Store conformance suite: every clause runs on SQLite and on PostgreSQL.

One small test per named clause, grouped by capability (in the manner of LangGraph's checkpointer
conformance suite), plus the clauses a single-writer checkpointer does not need: fencing of a
superseded lease owner, racing writers, and claimers on several connections at once.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

import pytest

from stateward.core.canonical import sha256_hex
from stateward.core.errors import RunError, StaleLeaseError, StoreError, UserError
from stateward.core.events import Event, EventType, NewEvent
from stateward.core.journal import AttemptRecord, BreakerPosition, BreakerState, SideEffectRecord
from stateward.core.sealed import Sealed
from stateward.core.state import (
    AgentRef,
    ApprovalScope,
    DeferredCall,
    Grant,
    GuardedAction,
    Lineage,
    ParentLink,
    PendingRequest,
    RequestKind,
    RunState,
)
from stateward.core.status import RunStatus
from stateward.store.base import MAX_CLAIM_BATCH, PayloadLimits, Store
from stateward.store.keys import ApiKeyRecord, KeyStore, StoredResponse
from stateward.store.migrations import POSTGRES_MIGRATIONS, SQLITE_MIGRATIONS
from stateward.store.outbox import NoticeKind, WebhookStore, WebhookSubscription, notices_of
from stateward.store.paging import RunPage
from stateward.store.records import Lease, NewArtifact, RequestAnswer, StepWrite

if TYPE_CHECKING:
    from tests.store.conftest import Backend

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
RUN = "run_a"


# -- builders -----------------------------------------------------------------------------------------
def make_state(run_id: str = RUN, **update: Any) -> RunState:
    fields: dict[str, Any] = {"goal": "conformance", "agent": AgentRef(name="tests.store:agent"), **update}
    return RunState(run_id=run_id, **fields)


def ev(n: int = 0, kind: EventType = EventType.TOOL_ATTEMPTED, **payload: Any) -> NewEvent:
    return NewEvent(type=kind, payload={"n": n, **payload})


def start(store: Store, run_id: str = RUN, **update: Any) -> RunState:
    state = make_state(run_id, **update)
    store.create_run(state, [ev(kind=EventType.RUN_STARTED)])
    return state


def step(store: Store, run_id: str = RUN, *, events: int = 1, lease: Lease | None = None, **write: Any) -> int:
    """Commit one step on top of whatever the run holds now; the run's new last event number."""
    state, seq = store.load_run_at(run_id)
    new_state = write.pop("state", state.model_copy(update={"facts": {**state.facts, "steps": seq}}))
    batch = [ev(seq + i) for i in range(events)]
    return store.commit_step(run_id, seq, StepWrite(state=new_state, events=batch, **write), lease)


def request(request_id: str = "approval_001", **update: Any) -> PendingRequest:
    return PendingRequest(
        request_id=request_id, question="ship it?", state_before=RunStatus.RUNNING, created_at=T0, **update
    )


def answer(request_id: str = "approval_001", verdict: str = "approved", by: str = "alice") -> RequestAnswer:
    return RequestAnswer(request_id=request_id, verdict=verdict, by=by, at=T0)


def attempt(attempt_id: str, run_id: str = RUN, step_no: int = 1, outcome: str = "SUCCESS") -> AttemptRecord:
    return AttemptRecord(
        attempt_id=attempt_id,
        run_id=run_id,
        step=step_no,
        sequence=1,
        tool="create_brief",
        input_hash="h",
        idempotency_key=None,
        outcome=outcome,
    )


def side_effect(key: str, run_id: str = RUN, status: str = "STARTED", result: Any = None) -> SideEffectRecord:
    return SideEffectRecord(
        idempotency_key=key, run_id=run_id, tool="refund", status=status, result=result, updated_at=T0
    )


def code_of(call: Callable[[], object]) -> str:
    with pytest.raises((RunError, StoreError)) as err:
        call()
    return err.value.code


def durable(store: Store, backend: Backend, run_id: str = RUN) -> dict[str, Any]:
    """Everything durable about a run, to show a refused write changed none of it."""
    return {
        "snapshot": store.load_run_at(run_id),
        "events": store.read_events(run_id),
        "requests": store.list_requests(run_id, open_only=False),
        "artifacts": store.list_artifacts(run_id),
        "attempts": backend.query("SELECT attempt_id, body FROM tool_attempts WHERE run_id=?", run_id),
        "checkpoint": store.latest_checkpoint(run_id),
        "control": store.get_control(run_id),
        "lease": store.lease_of(run_id),
    }


def assert_chain(events: list[Event]) -> None:
    assert [e.seq for e in events] == list(range(1, len(events) + 1))


def race(n: int, work: Callable[[int], object]) -> list[object]:
    """Run ``work(i)`` on n threads released together; each result or exception is returned."""
    barrier = threading.Barrier(n)
    results: list[object] = [None] * n

    def run(i: int) -> None:
        barrier.wait()
        try:
            results[i] = work(i)
        except Exception as exc:
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return results


# == runs and the event log ==============================================================================
def test_create_run_numbers_its_events_from_one(store: Store) -> None:
    written = store.create_run(make_state(), [ev(0, EventType.RUN_STARTED), ev(1)])
    assert [e.seq for e in written] == [1, 2]
    assert store.last_seq(RUN) == 2
    assert store.read_events(RUN) == written


def test_a_create_run_that_fails_midway_leaves_nothing_and_can_be_retried(store: Store) -> None:
    unwritable = NewEvent(type=EventType.RUN_STARTED, payload={"not json": object()})
    with pytest.raises(Exception):  # noqa: B017 - which exception depends on the store's JSON encoder
        store.create_run(make_state(), [unwritable])
    assert store.read_events(RUN) == []
    assert code_of(lambda: store.load_run(RUN)) == "RUN_NOT_FOUND"
    start(store, "run_other")  # another run may take the key the failed one would have had
    start(store)
    step(store, events=2)
    assert [e.seq for e in store.read_events(RUN)] == [1, 2, 3]
    assert [e.seq for e in store.read_events("run_other")] == [1]


def test_create_run_refuses_a_taken_id_and_writes_nothing(store: Store) -> None:
    start(store)
    before = store.read_events(RUN)
    assert code_of(lambda: store.create_run(make_state(goal="other"), [ev(9)])) == "RUN_EXISTS"
    assert store.read_events(RUN) == before
    assert store.load_run(RUN).goal == "conformance"


def test_events_are_contiguous_per_run(store: Store) -> None:
    start(store)
    for _ in range(4):
        step(store, events=3)
    events = store.read_events(RUN)
    assert_chain(events)
    assert len(events) == 13 and store.last_seq(RUN) == 13


def test_runs_have_independent_sequences(store: Store) -> None:
    start(store, "run_a")
    start(store, "run_b")
    step(store, "run_a", events=2)
    assert [e.seq for e in store.read_events("run_b")] == [1]
    assert [e.seq for e in store.read_events("run_a")] == [1, 2, 3]


def test_committed_events_are_read_back_exactly(store: Store) -> None:
    start(store)
    payload = {"text": "naïve — ünïcødé ✓", "nested": {"list": [1, 2.5, None, True]}, "big": 2**53, "nul": "a\x00b"}
    new_seq = store.commit_step(
        RUN, 1, StepWrite(state=make_state(), events=[NewEvent(type=EventType.PLAN_RECORDED, payload=payload)])
    )
    assert new_seq == 2 == store.last_seq(RUN)
    written = store.read_events(RUN)[1:]
    assert len(written) == 1 and written[0].seq == 2
    assert written[0].payload == payload and written[0].type is EventType.PLAN_RECORDED


def test_payloads_are_stored_as_json_alike_on_every_store(store: Store, backend: Backend) -> None:
    """JSON has no NaN: non-finite floats come back as null; a date comes back as its ISO string."""
    start(store)
    odd = {"ratio": float("nan"), "big": float("inf"), "when": datetime(2026, 11, 30, 12, 0, tzinfo=UTC), "n": 1.5}
    store.commit_step(
        RUN, 1, StepWrite(state=make_state(), events=[NewEvent(type=EventType.TOOL_ATTEMPTED, payload=odd)])
    )
    payload = store.read_events(RUN)[-1].payload
    assert payload["ratio"] is None and payload["big"] is None and payload["n"] == 1.5
    assert isinstance(payload["when"], str) and payload["when"].startswith("2026-11-30T12:00:00")
    ((raw,),) = backend.query("SELECT payload FROM events WHERE run_id=? AND seq=2", RUN)
    assert json.loads(raw) == payload  # what the database's own tools see is the same valid JSON


# -- payload limits -------------------------------------------------------------------------------------------
def test_an_event_payload_over_the_default_limit_is_refused_and_writes_nothing(store: Store, backend: Backend) -> None:
    start(store)
    before = durable(store, backend)
    state, seq = store.load_run_at(RUN)
    big = NewEvent(type=EventType.REQUEST_ANSWERED, payload={"text": "x" * (1 << 20)})  # 1 MiB + the JSON around it
    write = StepWrite(state=state.model_copy(update={"facts": {"n": 1}}), events=[ev(seq), big], checkpoint="wait")
    assert code_of(lambda: store.commit_step(RUN, seq, write)) == "PAYLOAD_TOO_LARGE"
    assert durable(store, backend) == before


def test_a_snapshot_over_the_limit_is_refused_and_writes_nothing(backend: Backend) -> None:
    store = backend.open(limits=PayloadLimits(snapshot_bytes=4096))
    start(store)
    before = durable(store, backend)
    state, seq = store.load_run_at(RUN)
    grown = state.model_copy(update={"facts": {"notes": "y" * 5000}})
    assert code_of(lambda: store.commit_step(RUN, seq, StepWrite(state=grown, events=[ev(seq)]))) == "PAYLOAD_TOO_LARGE"
    assert durable(store, backend) == before
    assert code_of(lambda: start(store, "run_big", facts={"notes": "y" * 5000})) == "PAYLOAD_TOO_LARGE"
    assert code_of(lambda: store.load_run("run_big")) == "RUN_NOT_FOUND"


# -- large state parts: written only when they change (store/parts.py) -----------------------------------------
PLAN = {"items": [{"id": f"W{i:02}", "title": "move this payment call site to the new SDK"} for i in range(40)]}


def stored_parts(backend: Backend) -> tuple[int, int]:
    """(parts, their bytes) in the whole database."""
    count, size = backend.query("SELECT count(*), coalesce(sum(length(body)), 0) FROM state_parts")[0]
    return int(count), int(size)


def set_memo(store: Store, memo: dict[str, Any], **write: Any) -> RunState:
    state, seq = store.load_run_at(RUN)
    new = state.model_copy(update={"memo": memo})
    store.commit_step(RUN, seq, StepWrite(state=new, events=[ev(seq)], **write))
    return new


def test_a_large_memo_entry_is_written_once_while_it_stays_the_same(backend: Backend) -> None:
    store = backend.open()
    start(store)
    set_memo(store, {"plan": PLAN, "cursor": 0})  # a new entry stays in the row
    assert stored_parts(backend) == (0, 0)
    set_memo(store, {"plan": PLAN, "cursor": 1})  # the same for a step: from now on a part, written once
    once = stored_parts(backend)
    assert once[0] == 1 and once[1] >= len(json.dumps(PLAN, separators=(",", ":")))
    for cursor in range(2, 8):
        last = set_memo(store, {"plan": PLAN, "cursor": cursor})
    assert stored_parts(backend) == once  # steps that leave the plan alone write none of it
    row = backend.query("SELECT length(snapshot) FROM runs WHERE run_id=?", RUN)[0][0]
    assert row < once[1]  # the row holds the rest of the state, not the plan
    assert store.load_run(RUN) == last and list(store.load_run(RUN).memo) == ["plan", "cursor"]
    assert backend.open().load_run(RUN) == last  # another process reads the same state


def test_a_changed_plan_is_a_new_part_and_every_version_reads_back(backend: Backend) -> None:
    store = backend.open()
    start(store)
    for cursor in range(3):
        set_memo(store, {"plan": PLAN, "cursor": cursor})
    patched = {"items": [*PLAN["items"], {"id": "W40", "title": "one more call site found by the search"}]}
    changed = set_memo(store, {"plan": patched, "cursor": 3})
    assert store.load_run(RUN) == changed and stored_parts(backend)[0] == 1  # changed: back in the row once
    waiting = set_memo(store, {"plan": patched, "cursor": 4}, checkpoint="wait")
    assert stored_parts(backend)[0] == 2
    checkpoint = store.latest_checkpoint(RUN)
    assert checkpoint is not None and checkpoint.state == waiting
    resumed = backend.open()  # a fresh process knows no parts: it writes nothing it need not, reads all
    state, seq = resumed.load_run_at(RUN)
    assert state == waiting
    resumed.commit_step(RUN, seq, StepWrite(state=state.model_copy(update={"facts": {"n": 1}}), events=[ev(seq)]))
    assert resumed.load_run(RUN).memo == waiting.memo and stored_parts(backend)[0] == 2


def test_a_missing_part_is_named_never_read_as_an_empty_memo(backend: Backend) -> None:
    store = backend.open()
    start(store)
    for cursor in range(2):
        set_memo(store, {"plan": PLAN, "cursor": cursor})
    backend.query("DELETE FROM state_parts")
    assert code_of(lambda: backend.open().load_run(RUN)) == "STORE_CORRUPT"


def test_the_snapshot_limit_counts_the_parts_of_the_state(backend: Backend) -> None:
    limit = len(json.dumps(PLAN)) + 600
    store = backend.open(limits=PayloadLimits(snapshot_bytes=limit))
    start(store)
    for cursor in range(2):
        set_memo(store, {"plan": PLAN, "cursor": cursor})
    before = durable(store, backend)
    state, seq = store.load_run_at(RUN)
    grown = state.model_copy(update={"memo": {"plan": PLAN, "cursor": 2, "notes": "n" * 800}})
    assert code_of(lambda: store.commit_step(RUN, seq, StepWrite(state=grown, events=[ev(seq)]))) == "PAYLOAD_TOO_LARGE"
    assert durable(store, backend) == before


RECORD = {"attempts": [{"outcome": "SUCCEEDED"}], "output": "artifact:migration_report:v1", "notes": "n" * 200}


def part_bodies(backend: Backend) -> list[str]:
    return [str(row[0]) for row in backend.query("SELECT body FROM state_parts ORDER BY body")]


def test_a_sealed_entry_is_written_once_and_read_back_plain(backend: Backend) -> None:
    store = backend.open()
    start(store)
    plan = Sealed(PLAN)
    set_memo(store, {"plan": plan, "cursor": 0})
    assert stored_parts(backend) == (0, 0)  # new: in the row this time
    for cursor in range(1, 6):
        last = set_memo(store, {"plan": plan, "cursor": cursor})
    assert part_bodies(backend) == [plan.text]  # written once, as it was sealed
    row = json.loads(backend.query("SELECT snapshot FROM runs WHERE run_id=?", RUN)[0][0])
    assert row["memo"] == {"plan": None, "cursor": 5}  # the row is plain JSON, the plan named apart
    loaded = store.load_run(RUN)
    assert type(loaded.memo["plan"]) is dict and loaded.memo["plan"] == PLAN and loaded == last
    assert backend.open().load_run(RUN).model_dump() == last.model_dump()


def test_a_changed_sealed_entry_is_rewritten(backend: Backend) -> None:
    store = backend.open()
    start(store)
    for cursor in range(3):
        set_memo(store, {"plan": Sealed(PLAN), "cursor": cursor})  # a new document of the same content each step
    assert stored_parts(backend)[0] == 1
    patched = Sealed({"items": [*PLAN["items"], {"id": "W40", "title": "one more"}]})
    changed = set_memo(store, {"plan": patched, "cursor": 3})
    assert store.load_run(RUN).memo["plan"] == patched and stored_parts(backend)[0] == 1
    assert json.loads(backend.query("SELECT snapshot FROM runs WHERE run_id=?", RUN)[0][0])["memo"]["plan"] == patched
    set_memo(store, {"plan": patched, "cursor": 4})
    assert stored_parts(backend)[0] == 2 and patched.text in part_bodies(backend)
    assert store.load_run(RUN).memo["plan"] == patched.value != changed.memo["cursor"]


def test_each_sealed_value_of_an_entry_is_a_part_of_its_own(backend: Backend) -> None:
    store = backend.open()
    start(store)
    done = Sealed(RECORD)
    for step_no in range(6):  # W02 changes at every step, W01 is finished
        running = Sealed({"attempts": [{"outcome": "RUNNING"}], "steps": list(range(step_no + 1)), "pad": "p" * 200})
        last = set_memo(store, {"items": {"W01": done, "W02": running, "W03": {"small": step_no}}, "turn": step_no})
    assert part_bodies(backend) == [done.text]  # the finished record once; the running one never left behind
    row = json.loads(backend.query("SELECT snapshot FROM runs WHERE run_id=?", RUN)[0][0])
    assert row["memo"]["items"] == {"W01": None, "W02": running.value, "W03": {"small": 5}}
    loaded = store.load_run(RUN)
    assert loaded.memo == {"items": {"W01": RECORD, "W02": running.value, "W03": {"small": 5}}, "turn": 5}
    assert loaded == last and backend.open().load_run(RUN) == last
    set_memo(store, {"items": {"W01": done, "W02": running}, "turn": 6}, checkpoint="wait")
    checkpoint = store.latest_checkpoint(RUN)
    assert checkpoint is not None and checkpoint.state.memo["items"] == {"W01": RECORD, "W02": running.value}


def test_a_memo_value_changed_in_place_is_written_as_it_is_now(backend: Backend) -> None:
    store = backend.open()
    start(store)
    plan: dict[str, Any] = json.loads(json.dumps(PLAN))
    for cursor in range(3):
        set_memo(store, {"plan": plan, "cursor": cursor})  # the same object: a part after one step
    assert stored_parts(backend)[0] == 1
    plan["items"][0]["title"] = "changed where it lies"  # the controller's own dict, changed in place
    set_memo(store, {"plan": plan, "cursor": 3})
    assert store.load_run(RUN).memo["plan"]["items"][0]["title"] == "changed where it lies"
    assert backend.open().load_run(RUN).memo["plan"] == plan
    sealed = Sealed(plan)
    set_memo(store, {"plan": sealed, "cursor": 4})
    sealed["items"][0]["title"] = "a read changes nothing"  # what a read returns is the caller's copy
    set_memo(store, {"plan": sealed, "cursor": 5})
    assert store.load_run(RUN).memo["plan"] == plan


def test_a_row_written_before_sealed_documents_still_loads(backend: Backend) -> None:
    store = backend.open()
    start(store)
    text = json.dumps(PLAN, separators=(",", ":"))
    digest = sha256_hex(text)
    old = make_state(memo={"plan": None, "cursor": 7}).model_dump_json()  # as the previous layout stored it
    key = "run_key" if backend.kind == "sqlite" else "run_id"
    owner = backend.query(f"SELECT {key} FROM runs WHERE run_id=?", RUN)[0][0]
    backend.query(f"INSERT INTO state_parts({key}, digest, body) VALUES (?,?,?)", owner, digest, text)
    backend.query("UPDATE runs SET snapshot=?, parts=? WHERE run_id=?", old, json.dumps({"plan": digest}), RUN)
    loaded = backend.open().load_run(RUN)
    assert loaded.memo == {"plan": PLAN, "cursor": 7} and list(loaded.memo) == ["plan", "cursor"]


def test_the_event_limit_is_per_event_and_measured_in_utf8_bytes(backend: Backend) -> None:
    store = backend.open(limits=PayloadLimits(event_bytes=1000))
    start(store)
    state, seq = store.load_run_at(RUN)
    three = [ev(seq + i, note="z" * 800) for i in range(3)]  # each under the limit, 2,400+ bytes together
    seq = store.commit_step(RUN, seq, StepWrite(state=state, events=three))
    wide = ev(seq, note="é" * 600)  # 600 characters, 1,200 bytes
    assert code_of(lambda: store.commit_step(RUN, seq, StepWrite(state=state, events=[wide]))) == "PAYLOAD_TOO_LARGE"
    unlimited = backend.open(limits=PayloadLimits(event_bytes=None, snapshot_bytes=None))
    assert unlimited.commit_step(RUN, seq, StepWrite(state=state, events=[wide])) == seq + 1


def test_read_events_after_seq_returns_the_tail(store: Store) -> None:
    start(store)
    step(store, events=4)
    assert [e.seq for e in store.read_events(RUN, after_seq=3)] == [4, 5]
    assert store.read_events(RUN, after_seq=5) == []


def test_events_carry_the_fencing_token_that_wrote_them(store: Store) -> None:
    start(store)
    step(store)
    lease = store.acquire_lease(RUN, "w1", ttl_s=30)
    step(store, lease=lease)
    assert [e.lease_version for e in store.read_events(RUN)] == [0, 0, lease.version]


def test_the_events_relation_shows_one_row_per_event(store: Store, backend: Backend) -> None:
    """What a person sees with the database's own shell: one row per event, in order, as read_events."""
    start(store)
    start(store, "run_other")
    step(store, events=3)
    step(store, "run_other", events=2)
    step(store, events=1)
    rows = backend.query("SELECT seq, type, payload FROM events WHERE run_id=? ORDER BY seq", RUN)
    expected = [(e.seq, e.type.value, e.payload) for e in store.read_events(RUN)]
    assert [(seq, kind, json.loads(payload)) for seq, kind, payload in rows] == expected
    assert [r[0] for r in rows] == [1, 2, 3, 4, 5]


def test_events_of_an_unknown_run_are_empty(store: Store) -> None:
    assert store.read_events("nope") == []


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda s: s.load_run("nope"), id="load_run"),
        pytest.param(lambda s: s.load_run_at("nope"), id="load_run_at"),
        pytest.param(lambda s: s.last_seq("nope"), id="last_seq"),
        pytest.param(lambda s: s.get_control("nope"), id="get_control"),
        pytest.param(lambda s: s.set_control("nope", "pause"), id="set_control"),
        pytest.param(lambda s: s.lease_of("nope"), id="lease_of"),
        pytest.param(lambda s: s.acquire_lease("nope", "w", 5), id="acquire_lease"),
        pytest.param(lambda s: s.commit_step("nope", 0, StepWrite(state=make_state("nope"))), id="commit_step"),
        pytest.param(
            lambda s: s.commit_step(
                "nope", 0, StepWrite(state=make_state("nope")), Lease(run_id="nope", owner="w", version=1, expires_at=0)
            ),
            id="commit_step_leased",
        ),
    ],
)
def test_an_unknown_run_is_run_not_found(store: Store, call: Callable[[Store], object]) -> None:
    assert code_of(lambda: call(store)) == "RUN_NOT_FOUND"


def test_list_runs_is_newest_first_and_limited(store: Store) -> None:
    for run_id in ("run_1", "run_2", "run_3"):
        start(store, run_id, tenant="acme")
    rows = store.list_runs()
    assert [r.run_id for r in rows] == ["run_3", "run_2", "run_1"]
    assert [r.run_id for r in store.list_runs(limit=2)] == ["run_3", "run_2"]
    assert rows[0].tenant == "acme" and rows[0].agent == "tests.store:agent" and rows[0].last_seq == 1


def test_list_runs_names_only_live_lease_owners(store: Store) -> None:
    start(store, "run_live")
    start(store, "run_gone")
    store.acquire_lease("run_live", "worker-a", ttl_s=30)
    store.acquire_lease("run_gone", "worker-b", ttl_s=0.01)
    time.sleep(0.05)
    owners = {r.run_id: r.lease_owner for r in store.list_runs()}
    assert owners == {"run_live": "worker-a", "run_gone": None}


# == listing a page at a time ============================================================================
def run_ids(page: RunPage) -> list[str]:
    return [r.run_id for r in page.items]


def every_page(store: Store, size: int, between: Callable[[int], object] = lambda n: None, **filters: Any) -> list[str]:
    """Every run a paged listing returns, calling ``between(page_number)`` after each page."""
    seen: list[str] = []
    cursor: str | None = None
    for number in range(1, 100):
        page = store.page_runs(limit=size, cursor=cursor, **filters)
        assert len(page.items) <= size
        seen += run_ids(page)
        cursor = page.next_cursor
        if cursor is None:
            return seen
        between(number)
    raise AssertionError("the listing never ended")


def test_paging_lists_each_run_once_newest_first_while_runs_are_created(store: Store) -> None:
    for i in range(25):
        start(store, f"run_{i:02d}")
    expected = run_ids(store.page_runs(limit=1000))
    assert sorted(expected) == [f"run_{i:02d}" for i in range(25)]
    created = {r.run_id: r.created_at for r in store.page_runs(limit=1000).items}
    assert expected == sorted(expected, key=lambda run_id: (created[run_id], run_id), reverse=True)

    seen = every_page(store, 10, between=lambda n: [start(store, f"run_new_{n}_{i}") for i in range(3)])
    assert seen == expected  # each once, same order; runs created meanwhile are newer than any cursor
    newest = run_ids(store.page_runs(limit=1000))
    assert len(newest) == 31 and newest[6:] == expected  # the runs created meanwhile come first in a new listing


def test_a_full_last_page_has_no_next_cursor_only_if_nothing_follows(store: Store) -> None:
    for i in range(4):
        start(store, f"run_{i}")
    first = store.page_runs(limit=2)
    assert first.next_cursor is not None
    second = store.page_runs(limit=2, cursor=first.next_cursor)
    assert len(second.items) == 2 and second.next_cursor is None
    assert store.page_runs(limit=4).next_cursor is None
    assert store.page_runs(status="FAILED") == RunPage(items=[], next_cursor=None)


def test_run_filters_combine_and_page(store: Store) -> None:
    for i in range(12):
        start(
            store,
            f"run_{i:02d}",
            tenant="acme" if i % 2 else "globex",
            agent=AgentRef(name="payer" if i % 3 else "writer"),
            status=RunStatus.WAITING_FOR_USER if i % 4 else RunStatus.RUNNING,
        )
    everything = store.page_runs(limit=1000).items
    cases: list[dict[str, Any]] = [
        {"tenant": "acme"},
        {"agent": "writer"},
        {"status": "WAITING_FOR_USER"},
        {"tenant": "acme", "agent": "payer"},
        {"tenant": "globex", "status": RunStatus.RUNNING, "agent": "writer"},
        {"tenant": "nobody"},
    ]
    for filters in cases:
        wanted = [
            r.run_id
            for r in everything
            if all(str(getattr(r, key)) == (v.value if isinstance(v, RunStatus) else v) for key, v in filters.items())
        ]
        assert every_page(store, 2, **filters) == wanted, filters
    assert {r.tenant for r in store.page_runs(tenant="acme").items} == {"acme"}


def test_a_search_matches_a_run_id_prefix_or_goal_text_with_wildcards_taken_literally(store: Store) -> None:
    goals = {
        "run_pay_1": "Pay invoice INV-7 to ACME",
        "run_pay_2": "pay 100% of the invoice",
        "run_pay_3": "pay 1000 in full",
        "run_other": "write_the report",
        "run_wide": "write the report",
        "run_theirs": "Pay invoice INV-7 to ACME",
    }
    for run_id, goal in goals.items():
        start(store, run_id, goal=goal, tenant="globex" if run_id == "run_theirs" else "acme")
    found = {
        term: sorted(every_page(store, 2, tenant="acme", search=term))
        for term in ("invoice", "INV-7", "100%", "write_the", "run_pay", "%", "_", "nothing", "  acme  ")
    }
    assert found == {
        "invoice": ["run_pay_1", "run_pay_2"],  # ASCII case ignored
        "INV-7": ["run_pay_1"],
        "100%": ["run_pay_2"],  # % is no wildcard: "1000" does not match
        "write_the": ["run_other"],  # nor is _
        "run_pay": ["run_pay_1", "run_pay_2", "run_pay_3"],  # a run id prefix
        "%": ["run_pay_2"],
        "_": ["run_other"],  # a run id matches from its start only
        "nothing": [],
        "  acme  ": ["run_pay_1"],  # surrounding space dropped; another tenant's run never listed
    }
    assert [r.goal for r in store.page_runs(tenant="acme", search="INV-7").items] == [goals["run_pay_1"]]
    assert run_ids(store.page_runs(tenant="acme", search="")) == run_ids(store.page_runs(tenant="acme"))
    with pytest.raises(UserError) as refused:
        store.page_runs(search="x" * 201)
    assert refused.value.code.value == "INVALID_FILTER"
    searched = store.page_runs(tenant="acme", search="pay", limit=1)
    assert searched.next_cursor is not None
    with pytest.raises(UserError) as other_filters:  # a search's cursor is bound to its term
        store.page_runs(tenant="acme", search="write", limit=1, cursor=searched.next_cursor)
    assert other_filters.value.code.value == "INVALID_CURSOR"


def test_a_search_reads_a_bounded_window_per_page_and_its_cursor_goes_on(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    import stateward.store.postgres.listing as pg_module
    import stateward.store.sqlite.listing as sqlite_module

    for module in (sqlite_module, pg_module):
        monkeypatch.setattr(module, "SEARCH_WINDOW", 3)
    for i in range(10):
        start(store, f"run_{i:02d}", goal="needle" if i in (0, 1, 8) else "hay")
    first = store.page_runs(search="needle", limit=5)
    assert run_ids(first) == ["run_08"] and first.next_cursor is not None  # the newest three runs read
    assert every_page(store, 5, search="needle") == ["run_08", "run_01", "run_00"]
    assert every_page(store, 1, search="needle") == ["run_08", "run_01", "run_00"]


def test_runs_filter_by_agent_version_and_a_goal_with_a_nul_is_searchable(store: Store) -> None:
    start(store, "run_v1", agent=AgentRef(name="payer", version="1"))
    start(store, "run_v2", agent=AgentRef(name="payer", version="2"))
    start(store, "run_nul", goal="nul\x00 and lone " + "x" * 600)
    assert run_ids(store.page_runs(version="2")) == ["run_v2"]
    assert run_ids(store.page_runs(agent="payer", version="1")) == ["run_v1"]
    assert {r.run_id: r.agent_version for r in store.page_runs().items}["run_v1"] == "1"
    odd = store.page_runs(search="lone").items
    assert [r.run_id for r in odd] == ["run_nul"]
    assert odd[0].goal is not None and odd[0].goal.startswith("nul\ufffd and lone x")  # PostgreSQL has no NUL
    assert len(odd[0].goal) == 500
    assert store.load_run("run_nul").goal.startswith("nul\x00")  # the snapshot keeps the goal exactly


def test_a_status_change_moves_a_run_between_status_listings(store: Store) -> None:
    start(store)
    step(store, state=make_state(status=RunStatus.COMPLETED))
    assert run_ids(store.page_runs(status="COMPLETED")) == [RUN]
    assert run_ids(store.page_runs(status="RUNNING")) == []


@pytest.mark.parametrize(
    ("arguments", "code"),
    [
        pytest.param({"cursor": "not-a-cursor"}, "INVALID_CURSOR", id="garbage"),
        pytest.param({"cursor": ""}, "INVALID_CURSOR", id="empty"),
        pytest.param({"cursor": "x" * 5000}, "INVALID_CURSOR", id="huge"),
        pytest.param({"cursor": "eyJzIjoiYSIsImsiOlsiYSJdfQ"}, "INVALID_CURSOR", id="well-formed-but-forged"),
        pytest.param({"limit": 0}, "INVALID_PAGE_SIZE", id="limit-0"),
        pytest.param({"limit": 1001}, "INVALID_PAGE_SIZE", id="limit-over-max"),
        pytest.param({"limit": True}, "INVALID_PAGE_SIZE", id="limit-bool"),
        pytest.param({"status": "WAITING"}, "INVALID_FILTER", id="unknown-status"),
    ],
)
def test_a_bad_listing_argument_is_named_and_changes_nothing(
    store: Store, backend: Backend, arguments: dict[str, Any], code: str
) -> None:
    start(store)
    before = durable(store, backend)
    with pytest.raises(UserError) as err:
        store.page_runs(**arguments)
    assert err.value.code == code
    assert durable(store, backend) == before


def test_a_cursor_works_only_with_the_filters_it_was_issued_for(store: Store) -> None:
    for i in range(3):
        start(store, f"run_{i}", tenant="acme")
    cursor = store.page_runs(tenant="acme", limit=1).next_cursor
    assert cursor is not None
    assert run_ids(store.page_runs(tenant="acme", limit=1, cursor=cursor)) == ["run_1"]
    for other in ({}, {"tenant": "globex"}, {"tenant": "acme", "agent": "x"}):
        with pytest.raises(UserError) as err:
            store.page_runs(cursor=cursor, **other)
        assert err.value.code == "INVALID_CURSOR"
    with pytest.raises(UserError) as err:
        store.page_requests(cursor=cursor)
    assert err.value.code == "INVALID_CURSOR"


def test_requests_page_by_run_and_tenant_open_only_by_default(store: Store) -> None:
    for run_id, tenant in (("run_a", "acme"), ("run_b", "globex"), ("run_c", "acme")):
        start(store, run_id, tenant=tenant)
        step(store, run_id, open_request=request("approval_001"))
        step(store, run_id, open_request=request("approval_002"))
    step(store, "run_a", close_request=answer("approval_001"))

    def listed(**filters: Any) -> list[tuple[str, str, str]]:
        out: list[tuple[str, str, str]] = []
        cursor: str | None = None
        while True:
            page = store.page_requests(limit=1, cursor=cursor, **filters)
            out += [(r.run_id, r.request.request_id, r.tenant) for r in page.items]
            cursor = page.next_cursor
            if cursor is None:
                return out

    assert listed() == [
        ("run_a", "approval_002", "acme"),
        ("run_b", "approval_001", "globex"),
        ("run_b", "approval_002", "globex"),
        ("run_c", "approval_001", "acme"),
        ("run_c", "approval_002", "acme"),
    ]
    assert listed(tenant="acme") == [
        ("run_a", "approval_002", "acme"),
        ("run_c", "approval_001", "acme"),
        ("run_c", "approval_002", "acme"),
    ]
    assert listed(run_id="run_a", open_only=False) == [
        ("run_a", "approval_001", "acme"),
        ("run_a", "approval_002", "acme"),
    ]
    assert listed(run_id="run_b", tenant="acme") == []
    closed = store.page_requests(run_id="run_a", open_only=False).items[0]
    assert closed.answer == answer("approval_001") and closed.request == request("approval_001")
    for bad in ({"limit": 0}, {"cursor": "nope"}):
        with pytest.raises(UserError):
            store.page_requests(**bad)


def test_a_listed_request_names_the_run_that_started_its_run(store: Store) -> None:
    """The inbox draws a child's chain from the row (no load of every listed run): the row must carry the
    parent its run was created with, and a root's none."""
    link = ParentLink(run_id="run_root", request_id="child_001", idempotency_key="k" * 64, root_run_id="run_root")
    start(store, "run_root")
    start(store, "run_child", parent=link)
    for run_id in ("run_root", "run_child"):
        step(store, run_id, open_request=request("approval_001"))
    rows = store.page_requests().items
    assert [(r.run_id, r.parent_run_id) for r in rows] == [("run_child", "run_root"), ("run_root", None)]


def test_requests_filter_by_kind_agent_and_role_in_the_query_with_full_pages(store: Store) -> None:
    wanted: list[tuple[str, str]] = []
    for i in range(12):
        run_id, tenant = f"run_{i:02d}", "globex" if i % 5 == 4 else "acme"
        start(store, run_id, tenant=tenant, agent=AgentRef(name="payer" if i % 2 else "writer"))
        kind = RequestKind.INPUT if i % 3 == 0 else RequestKind.APPROVAL
        role = "treasury" if i % 4 == 1 else None
        step(store, run_id, open_request=request("req_1", kind=kind, approver_role=role))
        if tenant == "acme" and i % 2 and kind is RequestKind.APPROVAL and role == "treasury":
            wanted.append((run_id, "req_1"))
    step(store, "run_01", close_request=answer("req_1"))  # an answered one is listed by none
    wanted.remove(("run_01", "req_1"))

    def listed(size: int, **filters: Any) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        cursor: str | None = None
        while True:
            page = store.page_requests(limit=size, cursor=cursor, **filters)
            out += [(r.run_id, r.request.request_id) for r in page.items]
            if page.next_cursor is not None:
                assert len(page.items) == size  # the filters are in the query: no short page before the last
            cursor = page.next_cursor
            if cursor is None:
                return out

    every = store.page_requests(limit=1000, tenant="acme").items
    assert listed(2, tenant="acme", kind="approval", agent="payer", role="treasury") == wanted != []
    for filters in (
        {"kind": "input"},
        {"agent": "writer"},
        {"role": "treasury"},
        {"kind": "approval", "agent": "payer"},
    ):
        expected = [
            (r.run_id, r.request.request_id)
            for r in every
            if r.request.kind.value == filters.get("kind", r.request.kind.value)
            and r.request.approver_role == filters.get("role", r.request.approver_role)
            and ("agent" not in filters or store.load_run(r.run_id).agent.name == filters["agent"])
        ]
        assert listed(1, tenant="acme", **filters) == expected != [], filters
    assert listed(3, tenant="globex", role="treasury") == [
        (r.run_id, "req_1") for r in store.page_requests(tenant="globex").items if r.request.approver_role
    ]
    with pytest.raises(UserError) as refused:
        store.page_requests(kind="bogus")
    assert refused.value.code.value == "INVALID_FILTER"
    first = store.page_requests(limit=1, tenant="acme", kind="input")
    assert first.next_cursor is not None
    with pytest.raises(UserError) as other:  # a cursor is bound to its filters
        store.page_requests(limit=1, tenant="acme", kind="approval", cursor=first.next_cursor)
    assert other.value.code.value == "INVALID_CURSOR"


def test_read_events_stops_at_the_limit(store: Store) -> None:
    start(store)
    step(store, events=3)
    step(store, events=2)
    assert [e.seq for e in store.read_events(RUN, 0, 2)] == [1, 2]
    assert [e.seq for e in store.read_events(RUN, 2, 2)] == [3, 4]
    assert [e.seq for e in store.read_events(RUN, 4, 10)] == [5, 6]
    assert store.read_events(RUN, 6, 10) == []


# == snapshots ===========================================================================================
def test_snapshot_round_trips_the_run_state(store: Store) -> None:
    guarded = GuardedAction(tool="publish", args={"slug": "ü"}, plan_version=2, digest="d" * 64)
    rich = make_state(
        pending=request(guarded_action=guarded, expires_at=T0 + timedelta(hours=1)),
        status=RunStatus.WAITING_FOR_USER,
        approvals=(Grant(request_id="approval_001", action=guarded, scope=ApprovalScope.RUN, by="ann"),),
        granted=(guarded.digest,),
        next_call=DeferredCall(request_id="approval_001", action=guarded, step=3),
        refused_request="approval_000",
        artifacts={"brief": 2},
        facts={"x": [1, {"y": None}], "f": 0.1},
        memo={"note": "✓"},
    )
    store.create_run(rich, [ev()])
    assert store.load_run(RUN) == rich


def test_load_run_at_pairs_the_snapshot_with_its_last_event(store: Store) -> None:
    start(store)
    step(store, events=2)
    state, seq = store.load_run_at(RUN)
    assert seq == 3 == store.last_seq(RUN)
    assert state.facts == {"steps": 1}


def test_a_step_without_events_updates_the_snapshot_only(store: Store) -> None:
    start(store)
    store.commit_step(RUN, 1, StepWrite(state=make_state(goal="changed")))
    assert store.load_run_at(RUN) == (make_state(goal="changed"), 1)
    assert len(store.read_events(RUN)) == 1


def test_the_run_row_follows_the_snapshot(store: Store) -> None:
    start(store)
    ended = make_state(status=RunStatus.FAILED, terminal_reason="budget_exhausted")
    store.commit_step(RUN, 1, StepWrite(state=ended, events=[ev()]))
    (row,) = store.list_runs()
    assert (row.status, row.terminal_reason, row.last_seq) == ("FAILED", "budget_exhausted", 2)
    assert row.updated_at >= row.created_at


# == pending requests ====================================================================================
def test_an_opened_request_is_listed_open(store: Store) -> None:
    start(store)
    step(store, open_request=request())
    record = store.get_request(RUN, "approval_001")
    assert record is not None and record.is_open and record.request == request()
    assert store.list_requests(RUN) == [record]


def test_closing_a_request_records_the_answer(store: Store) -> None:
    start(store)
    step(store, open_request=request())
    step(store, close_request=answer())
    record = store.get_request(RUN, "approval_001")
    assert record is not None and record.answer == answer()
    assert store.list_requests(RUN) == []
    assert store.list_requests(RUN, open_only=False) == [record]


def test_closing_a_closed_request_is_refused_and_writes_nothing(store: Store, backend: Backend) -> None:
    start(store)
    step(store, open_request=request())
    step(store, close_request=answer())
    before = durable(store, backend)
    assert code_of(lambda: step(store, close_request=answer(by="mallory"))) == "REQUEST_NOT_OPEN"
    assert durable(store, backend) == before


def test_closing_an_unknown_request_is_refused(store: Store, backend: Backend) -> None:
    start(store)
    before = durable(store, backend)
    assert code_of(lambda: step(store, close_request=answer("approval_404"))) == "REQUEST_NOT_OPEN"
    assert durable(store, backend) == before


def test_close_all_closes_only_the_open_requests(store: Store) -> None:
    start(store)
    step(store, open_request=request("approval_001"))
    step(store, close_request=answer("approval_001"))
    step(store, open_request=request("approval_002"))
    closed = RequestAnswer(request_id="*", verdict="closed", text="run cancelled", by="operator", at=T0)
    step(store, close_all_requests=closed)
    first, second = store.list_requests(RUN, open_only=False)
    assert first.answer == answer("approval_001")
    assert second.answer == closed


def test_list_requests_spans_runs_in_byte_order(store: Store) -> None:
    for run_id in ("run_a", "run_B"):
        start(store, run_id)
        step(store, run_id, open_request=request("approval_b"))
        step(store, run_id, open_request=request("approval_A"))
    listed = [(r.run_id, r.request.request_id) for r in store.list_requests()]
    assert listed == [
        ("run_B", "approval_A"),
        ("run_B", "approval_b"),
        ("run_a", "approval_A"),
        ("run_a", "approval_b"),
    ]


def test_an_unknown_request_is_none(store: Store) -> None:
    start(store)
    assert store.get_request(RUN, "approval_404") is None
    assert store.get_request("nope", "approval_001") is None


def test_a_request_id_opens_once_per_run(store: Store, backend: Backend) -> None:
    start(store)
    step(store, open_request=request())
    before = durable(store, backend)
    assert code_of(lambda: step(store, open_request=request())) == "DUPLICATE_RECORD"
    assert durable(store, backend) == before


# == artifacts ===========================================================================================
def art(name: str, version: int, content: str = "# text") -> NewArtifact:
    return NewArtifact(name=name, version=version, content=content)


def test_artifacts_are_listed_by_name_then_version(store: Store) -> None:
    start(store)
    step(store, artifacts=[art("brief", 1), art("Zeta", 1)])
    step(store, artifacts=[art("brief", 2), art("alpha", 1)])
    assert [a.ref for a in store.list_artifacts(RUN)] == ["Zeta:v1", "alpha:v1", "brief:v1", "brief:v2"]


def test_get_artifact_returns_the_latest_or_the_asked_version(store: Store) -> None:
    start(store)
    step(store, artifacts=[art("brief", 1, "one")])
    step(store, artifacts=[art("brief", 2, "two")])
    latest, first = store.get_artifact(RUN, "brief"), store.get_artifact(RUN, "brief", 1)
    assert latest is not None and (latest.version, latest.content) == (2, "two")
    assert first is not None and (first.version, first.content) == (1, "one")
    assert store.get_artifact(RUN, "brief", 3) is None
    assert store.get_artifact(RUN, "draft") is None


def test_an_artifact_keeps_its_content_hash_and_media_type(store: Store) -> None:
    start(store)
    content = "# Brief\n\nünïcødé ✓\n"
    step(store, artifacts=[NewArtifact(name="brief", version=1, content=content, media_type="text/plain")])
    stored = store.get_artifact(RUN, "brief")
    assert stored is not None
    assert (stored.content, stored.sha256, stored.media_type) == (content, sha256_hex(content), "text/plain")
    assert stored.created_at.tzinfo is not None


def test_an_artifact_version_is_written_once(store: Store, backend: Backend) -> None:
    start(store)
    step(store, artifacts=[art("brief", 1, "first")])
    before = durable(store, backend)
    assert code_of(lambda: step(store, artifacts=[art("brief", 1, "second")])) == "DUPLICATE_RECORD"
    assert durable(store, backend) == before


def test_artifact_names_are_per_run(store: Store) -> None:
    start(store, "run_a")
    start(store, "run_b")
    step(store, "run_a", artifacts=[art("brief", 1, "a")])
    step(store, "run_b", artifacts=[art("brief", 1, "b")])
    a, b = store.get_artifact("run_a", "brief"), store.get_artifact("run_b", "brief")
    assert a is not None and b is not None and (a.content, b.content) == ("a", "b")


# == tool attempts =======================================================================================
def test_attempts_are_written_with_their_step(store: Store, backend: Backend) -> None:
    start(store)
    step(store, attempts=[attempt("att_1"), attempt("att_2")])
    assert backend.count("tool_attempts", RUN) == 2


def test_an_attempt_written_again_replaces_the_first(store: Store, backend: Backend) -> None:
    start(store)
    step(store, attempts=[attempt("att_1", outcome="PENDING_VERIFICATION")])
    step(store, attempts=[attempt("att_1", step_no=2, outcome="SUCCESS")])
    ((body,),) = backend.query("SELECT body FROM tool_attempts WHERE attempt_id=?", "att_1")
    assert AttemptRecord.model_validate_json(body) == attempt("att_1", step_no=2, outcome="SUCCESS")


# == checkpoints and control flags =======================================================================
def test_a_run_without_checkpoints_has_none(store: Store) -> None:
    start(store)
    step(store)
    assert store.latest_checkpoint(RUN) is None


def test_a_checkpoint_keeps_the_snapshot_at_its_seq(store: Store) -> None:
    start(store)
    waiting = make_state(status=RunStatus.WAITING_FOR_USER, pending=request())
    store.commit_step(RUN, 1, StepWrite(state=waiting, events=[ev(), ev()], checkpoint="wait"))
    checkpoint = store.latest_checkpoint(RUN)
    assert checkpoint is not None
    assert (checkpoint.seq, checkpoint.reason, checkpoint.state) == (3, "wait", waiting)


def test_the_latest_checkpoint_is_the_newest(store: Store) -> None:
    start(store)
    step(store, checkpoint="pause")
    step(store)
    step(store, checkpoint="terminal")
    step(store)
    checkpoint = store.latest_checkpoint(RUN)
    assert checkpoint is not None and (checkpoint.seq, checkpoint.reason) == (4, "terminal")


def test_a_control_flag_is_set_read_and_cleared(store: Store) -> None:
    start(store)
    assert store.get_control(RUN) is None
    store.set_control(RUN, "pause")
    assert store.get_control(RUN) == "pause"
    store.set_control(RUN, None)
    assert store.get_control(RUN) is None


def test_a_step_acknowledges_the_control_flag_only_when_asked(store: Store) -> None:
    start(store)
    store.set_control(RUN, "cancel")
    step(store)
    assert store.get_control(RUN) == "cancel"
    step(store, clear_control=True)
    assert store.get_control(RUN) is None


# == leases ==============================================================================================
def test_each_acquisition_is_a_new_fencing_token(store: Store) -> None:
    start(store)
    first = store.acquire_lease(RUN, "w1", ttl_s=30)
    store.release_lease(first)
    second = store.acquire_lease(RUN, "w2", ttl_s=30)
    assert (first.version, second.version) == (1, 2)


def test_at_most_one_live_lease(store: Store) -> None:
    start(store)
    held = store.acquire_lease(RUN, "w1", ttl_s=30)
    assert code_of(lambda: store.acquire_lease(RUN, "w2", ttl_s=30)) == "LEASE_HELD"
    assert store.lease_of(RUN) == held


def test_the_holder_reacquiring_gets_a_new_token(store: Store) -> None:
    start(store)
    first = store.acquire_lease(RUN, "w1", ttl_s=30)
    again = store.acquire_lease(RUN, "w1", ttl_s=30)
    assert again.version == first.version + 1
    assert code_of(lambda: step(store, lease=first)) == "STALE_LEASE"


def test_an_expired_lease_can_be_taken_over(store: Store) -> None:
    start(store)
    old = store.acquire_lease(RUN, "w1", ttl_s=0.05)
    time.sleep(0.15)
    new = store.acquire_lease(RUN, "w2", ttl_s=30)
    assert (new.owner, new.version) == ("w2", old.version + 1)


def test_lease_expiry_is_epoch_seconds(store: Store) -> None:
    start(store)
    lease = store.acquire_lease(RUN, "w1", ttl_s=30)
    assert abs(lease.expires_at - (time.time() + 30)) < 5


def test_renewal_extends_the_lease(store: Store) -> None:
    start(store)
    lease = store.acquire_lease(RUN, "w1", ttl_s=0.2)
    renewed = store.renew_lease(lease, ttl_s=30)
    assert renewed.version == lease.version and renewed.expires_at > lease.expires_at
    assert store.lease_of(RUN) == renewed
    time.sleep(0.3)
    assert code_of(lambda: store.acquire_lease(RUN, "w2", ttl_s=30)) == "LEASE_HELD"


def test_renewing_a_superseded_lease_is_stale(store: Store) -> None:
    start(store)
    old = store.acquire_lease(RUN, "w1", ttl_s=0.05)
    time.sleep(0.15)
    store.acquire_lease(RUN, "w2", ttl_s=30)
    with pytest.raises(StaleLeaseError):
        store.renew_lease(old, ttl_s=30)


def test_a_lease_superseded_by_its_own_owner_can_neither_renew_nor_write(store: Store) -> None:
    # The fencing token is the version, not the owner: a worker that re-acquired (after a restart with
    # the same name, say) must fence off its earlier self.
    start(store)
    old = store.acquire_lease(RUN, "w1", ttl_s=30)
    new = store.acquire_lease(RUN, "w1", ttl_s=30)
    assert new.version > old.version
    with pytest.raises(StaleLeaseError):
        store.renew_lease(old, ttl_s=30)
    with pytest.raises(StaleLeaseError):
        step(store, lease=old)
    step(store, lease=new)
    assert store.last_seq(RUN) == 2


def test_a_released_lease_writes_nothing(store: Store) -> None:
    start(store)
    lease = store.acquire_lease(RUN, "w1", ttl_s=30)
    store.release_lease(lease)
    with pytest.raises(StaleLeaseError):
        step(store, lease=lease)
    assert store.last_seq(RUN) == 1


def test_release_frees_the_run(store: Store) -> None:
    start(store)
    lease = store.acquire_lease(RUN, "w1", ttl_s=30)
    store.release_lease(lease)
    assert store.lease_of(RUN) is None
    assert store.acquire_lease(RUN, "w2", ttl_s=30).owner == "w2"


def test_a_commit_that_releases_the_lease_frees_the_run_at_once(store: Store) -> None:
    start(store)
    lease = store.acquire_lease(RUN, "w1", ttl_s=30)
    done = make_state(status=RunStatus.PAUSING)  # still runnable: a claimer may take it at once
    assert step(store, lease=lease, state=done, release_lease=True) == 2
    assert store.lease_of(RUN) is None
    claimed = store.claim_next("w2", ttl_s=30)
    assert claimed is not None and (claimed.run_id, claimed.version) == (RUN, lease.version + 1)
    with pytest.raises(StaleLeaseError):  # the released token writes nothing more
        step(store, lease=lease)
    with pytest.raises(StaleLeaseError):
        store.renew_lease(lease, ttl_s=30)
    assert store.last_seq(RUN) == 2 and store.lease_of(RUN) == claimed


def test_a_commit_under_a_stolen_lease_releases_nothing(store: Store, backend: Backend) -> None:
    start(store)
    old = store.acquire_lease(RUN, "w1", ttl_s=0.05)
    time.sleep(0.15)
    new = store.acquire_lease(RUN, "w2", ttl_s=30)
    before = durable(store, backend)
    with pytest.raises(StaleLeaseError):
        step(store, lease=old, release_lease=True)
    assert durable(store, backend) == before
    assert store.lease_of(RUN) == new


def test_release_lease_without_a_lease_is_an_ordinary_unleased_write(store: Store) -> None:
    start(store)
    assert step(store, release_lease=True) == 2
    assert store.lease_of(RUN) is None
    held = store.acquire_lease(RUN, "w1", ttl_s=30)
    assert code_of(lambda: step(store, release_lease=True)) == "LEASE_HELD"
    assert store.lease_of(RUN) == held


def test_releasing_a_superseded_lease_changes_nothing(store: Store) -> None:
    start(store)
    old = store.acquire_lease(RUN, "w1", ttl_s=0.05)
    time.sleep(0.15)
    new = store.acquire_lease(RUN, "w2", ttl_s=30)
    store.release_lease(old)
    assert store.lease_of(RUN) == new


def test_an_unleased_write_waits_for_the_lease_to_lapse(store: Store) -> None:
    start(store)
    store.acquire_lease(RUN, "w1", ttl_s=0.2)
    assert code_of(lambda: step(store)) == "LEASE_HELD"
    time.sleep(0.3)
    seq = step(store)
    assert [e.lease_version for e in store.read_events(RUN, after_seq=seq - 1)] == [0]


def test_the_current_token_may_write(store: Store) -> None:
    start(store)
    lease = store.acquire_lease(RUN, "w1", ttl_s=30)
    assert step(store, lease=lease, events=2) == 3
    assert [(e.seq, e.lease_version) for e in store.read_events(RUN, after_seq=1)] == [
        (2, lease.version),
        (3, lease.version),
    ]


def test_claim_next_takes_the_oldest_runnable_run(store: Store) -> None:
    for run_id in ("run_1", "run_2", "run_3"):
        start(store, run_id)
    step(store, "run_1")  # touched last: now the newest
    claimed = [store.claim_next("w", ttl_s=30) for _ in range(4)]
    assert [c.run_id if c else None for c in claimed] == ["run_2", "run_3", "run_1", None]
    assert all(c is None or (c.owner, c.version) == ("w", 1) for c in claimed)


def test_a_run_given_back_by_its_worker_goes_to_the_back_of_the_claim_queue(store: Store) -> None:
    for run_id in ("run_1", "run_2", "run_3"):
        start(store, run_id)
    lease = store.acquire_lease("run_1", "w1", ttl_s=30)
    step(store, "run_1", lease=lease)
    step(store, "run_1", lease=lease)
    store.release_lease(lease)
    claimed = [store.claim_next("w2", ttl_s=30) for _ in range(4)]
    assert [c.run_id if c else None for c in claimed] == ["run_2", "run_3", "run_1", None]


def test_claim_next_skips_leased_and_unrunnable_runs(store: Store) -> None:
    start(store, "run_leased")
    start(store, "run_waiting", status=RunStatus.WAITING_FOR_USER)
    start(store, "run_pausing", status=RunStatus.PAUSING)
    store.acquire_lease("run_leased", "other", ttl_s=30)
    first = store.claim_next("w", ttl_s=30)
    assert first is not None and first.run_id == "run_pausing"
    assert store.claim_next("w", ttl_s=30) is None
    waiting = store.claim_next("w", ttl_s=30, statuses=("WAITING_FOR_USER",))
    assert waiting is not None and waiting.run_id == "run_waiting"


def test_claim_next_takes_over_an_expired_lease(store: Store) -> None:
    start(store)
    old = store.acquire_lease(RUN, "dead", ttl_s=0.05)
    time.sleep(0.15)
    claimed = store.claim_next("w", ttl_s=30)
    assert claimed is not None and claimed.version == old.version + 1
    assert store.lease_of(RUN) == claimed


def test_claim_next_skips_a_run_held_back_until_its_time(store: Store) -> None:
    start(store, "run_held")
    start(store, "run_due")
    now = datetime.now(UTC)
    step(store, "run_held", not_before=now + timedelta(seconds=60))
    step(store, "run_due", not_before=now - timedelta(seconds=1))
    claimed = store.claim_next("w", ttl_s=30)
    assert claimed is not None and claimed.run_id == "run_due"
    assert store.claim_next("w", ttl_s=30) is None


def test_claim_batch_leases_several_runs_oldest_first_in_one_call(store: Store) -> None:
    for run_id in ("run_1", "run_2", "run_3", "run_4", "run_5"):
        start(store, run_id)
    step(store, "run_1")  # touched last: now the newest
    first = store.claim_batch("w", ttl_s=30, limit=3)
    assert [c.run_id for c in first] == ["run_2", "run_3", "run_4"]
    rest = store.claim_batch("w", ttl_s=30, limit=10)
    assert [c.run_id for c in rest] == ["run_5", "run_1"]
    assert store.claim_batch("w", ttl_s=30, limit=10) == []
    for lease in first + rest:  # each a live fencing token of its own, as the store records it
        assert (lease.owner, lease.version) == ("w", 1)
        assert store.lease_of(lease.run_id) == lease
        assert step(store, lease.run_id, lease=lease) > 1


def test_claim_batch_honours_live_leases_holds_and_statuses(store: Store) -> None:
    start(store, "run_leased")
    start(store, "run_waiting", status=RunStatus.WAITING_FOR_USER)
    start(store, "run_held")
    start(store, "run_expired")
    start(store, "run_free")
    held = store.acquire_lease("run_leased", "other", ttl_s=30)
    step(store, "run_held", not_before=datetime.now(UTC) + timedelta(seconds=60))
    dead = store.acquire_lease("run_expired", "dead", ttl_s=0.05)
    time.sleep(0.15)
    claimed = store.claim_batch("w", ttl_s=30, limit=10)
    assert sorted(c.run_id for c in claimed) == ["run_expired", "run_free"]
    taken = next(c for c in claimed if c.run_id == "run_expired")
    assert taken.version == dead.version + 1  # a takeover fences the dead owner out
    assert code_of(lambda: step(store, "run_expired", lease=dead)) == "STALE_LEASE"
    assert store.lease_of("run_leased") == held


def test_claim_batch_refuses_a_limit_out_of_bounds_and_claims_nothing(store: Store) -> None:
    start(store)
    for limit in (0, -1, MAX_CLAIM_BATCH + 1, True):
        with pytest.raises(UserError) as err:
            store.claim_batch("w", ttl_s=30, limit=limit)
        assert err.value.code == "INVALID_ARGUMENT"
    assert store.lease_of(RUN) is None
    assert [c.run_id for c in store.claim_batch("w", ttl_s=30, limit=MAX_CLAIM_BATCH)] == [RUN]


def test_a_write_without_a_hold_clears_it(store: Store) -> None:
    start(store)
    step(store, not_before=datetime.now(UTC) + timedelta(seconds=60))
    assert store.claim_next("w", ttl_s=30) is None
    step(store)
    claimed = store.claim_next("w", ttl_s=30)
    assert claimed is not None and claimed.run_id == RUN
    assert [r.run_id for r in store.page_runs(status="RUNNING", agent="tests.store:agent").items] == [RUN]
    searched = store.page_runs(tenant="default", search="CONFORM").items  # its goal copied from its snapshot
    assert [(r.run_id, r.goal) for r in searched] == [(RUN, "conformance")]


def test_a_hold_does_not_stop_an_explicit_lease(store: Store) -> None:
    # An operator's resume takes the run at once; only claims wait for the hold.
    start(store)
    step(store, not_before=datetime.now(UTC) + timedelta(seconds=60))
    assert store.acquire_lease(RUN, "operator", ttl_s=30).owner == "operator"


def test_due_runs_lists_held_runs_of_a_status_once_due_earliest_first(store: Store) -> None:
    for run_id in ("run_late", "run_early", "run_future", "run_never", "run_running"):
        start(store, run_id, status=RunStatus.PAUSED if run_id != "run_running" else RunStatus.RUNNING)
    step(store, "run_late", not_before=T0 - timedelta(minutes=1))
    step(store, "run_early", not_before=T0 - timedelta(minutes=5))
    step(store, "run_future", not_before=T0 + timedelta(minutes=1))
    step(store, "run_never")
    step(store, "run_running", not_before=T0 - timedelta(minutes=9))
    assert store.due_runs("PAUSED", T0) == ["run_early", "run_late"]
    assert store.due_runs("PAUSED", T0, limit=1) == ["run_early"]
    assert store.due_runs("PAUSED", T0 + timedelta(minutes=2)) == ["run_early", "run_late", "run_future"]
    assert store.due_runs("COMPLETED", T0) == []


# == fencing: a superseded owner =========================================================================
@pytest.fixture
def superseded(store: Store) -> tuple[Lease, Lease]:
    """A run whose first lease holder stalled past its TTL; the second holder now owns it."""
    start(store)
    step(store, open_request=request())
    old = store.acquire_lease(RUN, "stalled", ttl_s=0.05)
    time.sleep(0.15)
    return old, store.acquire_lease(RUN, "current", ttl_s=30)


def test_a_superseded_owners_write_is_stale(store: Store, superseded: tuple[Lease, Lease]) -> None:
    old, _ = superseded
    assert code_of(lambda: step(store, lease=old)) == "STALE_LEASE"


def test_a_superseded_owner_leaves_nothing_durable(
    store: Store, backend: Backend, superseded: tuple[Lease, Lease]
) -> None:
    old, _ = superseded
    store.set_control(RUN, "pause")
    before = durable(store, backend)
    everything = StepWrite(
        state=make_state(status=RunStatus.COMPLETED, terminal_reason="zombie"),
        events=[ev(1), ev(2)],
        open_request=request("approval_002"),
        artifacts=[art("draft", 1, "zombie draft")],
        attempts=[attempt("att_zombie")],
        checkpoint="terminal",
        clear_control=True,
    )
    with pytest.raises(StaleLeaseError):
        store.commit_step(RUN, store.last_seq(RUN), everything, old)
    assert durable(store, backend) == before


def test_a_superseded_owner_cannot_fork_the_event_chain(store: Store, superseded: tuple[Lease, Lease]) -> None:
    old, new = superseded
    seq = store.last_seq(RUN)
    ours = StepWrite(state=make_state(), events=[ev(100, who="current")])
    theirs = StepWrite(state=make_state(goal="zombie"), events=[ev(100, who="stalled")])
    store.commit_step(RUN, seq, ours, new)
    assert code_of(lambda: store.commit_step(RUN, seq, theirs, old)) == "STALE_LEASE"
    assert code_of(lambda: store.commit_step(RUN, seq + 1, theirs, old)) == "STALE_LEASE"
    events = store.read_events(RUN)
    assert_chain(events)
    assert [e.payload.get("who") for e in events if e.seq > seq] == ["current"]
    assert store.load_run(RUN).goal == "conformance"


def test_a_superseded_owner_cannot_answer_a_pending_request(
    store: Store, backend: Backend, superseded: tuple[Lease, Lease]
) -> None:
    old, _ = superseded
    before = durable(store, backend)
    assert code_of(lambda: step(store, lease=old, close_request=answer(by="zombie"))) == "STALE_LEASE"
    assert code_of(lambda: step(store, lease=old, close_all_requests=answer("*", "closed"))) == "STALE_LEASE"
    record = store.get_request(RUN, "approval_001")
    assert record is not None and record.is_open
    assert durable(store, backend) == before


def test_a_stale_token_is_reported_before_a_stale_seq(store: Store, superseded: tuple[Lease, Lease]) -> None:
    old, _ = superseded
    write = StepWrite(state=make_state(), events=[ev()])
    assert code_of(lambda: store.commit_step(RUN, 0, write, old)) == "STALE_LEASE"


def test_a_stale_seq_under_a_live_lease_is_a_concurrent_update(store: Store) -> None:
    start(store)
    lease = store.acquire_lease(RUN, "w1", ttl_s=30)
    write = StepWrite(state=make_state(), events=[ev()])
    assert code_of(lambda: store.commit_step(RUN, 0, write, lease)) == "CONCURRENT_UPDATE"
    assert code_of(lambda: store.commit_step(RUN, 0, write)) == "CONCURRENT_UPDATE"


# == restart: idempotent writes ==========================================================================
def test_everything_committed_survives_a_restart(
    store: Store, backend: Backend, open_store: Callable[[], Store]
) -> None:
    start(store)
    step(store, open_request=request(), artifacts=[art("brief", 1)], attempts=[attempt("att_1")], checkpoint="wait")
    store.set_control(RUN, "pause")
    store.acquire_lease(RUN, "w1", ttl_s=30)
    store.put_breaker(BreakerState(tool="refund", position=BreakerPosition.OPEN, opened_at=T0))
    store.put_side_effect(side_effect("k1"))
    before = durable(store, backend)
    store.close()
    reopened = open_store()
    assert durable(reopened, backend) == before
    assert reopened.get_breaker("refund") == BreakerState(tool="refund", position=BreakerPosition.OPEN, opened_at=T0)
    assert reopened.get_side_effect("k1") == side_effect("k1")


def test_a_step_recommitted_after_a_restart_is_refused_and_writes_nothing(
    store: Store, backend: Backend, open_store: Callable[[], Store]
) -> None:
    start(store)
    write = StepWrite(state=make_state(goal="once"), events=[ev(1)], artifacts=[art("brief", 1)])
    store.commit_step(RUN, 1, write)
    store.close()
    reopened = open_store()
    before = durable(reopened, backend)
    assert code_of(lambda: reopened.commit_step(RUN, 1, write)) == "CONCURRENT_UPDATE"
    assert durable(reopened, backend) == before


def test_fencing_tokens_keep_rising_across_a_restart(store: Store, open_store: Callable[[], Store]) -> None:
    start(store)
    first = store.acquire_lease(RUN, "w1", ttl_s=30)
    store.close()
    reopened = open_store()
    assert code_of(lambda: reopened.acquire_lease(RUN, "w2", ttl_s=30)) == "LEASE_HELD"
    reopened.release_lease(first)
    assert reopened.acquire_lease(RUN, "w2", ttl_s=30).version == first.version + 1


# == concurrency: several connections at once ============================================================
WRITERS = 6


def test_racing_writers_at_one_seq_exactly_one_wins(store: Store, open_store: Callable[[], Store]) -> None:
    start(store)
    stores = [open_store() for _ in range(WRITERS)]

    def write(i: int) -> tuple[int, int]:
        return i, stores[i].commit_step(RUN, 1, StepWrite(state=make_state(goal=f"w{i}"), events=[ev(i, who=i)] * 2))

    results = race(WRITERS, write)
    winners = [r for r in results if isinstance(r, tuple)]
    assert len(winners) == 1 and winners[0][1] == 3
    assert {r.code for r in results if isinstance(r, RunError)} == {"CONCURRENT_UPDATE"}
    events = store.read_events(RUN)
    assert_chain(events)
    assert [e.payload["who"] for e in events[1:]] == [winners[0][0]] * 2
    assert store.load_run(RUN).goal == f"w{events[1].payload['who']}"


def test_racing_writers_leave_no_gap_and_no_lost_step(store: Store, open_store: Callable[[], Store]) -> None:
    start(store, facts={"steps": 0})
    stores = [open_store() for _ in range(WRITERS)]
    rounds = 4

    def writer(i: int) -> int:
        done = 0
        while done < rounds:
            state, seq = stores[i].load_run_at(RUN)
            bumped = state.model_copy(update={"facts": {"steps": state.facts["steps"] + 1}})
            try:
                stores[i].commit_step(RUN, seq, StepWrite(state=bumped, events=[ev(seq, who=i), ev(seq + 1, who=i)]))
            except RunError as exc:
                assert exc.code == "CONCURRENT_UPDATE"
                continue
            done += 1
        return done

    assert race(WRITERS, writer) == [rounds] * WRITERS
    events = store.read_events(RUN)
    assert_chain(events)
    assert len(events) == 1 + 2 * WRITERS * rounds == store.last_seq(RUN)
    assert store.load_run(RUN).facts["steps"] == WRITERS * rounds
    pairs = [events[i : i + 2] for i in range(1, len(events), 2)]
    assert all(a.payload["who"] == b.payload["who"] for a, b in pairs)


def test_racing_acquirers_get_one_lease(store: Store, open_store: Callable[[], Store]) -> None:
    start(store)
    stores = [open_store() for _ in range(WRITERS)]
    results = race(WRITERS, lambda i: stores[i].acquire_lease(RUN, f"w{i}", ttl_s=30))
    leases = [r for r in results if isinstance(r, Lease)]
    assert len(leases) == 1 and store.lease_of(RUN) == leases[0]
    assert {r.code for r in results if isinstance(r, RunError)} == {"LEASE_HELD"}


def test_claim_next_never_hands_one_run_to_two_claimers(store: Store, open_store: Callable[[], Store]) -> None:
    runs = [f"run_{i:02d}" for i in range(18)]
    for run_id in runs:
        start(store, run_id)
    stores = [open_store() for _ in range(WRITERS)]

    def claimer(i: int) -> list[Lease]:
        mine: list[Lease] = []
        while (lease := stores[i].claim_next(f"w{i}", ttl_s=60)) is not None:
            mine.append(lease)
        return mine

    claims = [lease for got in race(WRITERS, claimer) if isinstance(got, list) for lease in got]
    assert sorted(c.run_id for c in claims) == runs
    assert all(c.version == 1 for c in claims)
    assert all(store.lease_of(c.run_id) == c for c in claims)


def test_claim_batch_never_hands_one_run_to_two_claimers(store: Store, open_store: Callable[[], Store]) -> None:
    runs = [f"run_{i:02d}" for i in range(30)]
    for run_id in runs:
        start(store, run_id)
    stores = [open_store() for _ in range(WRITERS)]

    def claimer(i: int) -> list[Lease]:
        mine: list[Lease] = []
        while claimed := stores[i].claim_batch(f"w{i}", ttl_s=60, limit=4):
            mine.extend(claimed)
        return mine

    claims = [lease for got in race(WRITERS, claimer) if isinstance(got, list) for lease in got]
    assert sorted(c.run_id for c in claims) == runs
    assert all(c.version == 1 for c in claims)
    assert all(store.lease_of(c.run_id) == c for c in claims)


# == gateway store: breakers and the side-effect journal =================================================
def test_a_breaker_round_trips_and_is_replaced(store: Store) -> None:
    assert store.get_breaker("refund") is None
    opened = BreakerState(tool="refund", position=BreakerPosition.OPEN, consecutive_failures=3, opened_at=T0)
    store.put_breaker(opened)
    assert store.get_breaker("refund") == opened
    store.put_breaker(BreakerState(tool="refund"))
    assert store.get_breaker("refund") == BreakerState(tool="refund")


def test_a_side_effect_record_round_trips_and_is_replaced(store: Store) -> None:
    assert store.get_side_effect("k1") is None
    store.put_side_effect(side_effect("k1"))
    assert store.get_side_effect("k1") == side_effect("k1")
    done = side_effect("k1", status="SUCCEEDED", result={"refund_id": "r_1", "amount": 12.5})
    store.put_side_effect(done)
    assert store.get_side_effect("k1") == done


def test_a_superseded_holder_may_not_start_a_side_effect(store: Store) -> None:
    """The journal's STARTED write is fenced like a step: a holder whose lease was taken over is refused
    before its handler runs, so it cannot land a call the new holder already checked the journal for."""
    start(store)
    first = store.acquire_lease(RUN, "w1", 30.0)
    store.release_lease(first)
    second = store.acquire_lease(RUN, "w2", 30.0)
    assert second.version > first.version
    late = side_effect("k1").model_copy(update={"fencing_token": first.version})
    with pytest.raises(StaleLeaseError):
        store.put_side_effect(late)
    assert store.get_side_effect("k1") is None
    current = side_effect("k1").model_copy(update={"fencing_token": second.version})
    store.put_side_effect(current)
    # Only the start is fenced: what a superseded call later learned is still written (it is the truth).
    store.put_side_effect(late.model_copy(update={"status": "SUCCEEDED", "result": {"ok": 1}}))
    done = store.get_side_effect("k1")
    assert done is not None and done.status == "SUCCEEDED"


def test_one_single_use_grant_is_held_by_one_call(store: Store) -> None:
    """Journalling a guarded call's start consumes its approval: a second key may not hold the same grant."""
    first = side_effect("k1").model_copy(update={"grant_id": "approval_001"})
    store.put_side_effect(first)
    # The same call moving on (SUCCEEDED, retried) keeps its grant.
    store.put_side_effect(first.model_copy(update={"status": "SUCCEEDED", "result": {"ok": 1}}))
    with pytest.raises(RunError) as err:
        store.put_side_effect(side_effect("k2").model_copy(update={"grant_id": "approval_001"}))
    assert err.value.code == "APPROVAL_CONSUMED"
    assert store.get_side_effect("k2") is None
    held = store.get_side_effect("k1")
    assert held is not None and held.grant_id == "approval_001" and held.status == "SUCCEEDED"
    # Another run's grant of the same id, and calls without a grant, are unaffected.
    store.put_side_effect(side_effect("k3", run_id="run_other").model_copy(update={"grant_id": "approval_001"}))
    store.put_side_effect(side_effect("k4"))
    store.put_side_effect(side_effect("k5"))
    assert store.get_side_effect("k5") is not None


def test_side_effects_of_filters_by_run_and_status(store: Store) -> None:
    store.put_side_effect(side_effect("k3", status="UNKNOWN_OUTCOME"))
    store.put_side_effect(side_effect("k1", status="STARTED"))
    store.put_side_effect(side_effect("k2", status="SUCCEEDED"))
    store.put_side_effect(side_effect("k0", run_id="run_other", status="STARTED"))
    in_flight = store.side_effects_of(RUN, ("STARTED", "UNKNOWN_OUTCOME"))
    assert [r.idempotency_key for r in in_flight] == ["k1", "k3"]
    assert store.side_effects_of(RUN, ()) == []


def test_a_side_effect_record_outlives_a_refused_step(store: Store) -> None:
    start(store)
    store.put_side_effect(side_effect("k1"))
    with pytest.raises(RunError):
        store.commit_step(RUN, 0, StepWrite(state=make_state(), events=[ev()]))
    assert store.get_side_effect("k1") == side_effect("k1")


# == migrations ==========================================================================================
def migrations_of(backend: Backend) -> list[list[str]]:
    return SQLITE_MIGRATIONS if backend.kind == "sqlite" else POSTGRES_MIGRATIONS


def test_opening_applies_every_migration(store: Store, backend: Backend) -> None:
    assert backend.schema_version() == len(migrations_of(backend))


def test_reopening_applies_nothing_twice(store: Store, backend: Backend, open_store: Callable[[], Store]) -> None:
    start(store)
    store.close()
    reopened = open_store()
    assert backend.schema_version() == len(migrations_of(backend))
    assert reopened.last_seq(RUN) == 1


def test_a_newer_schema_is_refused(store: Store, backend: Backend, open_store: Callable[[], Store]) -> None:
    store.close()
    backend.set_schema_version(len(migrations_of(backend)) + 1)
    assert code_of(open_store) == "SCHEMA_TOO_NEW"


def test_a_store_of_schema_1_migrates_and_keeps_its_runs(backend: Backend) -> None:
    from stateward.store import _pg_sql

    if backend.kind == "postgres":
        backend.query(_pg_sql.SCHEMA_TABLE)
    for statement in migrations_of(backend)[0]:
        backend.query(statement)
    backend.set_schema_version(1)
    times = ("", "") if backend.kind == "postgres" else (", created_at, updated_at", ", '2026-11-30T12:00:00+00:00', 1")
    backend.query(
        f"INSERT INTO runs(run_id, agent, status, snapshot, last_seq{times[0]})"
        f" VALUES (?, 'tests.store:agent', 'RUNNING', ?, 0{times[1]})",
        RUN,
        make_state().model_dump_json(),
    )
    backend.query(
        "INSERT INTO pending_requests(run_id, request_id, body) VALUES (?, 'approval_001', ?)",
        RUN,
        request(kind=RequestKind.INPUT, approver_role="treasury").model_dump_json(),
    )
    store = backend.open()
    assert backend.schema_version() == len(migrations_of(backend))
    # Its open request's kind, role and agent were copied from its body and its run: the filters find it.
    filtered = store.page_requests(tenant="default", kind="input", role="treasury", agent="tests.store:agent")
    assert [(r.run_id, r.request.request_id) for r in filtered.items] == [(RUN, "approval_001")]
    assert store.page_requests(tenant="default", kind="approval").items == []
    claimed = store.claim_next("w", ttl_s=30)
    assert claimed is not None and claimed.run_id == RUN
    assert [r.run_id for r in store.page_runs(status="RUNNING", agent="tests.store:agent").items] == [RUN]


def test_stores_opened_at_once_on_a_new_database_all_work(backend: Backend) -> None:
    results = race(4, lambda i: backend.open())
    assert not [r for r in results if isinstance(r, BaseException)]
    assert backend.schema_version() == len(migrations_of(backend))
    start(backend.opened[0])
    assert all(s.last_seq(RUN) == 1 for s in backend.opened)


# -- the HTTP service's keys and idempotent responses (schema 4) ---------------------------------------
def api_key(key_id: str = "0123456789abcdef", **update: Any) -> ApiKeyRecord:
    fields: dict[str, Any] = {
        "name": "alice",
        "tenant": "acme",
        "roles": ("approver", "finance"),
        "secret_sha256": sha256_hex("secret"),
        "created_at": T0,
        **update,
    }
    return ApiKeyRecord(key_id=key_id, **fields)


def test_an_api_key_round_trips_and_its_id_is_taken_once(store: Store) -> None:
    keys = cast(KeyStore, store)
    keys.add_api_key(api_key())
    assert keys.get_api_key("0123456789abcdef") == api_key()
    assert keys.get_api_key("ffffffffffffffff") is None
    assert code_of(lambda: keys.add_api_key(api_key(name="mallory"))) == "KEY_EXISTS"
    assert keys.get_api_key("0123456789abcdef") == api_key()


def test_api_keys_list_oldest_first_bounded(store: Store) -> None:
    keys = cast(KeyStore, store)
    for i in range(3):
        keys.add_api_key(api_key(f"{i:016x}", created_at=T0 + timedelta(seconds=10 - i)))
    assert [k.key_id for k in keys.list_api_keys()] == [f"{i:016x}" for i in (2, 1, 0)]
    assert len(keys.list_api_keys(limit=2)) == 2


def test_revoking_a_key_keeps_the_first_revocation_and_an_unknown_key_is_named(store: Store) -> None:
    keys = cast(KeyStore, store)
    keys.add_api_key(api_key())
    first = keys.revoke_api_key("0123456789abcdef", T0 + timedelta(hours=1))
    assert first.revoked_at == T0 + timedelta(hours=1)
    assert keys.revoke_api_key("0123456789abcdef", T0 + timedelta(hours=2)).revoked_at == first.revoked_at
    assert keys.get_api_key("0123456789abcdef") == first
    assert code_of(lambda: keys.revoke_api_key("ffffffffffffffff", T0)) == "KEY_NOT_FOUND"


def test_the_first_response_to_an_idempotency_key_is_kept_per_tenant(store: Store) -> None:
    keys = cast(KeyStore, store)

    def response(tenant: str, body: str) -> StoredResponse:
        return StoredResponse(
            tenant=tenant, idempotency_key="k1", fingerprint=body, status_code=200, body=body, created_at=T0
        )

    assert keys.recall_response("acme", "k1") is None
    assert keys.remember_response(response("acme", "first")).body == "first"
    assert keys.remember_response(response("acme", "second")).body == "first"
    assert keys.remember_response(response("globex", "theirs")).body == "theirs"
    assert keys.recall_response("acme", "k1") == response("acme", "first")


# -- webhooks: subscriptions and the outbox a step writes in its own transaction (schema 5) ------------
def hook(subscription_id: str = "wh_1", tenant: str = "default", *kinds: NoticeKind) -> WebhookSubscription:
    return WebhookSubscription(
        subscription_id=subscription_id,
        tenant=tenant,
        url=f"https://hooks.example/{subscription_id}",
        secret="whsec_x",
        kinds=kinds or tuple(NoticeKind),
        created_at=1000.0,
    )


def wait_events(request_kind: str = "approval") -> list[NewEvent]:
    return [
        NewEvent(
            type=EventType.STATE_TRANSITION, payload={"state_before": "RUNNING", "state_after": "WAITING_FOR_USER"}
        ),
        NewEvent(type=EventType.PENDING_RECORDED, payload={"pending_request_id": "approval_001", "kind": request_kind}),
    ]


def enter_wait(store: Store, request_kind: str = "approval") -> int:
    state, seq = store.load_run_at(RUN)
    waiting = state.model_copy(update={"status": RunStatus.WAITING_FOR_USER})
    return store.commit_step(RUN, seq, StepWrite(state=waiting, events=wait_events(request_kind)))


def test_a_wait_writes_one_delivery_per_subscription_that_wants_it_in_the_steps_transaction(store: Store) -> None:
    hooks = cast(WebhookStore, store)
    start(store)
    hooks.add_webhook(hook("wh_all"))
    hooks.add_webhook(hook("wh_ends", "default", NoticeKind.ENDED))
    hooks.add_webhook(hook("wh_theirs", "globex"))
    state, seq = store.load_run_at(RUN)
    # A refused step (a writer got there first) writes no notification either.
    step(store)
    with pytest.raises(RunError):
        store.commit_step(RUN, seq, StepWrite(state=state, events=wait_events()))
    assert hooks.list_deliveries("default") == []
    last = enter_wait(store)
    [delivery] = hooks.list_deliveries("default")
    assert (delivery.subscription_id, delivery.event_id, delivery.kind) == ("wh_all", f"{RUN}:{last}", "run.waiting")
    assert (delivery.status, delivery.attempts) == ("pending", 0)
    body = json.loads(delivery.body)
    assert (body["id"], body["type"], body["run_id"], body["request_id"]) == (
        f"{RUN}:{last}",
        "run.waiting",
        RUN,
        "approval_001",
    )
    assert hooks.list_deliveries("globex") == []
    assert [h.subscription_id for h in hooks.list_webhooks("default")] == ["wh_all", "wh_ends"]


def test_an_end_and_an_unknown_outcome_are_notified_with_their_own_kinds(store: Store) -> None:
    hooks = cast(WebhookStore, store)
    start(store)
    hooks.add_webhook(hook("wh_all"))
    enter_wait(store, "reconciliation")
    state, seq = store.load_run_at(RUN)
    ended = state.model_copy(update={"status": RunStatus.COMPLETED})
    end = NewEvent(type=EventType.STATE_TRANSITION, payload={"state_before": "RUNNING", "state_after": "COMPLETED"})
    store.commit_step(RUN, seq, StepWrite(state=ended, events=[ev(), end]))
    kinds = [(d.kind, d.event_id) for d in hooks.list_deliveries("default")]
    assert sorted(kinds) == [("run.ended", f"{RUN}:{seq + 2}"), ("run.needs_reconciliation", f"{RUN}:{seq}")]


def test_notices_recorded_from_outside_a_step_are_written_once_however_often_retried(store: Store) -> None:
    hooks = cast(WebhookStore, store)
    hooks.add_webhook(hook("wh_all"))
    hooks.add_webhook(hook("wh_ends", "default", NoticeKind.ENDED))
    hooks.add_webhook(hook("wh_theirs", "globex"))
    waiting = make_state(status=RunStatus.WAITING_FOR_USER)
    notices = notices_of(waiting, 4, wait_events())  # a run kept elsewhere (Temporal): no row of it here
    assert hooks.record_notices(waiting, notices, 1000.0) == 1
    [first] = hooks.list_deliveries("default")
    hooks.delivery_failed(first.delivery_id, "HTTP 503", retry_at=2e9)
    assert hooks.record_notices(waiting, notices, 1001.0) == 0  # the activity retried: nothing doubled
    [kept] = hooks.list_deliveries("default")
    assert (kept.delivery_id, kept.event_id, kept.attempts, kept.last_error) == (
        first.delivery_id,
        f"{RUN}:6",
        1,
        "HTTP 503",
    )  # and nothing reset
    assert hooks.list_deliveries("globex") == []


def test_deliveries_are_claimed_once_retried_when_due_and_settled(store: Store) -> None:
    hooks = cast(WebhookStore, store)
    start(store)
    hooks.add_webhook(hook("wh_all"))
    enter_wait(store)
    [claimed] = hooks.claim_deliveries(now=2e9, limit=10, lease_s=60)
    assert (claimed.url, claimed.secret) == ("https://hooks.example/wh_all", "whsec_x")
    assert hooks.claim_deliveries(now=2e9 + 30, limit=10, lease_s=60) == []  # leased to the first claimer
    hooks.delivery_failed(claimed.delivery_id, "HTTP 503", retry_at=2e9 + 100)
    assert hooks.claim_deliveries(now=2e9 + 99, limit=10, lease_s=60) == []
    [again] = hooks.claim_deliveries(now=2e9 + 100, limit=10, lease_s=60)
    assert (again.attempts, again.last_error) == (1, "HTTP 503")
    hooks.delivery_succeeded(again.delivery_id, at=2e9 + 101)
    [done] = hooks.list_deliveries("default")
    assert (done.status, done.attempts, done.delivered_at, done.last_error) == ("delivered", 2, 2e9 + 101, None)
    assert hooks.claim_deliveries(now=3e9, limit=10, lease_s=60) == []


def test_spent_attempts_fail_a_delivery_and_removing_a_subscription_cancels_its_pending_ones(store: Store) -> None:
    hooks = cast(WebhookStore, store)
    start(store)
    hooks.add_webhook(hook("wh_a"))
    hooks.add_webhook(hook("wh_b"))
    enter_wait(store)
    first, second = sorted(hooks.claim_deliveries(now=2e9, limit=10, lease_s=1), key=lambda d: d.subscription_id)
    hooks.delivery_failed(first.delivery_id, "refused", retry_at=None)
    assert not hooks.remove_webhook("globex", "wh_b")  # another tenant's id is unknown
    assert hooks.remove_webhook("default", "wh_b")
    assert {d.subscription_id: d.status for d in hooks.list_deliveries("default")} == {
        "wh_a": "failed",
        "wh_b": "cancelled",
    }
    assert hooks.claim_deliveries(now=3e9, limit=10, lease_s=1) == []
    assert second.subscription_id == "wh_b"


def test_a_sound_store_passes_its_integrity_check(store: Store) -> None:
    store.create_run(make_state(), [ev(0, EventType.RUN_STARTED), ev(1)])
    store.check_integrity()  # returns without a finding; a damaged SQLite file: tests/cli/test_damaged_store.py


# -- forks: a shared history read through the source's rows ------------------------------------------
def _fork(store: Store, source: str, at: int, run_id: str, events: int = 1, **update: Any) -> int:
    from stateward.core.state import Lineage

    state = make_state(run_id, lineage=Lineage(forked_from=source, at_seq=at, key_scope=source), **update)
    return store.create_fork(
        state, [ev(100 + i, kind=EventType.RUN_FORKED) for i in range(events)], source=source, at_seq=at
    )


def test_a_fork_reads_its_sources_events_up_to_the_fork_point_then_its_own(store: Store) -> None:
    start(store)
    for _ in range(4):
        step(store, events=2)  # batches of two: a fork point inside a batch is read exactly
    source_events = store.read_events(RUN)
    assert len(source_events) == 9
    assert _fork(store, RUN, 4, "run_f", events=2) == 6
    assert step(store, "run_f") == 7
    step(store)  # the source goes on; the fork does not see it
    seen = store.read_events("run_f")
    assert [e.seq for e in seen] == list(range(1, 8))
    assert [e.payload for e in seen[:4]] == [e.payload for e in source_events[:4]]
    assert {e.run_id for e in seen} == {"run_f"}
    assert [e.type for e in seen[4:6]] == [EventType.RUN_FORKED] * 2
    for after in range(8):
        for limit in (None, 1, 2, 3, 10):
            page = store.read_events("run_f", after, limit)
            expected = [e for e in seen if e.seq > after][: limit if limit is not None else None]
            assert [(e.seq, e.payload) for e in page] == [(e.seq, e.payload) for e in expected], (after, limit)
    assert store.last_seq("run_f") == 7
    assert store.forks_of(RUN) == ["run_f"]


def test_a_fork_opens_its_own_request_and_leaves_the_sources_alone(store: Store) -> None:
    start(store)
    step(store, open_request=request("approval_001"))
    reopened = request("approval_f01")
    forked = make_state("run_f", lineage=Lineage(forked_from=RUN, at_seq=2, key_scope=RUN), pending=reopened)
    store.create_fork(forked, [ev(100, kind=EventType.RUN_FORKED)], source=RUN, at_seq=2, open_request=reopened)
    record = store.get_request("run_f", "approval_f01")
    assert record is not None and record.is_open and record.request == reopened
    assert store.get_request("run_f", "approval_001") is None  # the source's request is not the fork's
    listed = [(r.run_id, r.request.request_id) for r in store.page_requests().items]
    assert listed == [(RUN, "approval_001"), ("run_f", "approval_f01")]
    step(store, "run_f", close_request=answer("approval_f01"))
    source = store.get_request(RUN, "approval_001")
    assert source is not None and source.is_open  # answering the fork's never answers the source's


def test_a_fork_of_a_fork_reads_each_source_up_to_its_own_bound(store: Store) -> None:
    start(store)
    for _ in range(5):
        step(store)
    _fork(store, RUN, 5, "run_f")  # 1..5 of run_a, 6 its own
    step(store, "run_f")  # 7
    _fork(store, "run_f", 3, "run_g")  # 1..3 of run_a (through run_f), 4 its own
    seen = store.read_events("run_g")
    assert [e.seq for e in seen] == [1, 2, 3, 4]
    assert [e.payload for e in seen[:3]] == [e.payload for e in store.read_events(RUN)[:3]]
    assert seen[3].type is EventType.RUN_FORKED
    assert store.forks_of("run_f") == ["run_g"] and store.forks_of(RUN) == ["run_f"]


def test_a_fork_writes_no_row_of_its_source(store: Store, backend: Backend) -> None:
    start(store)
    for _ in range(3):
        step(store)
    before = durable(store, backend)
    _fork(store, RUN, 3, "run_f")
    assert durable(store, backend) == before


def test_checkpoints_are_found_at_their_event_through_a_fork(store: Store) -> None:
    start(store)
    step(store, checkpoint="wait")  # 2
    step(store)  # 3
    step(store, checkpoint="pause")  # 4
    found = store.checkpoint_at(RUN, 2)
    assert found is not None and (found.seq, found.reason) == (2, "wait")
    assert store.checkpoint_at(RUN, 3) is None
    _fork(store, RUN, 2, "run_f")
    shared = store.checkpoint_at("run_f", 2)
    assert shared is not None and shared.state == found.state  # the source's, read through
    assert store.checkpoint_at("run_f", 4) is None  # the source's later checkpoint is not the fork's
    assert [c.seq for c in store.checkpoints_of("run_f")] == [2]
