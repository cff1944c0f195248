"""Answers on the Temporal backend: a run that stops for an approval is a workflow waiting; another process
answers it (``stateward approve --db temporal://...``), and the same rules as on a store hold. A refused answer
is rejected by the Update's validator: the workflow's history does not grow and the run is unchanged."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path

import pytest
from tests.temporal.conftest import cli, hosted_worker
from tests.temporal.temporal_agents import registry

from stateward.core.errors import ErrorCode, RequestRefusedError, RunError, RunNotFoundError, StoreError
from stateward.core.state import RunState
from stateward.core.status import RunStatus
from stateward.temporal.client import TemporalRuntime

pytestmark = [pytest.mark.temporal, pytest.mark.slow]


def _waiting(runtime: TemporalRuntime, ledger: Path, tenant: str = "default") -> RunState:
    agent = registry.create("refunds", {"ledger": str(ledger)})
    state = runtime.start(agent, "refund order A-1 of c-42", tenant=tenant)
    assert state.status is RunStatus.WAITING_FOR_USER
    assert state.pending is not None and state.pending.guarded_action is not None
    assert state.pending.guarded_action.tool == "refund_order"
    return state


def _refunds(ledger: Path) -> list[str]:
    return ledger.read_text().split() if ledger.exists() else []


def _history_length(runtime: TemporalRuntime, run_id: str) -> int:
    """The workflow's history length once nothing is in flight (the wait's notify activity, and the workflow task
    its completion schedules, are done): only an answer could grow it after that."""

    async def count() -> int:
        handle = runtime._conn.handle(run_id)
        for _ in range(200):
            raw = (await handle.describe()).raw_description
            if not raw.pending_activities and not raw.HasField("pending_workflow_task"):
                break
            await asyncio.sleep(0.05)
        history = await handle.fetch_history()
        return len(history.events)

    return runtime._conn.run(count())


def test_a_run_waits_until_another_process_approves_it_then_the_refund_runs_once(
    runtime: TemporalRuntime, worker: None, temporal_url: str, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    state = _waiting(runtime, ledger)
    assert _refunds(ledger) == []  # waiting really stopped it: the guarded call has not run
    pending = state.pending
    assert pending is not None

    approved = cli("approve", state.run_id, pending.request_id, "--db", temporal_url, "--by", "alice", "--json")
    assert approved.returncode == 0, approved.stderr
    out = json.loads(approved.stdout)
    assert (out["status"], out["terminal_reason"], out["already_answered"]) == ("COMPLETED", "completed", False)
    assert out["answer"]["by"] == "alice"
    assert len(_refunds(ledger)) == 1

    again = cli("approve", state.run_id, pending.request_id, "--db", temporal_url, "--by", "alice", "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["already_answered"] is True  # the same answer again: nothing done again
    assert len(_refunds(ledger)) == 1

    shown = cli("runs", "show", state.run_id, "--db", temporal_url, "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["status"] == "COMPLETED"
    types = [e.type.value for e in runtime.events(state.run_id)]
    assert types.count("request_answered") == 1 and types[-1] == "run_exited"


def test_refused_answers_leave_no_history_and_the_run_unchanged(
    runtime: TemporalRuntime, worker: None, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    state = _waiting(runtime, ledger, tenant="acme")
    pending = state.pending
    assert pending is not None
    before = _history_length(runtime, state.run_id)
    events_before = len(runtime.events(state.run_id))

    def refused(**asked: object) -> ErrorCode:
        with pytest.raises(RequestRefusedError) as caught:
            runtime.approve(state.run_id, str(asked.pop("request_id", pending.request_id)), by="mallory", **asked)  # type: ignore[arg-type]
        return caught.value.code

    assert refused(digest="sha256:" + "0" * 64) is ErrorCode.ACTION_DIGEST_MISMATCH
    assert refused(tenant="globex") is ErrorCode.UNKNOWN_REQUEST  # another tenant's request: as if none existed
    assert refused(request_id="approval_999") is ErrorCode.UNKNOWN_REQUEST
    assert _history_length(runtime, state.run_id) == before
    assert len(runtime.events(state.run_id)) == events_before
    assert runtime.get(state.run_id).status is RunStatus.WAITING_FOR_USER
    assert _refunds(ledger) == []

    digest = pending.guarded_action.digest if pending.guarded_action is not None else None
    done = runtime.approve(state.run_id, pending.request_id, by="alice", tenant="acme", digest=digest)
    assert done.state.status is RunStatus.COMPLETED
    with pytest.raises(RequestRefusedError) as second:  # a different second answer: refused, the first stands
        runtime.reject(state.run_id, pending.request_id, by="bob", tenant="acme")
    assert second.value.code is ErrorCode.REQUEST_ALREADY_ANSWERED
    assert len(_refunds(ledger)) == 1


def test_a_cancelled_run_refuses_its_approval_and_its_refund_never_runs(
    runtime: TemporalRuntime, worker: None, temporal_url: str, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    state = _waiting(runtime, ledger)
    pending = state.pending
    assert pending is not None
    cancelled = cli("cancel", state.run_id, "--db", temporal_url, "--by", "ops", "--json")
    assert cancelled.returncode == 0, cancelled.stderr
    assert json.loads(cancelled.stdout)["status"] == "CANCELLED"
    late = cli("approve", state.run_id, pending.request_id, "--db", temporal_url, "--json")
    assert late.returncode != 0
    assert json.loads(late.stdout)["error"]["code"] in ("REQUEST_CLOSED", "RUN_ENDED")
    with pytest.raises(RunError) as again:
        runtime.cancel(state.run_id)
    assert again.value.code is ErrorCode.RUN_ENDED
    assert _refunds(ledger) == []


def test_an_unknown_run_is_run_not_found(runtime: TemporalRuntime, worker: None) -> None:
    with pytest.raises(RunNotFoundError):
        runtime.get("run_nosuchrun0000000")
    with pytest.raises(RunNotFoundError):
        runtime.approve("run_nosuchrun0000000", "approval_001", by="alice")


def test_a_long_history_goes_on_as_new_executions_with_the_whole_book(
    temporal_url: str, worker: None, tmp_path: Path
) -> None:
    runtime = TemporalRuntime.open(temporal_url, agents=registry, max_history_events=20)
    try:
        ledger = tmp_path / "ledger"
        state = _waiting(runtime, ledger)
        first = runtime._conn.run(runtime._conn.handle(state.run_id).describe())
        assert state.pending is not None
        done = runtime.approve(state.run_id, state.pending.request_id, by="alice")
        assert done.state.status is RunStatus.COMPLETED and len(_refunds(ledger)) == 1
        last = runtime._conn.run(runtime._conn.handle(state.run_id).describe())
        assert last.run_id != first.run_id  # continued as new at least once since it waited
        events = runtime.events(state.run_id)
        assert [e.seq for e in events] == list(range(1, len(events) + 1))  # nothing of the book was lost
        assert [e.type.value for e in events].count("run_started") == 1 and events[-1].type.value == "run_exited"
        assert _history_length(runtime, state.run_id) < 60
    finally:
        runtime.close()


def test_an_open_runs_state_reads_as_committed_with_no_worker_up(temporal_url: str, tmp_path: Path) -> None:
    runtime = TemporalRuntime.open(temporal_url, agents=registry, query_timeout=timedelta(seconds=2))
    try:
        with hosted_worker(temporal_url):
            waiting = _waiting(runtime, tmp_path / "ledger")
        read = runtime.get(waiting.run_id)  # from the workflow's memo: the state its last workflow task committed
        assert read == waiting and read.pending is not None
        with pytest.raises(StoreError) as unread:  # the events are the workflow's to answer: said, not hung
            runtime.events(waiting.run_id)
        assert unread.value.code is ErrorCode.STORE_UNAVAILABLE
    finally:
        runtime.close()
