"""Async models and ``async def`` tools under the async Runtime (and the sync one), and the AsyncWorker.

The async entry points run the one runtime implementation bridged onto the event loop, so these tests
check that the same guarantees hold there: a timed-out side effect is reconciled and never retried
blindly, a rejected reply is refused by name, an approval resumes the run exactly once, and many runs
driven concurrently each perform their side effect exactly once.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stateward import (
    Agent,
    AgentRegistry,
    Budget,
    ReActController,
    RetryPolicy,
    RunStatus,
    Runtime,
    ToolContext,
    ToolRegistry,
    tool,
)
from stateward.core.bridge import run_bridged
from stateward.core.events import EventType
from stateward.core.state import is_run_suspended
from stateward.models.base import ModelReply, ModelRequest
from stateward.models.errors import AuthFailedError, ServiceUnavailableError
from stateward.observability.payloads import with_defaults
from stateward.runtime.async_worker import AsyncWorker
from stateward.runtime.leases import LeasePolicy
from stateward.store.sqlite import SQLiteStore
from stateward.testing import AsyncScriptedModel, InMemoryGatewayStore, ScriptedModel
from stateward.tools import CallContext, ToolCall, ToolGateway
from stateward.tools.types import LookupStatus, ToolErrorCode, ToolOutcome


def call_once_then_finish(action: str, args: dict[str, Any]) -> Any:
    def policy(request: ModelRequest) -> dict[str, Any]:
        if request.observations:
            return {"type": "FINISH", "reason": "done"}
        return {"type": "EXECUTE_TOOL", "action": action, "args": args}

    return policy


def react(model: Any, *tools: Any, name: str = "async-test") -> Agent:
    return Agent(
        name=name, controller=ReActController(model), tools=ToolRegistry(list(tools)), budget=Budget(max_steps=8)
    )


def tool_events(runtime: Runtime, run_id: str) -> list[dict[str, Any]]:
    return [with_defaults(e.type, e.payload) for e in runtime.events(run_id) if e.type is EventType.TOOL_ATTEMPTED]


@pytest.fixture
def rt(tmp_path: Path) -> Iterator[Runtime]:
    runtime = Runtime(SQLiteStore(tmp_path / "async.db"))
    yield runtime
    runtime.close()


# -- async tools: timeouts, journal, reconciliation -------------------------------------------------
def hanging_payment(calls: list[str], cancelled: list[str], lookup_answer: LookupStatus) -> Any:
    def lookup(key: str) -> tuple[LookupStatus, Any]:
        return lookup_answer, None

    @tool(side_effect=True, lookup=lookup, timeout_s=0.05)
    async def pay(amount: int, ctx: ToolContext) -> dict[str, int]:
        """Pay out; the answer never comes in time."""
        calls.append(ctx.idempotency_key)
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(ctx.idempotency_key)
            raise
        return {"paid": amount}

    return pay


def test_a_hanging_async_side_effect_is_a_timeout_reconciled_never_retried(rt: Runtime) -> None:
    calls: list[str] = []
    cancelled: list[str] = []
    pay = hanging_payment(calls, cancelled, LookupStatus.UNKNOWN)
    model = AsyncScriptedModel(call_once_then_finish("pay", {"amount": 5}))

    state = asyncio.run(asyncio.wait_for(rt.astart(react(model, pay), "pay once"), 10))

    assert state.status is RunStatus.WAITING_FOR_USER
    assert state.pending is not None and state.pending.kind == "reconciliation"
    assert is_run_suspended(state)
    assert len(calls) == 1 and cancelled == calls  # awaited under its deadline, cancelled, not retried
    [attempt] = tool_events(rt, state.run_id)
    assert attempt["observation"]["error_code"] == "TIMEOUT"
    assert attempt["runtime_action"] == "AWAIT_RECONCILIATION" and attempt["handler_calls"] == 1
    record = rt.store.get_side_effect(calls[0])
    assert record is not None and record.status == "UNKNOWN_OUTCOME"


def test_a_hanging_async_side_effect_the_domain_did_not_execute_is_retried_exactly_once(rt: Runtime) -> None:
    calls: list[str] = []
    cancelled: list[str] = []
    pay = hanging_payment(calls, cancelled, LookupStatus.NOT_EXECUTED)
    model = AsyncScriptedModel(call_once_then_finish("pay", {"amount": 5}))

    state = asyncio.run(asyncio.wait_for(rt.astart(react(model, pay), "pay once"), 10))

    assert len(calls) == 2 and calls[0] == calls[1]  # one retry, under the same idempotency key
    [attempt, *_] = tool_events(rt, state.run_id)
    assert attempt["runtime_action"] == "RETRY_ONCE" and attempt["observation"]["error_code"] == "TIMEOUT"


def test_a_hanging_side_effect_free_async_tool_times_out_per_its_retry_policy(rt: Runtime) -> None:
    calls: list[int] = []

    @tool(timeout_s=0.05, retry=RetryPolicy(max_attempts=2, backoff_base_s=0.01))
    async def fetch(page: int) -> dict[str, int]:
        """Read a page; it never answers."""
        calls.append(page)
        await asyncio.sleep(30)
        return {"page": page}

    model = AsyncScriptedModel(call_once_then_finish("fetch", {"page": 1}))
    state = asyncio.run(asyncio.wait_for(rt.astart(react(model, fetch), "read"), 10))

    assert state.status is RunStatus.COMPLETED
    assert calls == [1, 1]
    [attempt] = tool_events(rt, state.run_id)
    assert attempt["observation"]["status"] == "FAILED" and attempt["observation"]["error_code"] == "TIMEOUT"


@pytest.mark.parametrize("bridged", [True, False], ids=["async-runtime", "sync-runtime"])
def test_a_timeout_error_the_async_handler_raises_itself_is_its_error_not_the_deadline(bridged: bool) -> None:
    @tool(timeout_s=5, retry=RetryPolicy(max_attempts=1))
    async def flaky() -> dict[str, int]:
        """Fails at once with its own TimeoutError."""
        raise TimeoutError("upstream said so")

    @tool(timeout_s=0.05, retry=RetryPolicy(max_attempts=1))
    async def stuck() -> dict[str, int]:
        """Never answers."""
        await asyncio.sleep(30)
        return {}

    gateway = ToolGateway(ToolRegistry([flaky, stuck]), InMemoryGatewayStore())

    def invoke(name: str) -> ToolOutcome:
        return gateway.invoke(ToolCall(tool=name, args={}), CallContext(run_id="run-1", step=1))

    def both() -> tuple[ToolOutcome, ToolOutcome]:
        return invoke("flaky"), invoke("stuck")

    own, deadline = asyncio.run(run_bridged(both)) if bridged else both()
    assert own.error_code is deadline.error_code is ToolErrorCode.TIMEOUT
    assert own.error is not None and "upstream said so" in own.error
    assert deadline.error is not None and deadline.error.startswith("no answer within 0.05s")
    assert "TimeoutError" not in deadline.error


def test_async_models_and_tools_work_under_the_sync_runtime(rt: Runtime) -> None:
    calls: list[str] = []
    cancelled: list[str] = []

    @tool(side_effect=True)
    async def post(text: str) -> dict[str, str]:
        """Post a note."""
        await asyncio.sleep(0)
        return {"posted": text}

    model = AsyncScriptedModel(call_once_then_finish("post", {"text": "hi"}))
    state = rt.start(react(model, post), "post")
    assert state.status is RunStatus.COMPLETED and len(model.calls) == 2
    assert tool_events(rt, state.run_id)[0]["observation"]["result"] == {"posted": "hi"}

    pay = hanging_payment(calls, cancelled, LookupStatus.UNKNOWN)
    waiting = rt.start(react(AsyncScriptedModel(call_once_then_finish("pay", {"amount": 1})), pay), "pay")
    assert waiting.status is RunStatus.WAITING_FOR_USER and waiting.pending is not None
    assert waiting.pending.kind == "reconciliation" and len(calls) == 1


def test_sync_models_and_tools_under_the_async_runtime_run_off_the_loop_thread(rt: Runtime) -> None:
    threads: dict[str, int] = {}

    def policy(request: ModelRequest) -> dict[str, Any]:
        threads["model"] = threading.get_ident()
        return call_once_then_finish("note", {"text": "x"})(request)

    @tool
    def note(text: str) -> dict[str, str]:
        """A blocking tool."""
        threads["tool"] = threading.get_ident()
        return {"noted": text}

    async def main() -> tuple[Any, int]:
        return await rt.astart(react(ScriptedModel(policy), note), "note"), threading.get_ident()

    state, loop_thread = asyncio.run(main())
    assert state.status is RunStatus.COMPLETED
    assert threads["model"] != loop_thread and threads["tool"] != loop_thread


# -- async models: rejections and provider errors -------------------------------------------------
class RejectingModel:
    """An async provider that already knows its reply is not one decision."""

    name = "rejecting"

    async def acomplete(self, request: ModelRequest) -> ModelReply:
        return ModelReply(text="", rejection_code="MULTIPLE_TOOL_CALLS", rejection_message="two tool calls")


class FailingModel:
    name = "failing"

    def __init__(self, error: Exception):
        self.error = error

    async def acomplete(self, request: ModelRequest) -> ModelReply:
        raise self.error


def test_an_async_models_rejected_reply_is_refused_by_name(rt: Runtime) -> None:
    state = asyncio.run(rt.astart(react(RejectingModel()), "decide"))
    assert state.status is RunStatus.FAILED and state.terminal_reason == "rejected_signal"
    assert state.usage.rejected_signals == 1 and state.usage.tool_attempts == 0
    validated = [e.payload for e in rt.events(state.run_id) if e.type is EventType.RUNTIME_VALIDATED]
    assert "MULTIPLE_TOOL_CALLS" in str(validated)


def test_an_async_models_unparseable_text_is_refused(rt: Runtime) -> None:
    state = asyncio.run(rt.astart(react(AsyncScriptedModel(lambda r: "sure, I will pay now")), "decide"))
    assert state.status is RunStatus.FAILED and state.terminal_reason == "rejected_signal"


def test_async_provider_errors_fail_or_pause_the_run_as_for_sync_models(rt: Runtime) -> None:
    auth = asyncio.run(rt.astart(react(FailingModel(AuthFailedError("bad key"))), "decide"))
    assert auth.status is RunStatus.FAILED and auth.terminal_reason == "auth_failed"
    down = asyncio.run(rt.astart(react(FailingModel(ServiceUnavailableError("503"))), "decide"))
    assert down.status is RunStatus.PAUSED and down.terminal_reason == "model_unavailable"


# -- approvals through the async entry points -----------------------------------------------------
def test_aapprove_resumes_the_run_and_runs_the_approved_call_once(rt: Runtime) -> None:
    paid: list[str] = []

    @tool(requires_approval=True)
    async def pay(invoice: str) -> dict[str, str]:
        """Pay an invoice."""
        paid.append(invoice)
        return {"paid": invoice}

    def policy(request: ModelRequest) -> dict[str, Any]:
        if any(o["status"] == "SUCCESS" for o in request.observations):
            return {"type": "FINISH", "reason": "paid"}
        return {"type": "EXECUTE_TOOL", "action": "pay", "args": {"invoice": "INV-7"}}

    model = AsyncScriptedModel(policy)

    async def main() -> tuple[Any, Any, Any]:
        waiting = await rt.astart(react(model, pay), "pay INV-7")
        assert waiting.pending is not None and paid == []
        done = await rt.aapprove(waiting.run_id, waiting.pending.request_id, by="alice")
        again = await rt.aapprove(waiting.run_id, waiting.pending.request_id, by="bob")
        return waiting, done, again

    waiting, done, again = asyncio.run(main())
    assert waiting.status is RunStatus.WAITING_FOR_USER and waiting.pending.request_id == "approval_001"
    assert done.state.status is RunStatus.COMPLETED
    assert again.already_answered and again.state.status is RunStatus.COMPLETED
    assert paid == ["INV-7"]
    assert done.state.usage.approvals_consumed == 1


def test_areject_shows_the_model_a_rejection(rt: Runtime) -> None:
    @tool(requires_approval=True)
    async def pay(invoice: str) -> dict[str, str]:
        """Pay an invoice."""
        return {"paid": invoice}

    seen: list[str] = []

    def policy(request: ModelRequest) -> dict[str, Any]:
        seen.extend(o["status"] for o in request.observations)
        if request.observations:
            return {"type": "FINISH", "reason": "gave up"}
        return {"type": "EXECUTE_TOOL", "action": "pay", "args": {"invoice": "INV-8"}}

    async def main() -> Any:
        waiting = await rt.astart(react(AsyncScriptedModel(policy), pay), "pay INV-8")
        assert waiting.pending is not None
        return await rt.areject(waiting.run_id, waiting.pending.request_id, by="alice", comment="no")

    result = asyncio.run(main())
    assert "REJECTED" in seen
    assert result.state.status is RunStatus.FAILED and result.state.terminal_reason == "rejected_by_approver"


# -- the AsyncWorker: the benchmark's correctness twin ---------------------------------------------
class Ledger:
    """The domain: one row per idempotency key (a unique constraint), every handler entry counted."""

    def __init__(self, path: Path):
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("CREATE TABLE ledger (idempotency_key TEXT PRIMARY KEY, run_id TEXT NOT NULL)")
        self._db.execute("CREATE TABLE entries (idempotency_key TEXT NOT NULL)")
        self._lock = threading.Lock()

    def post(self, key: str, run_id: str) -> None:
        with self._lock:
            self._db.execute("INSERT INTO entries VALUES (?)", (key,))
            self._db.execute("INSERT INTO ledger VALUES (?, ?)", (key, run_id))  # a duplicate raises

    def count(self, table: str) -> int:
        with self._lock:
            return int(self._db.execute(f"SELECT count(*) FROM {table}").fetchone()[0])

    def close(self) -> None:
        self._db.close()


def ledger_agents(ledger: Ledger, peak: list[int]) -> AgentRegistry:
    in_flight = [0]

    @tool(side_effect=True)
    async def post_entry(amount: int, ctx: ToolContext) -> dict[str, Any]:
        """Post one ledger entry for the run (a real effect)."""
        in_flight[0] += 1
        peak[0] = max(peak[0], in_flight[0])
        try:
            await asyncio.sleep(0.02)
            ledger.post(ctx.idempotency_key, ctx.run_id)
        finally:
            in_flight[0] -= 1
        return {"posted": amount}

    registry = AgentRegistry()

    @registry.agent("ledger-poster")
    def build() -> Agent:
        """Posts one entry, then finishes."""
        model = AsyncScriptedModel(call_once_then_finish("post_entry", {"amount": 3}), latency_s=0.02)
        return react(model, post_entry, name="ledger-poster")

    return registry


@pytest.mark.parametrize("synchronous", ["FULL", "NORMAL"])  # store calls offloaded / on the loop's thread
def test_many_concurrent_runs_under_async_workers_each_side_effect_once(tmp_path: Path, synchronous: str) -> None:
    runs = 60
    ledger = Ledger(tmp_path / "ledger.db")
    peak = [0]
    agents = ledger_agents(ledger, peak)
    db = tmp_path / "runs.db"
    submitter = Runtime(SQLiteStore(db, synchronous=synchronous), agents=agents)
    ids = [submitter.submit(agents.create("ledger-poster"), f"post {i}").run_id for i in range(runs)]
    submitter.close()
    # Two workers on one store, in one loop: every claim must exclude the other.
    runtimes = [Runtime(SQLiteStore(db, synchronous=synchronous), agents=agents) for _ in range(2)]
    workers = [AsyncWorker(rt, concurrency=25, poll_s=0.02, expire_every_s=60) for rt in runtimes]

    async def main() -> None:
        await asyncio.wait_for(asyncio.gather(*(w.arun(idle_exit_s=0.3) for w in workers)), 60)

    try:
        asyncio.run(main())
        states = [runtimes[0].get(run_id) for run_id in ids]
        assert [s.status for s in states] == [RunStatus.COMPLETED] * runs
        assert all(s.usage.tool_attempts == 1 and s.usage.illegal_transitions == 0 for s in states)
        assert ledger.count("entries") == runs and ledger.count("ledger") == runs  # each effect exactly once
        assert sum(w.stats.claimed for w in workers) == runs  # no run driven by two workers
        assert all(w.stats.errors == w.stats.loop_errors == w.stats.stale_leases == 0 for w in workers)
        assert peak[0] > 1  # the runs really overlapped in the one loop
    finally:
        for runtime in runtimes:
            runtime.close()
        ledger.close()


def test_a_stopped_async_worker_claims_nothing_and_leaves_runs_running(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.db")
    agents = ledger_agents(ledger, [0])
    runtime = Runtime(SQLiteStore(tmp_path / "runs.db"), agents=agents)
    try:
        run_id = runtime.submit(agents.create("ledger-poster"), "post").run_id
        worker = AsyncWorker(runtime, concurrency=4, poll_s=0.02)
        worker.stop.set()
        stats = worker.run()
        assert stats.claimed == 0
        assert runtime.get(run_id).status is RunStatus.RUNNING and runtime.store.lease_of(run_id) is None
    finally:
        runtime.close()
        ledger.close()


@pytest.mark.parametrize(("synchronous", "on_loop_thread"), [("FULL", False), ("NORMAL", True)])
def test_the_async_runtime_calls_a_store_without_fsyncs_on_the_loop_thread(
    tmp_path: Path, synchronous: str, on_loop_thread: bool
) -> None:
    """A commit that fsyncs would stall every run in the loop: it goes to a thread. One that does not
    costs less than the hop, so it runs where it is called."""
    threads: list[int] = []

    class Watched(SQLiteStore):
        def commit_step(self, *args: Any, **kwargs: Any) -> int:
            threads.append(threading.get_ident())
            return super().commit_step(*args, **kwargs)

    runtime = Runtime(Watched(tmp_path / "runs.db", synchronous=synchronous))
    model = AsyncScriptedModel(call_once_then_finish("quote", {"sku": "A"}))

    @tool
    async def quote(sku: str) -> dict[str, str]:
        """An async tool."""
        return {"sku": sku}

    async def main() -> tuple[Any, int]:
        return await runtime.astart(react(model, quote), "quote A"), threading.get_ident()

    try:
        state, loop_thread = asyncio.run(main())
    finally:
        runtime.close()
    assert state.status is RunStatus.COMPLETED and len(threads) >= 2
    assert all((t == loop_thread) is on_loop_thread for t in threads)


def slow_call_agents(seconds: float) -> AgentRegistry:
    registry = AgentRegistry()

    @tool
    async def survey(site: str) -> dict[str, str]:
        """A long read-only call: the run's lease must outlive it."""
        await asyncio.sleep(seconds)
        return {"site": site}

    @registry.agent("slow-surveyor")
    def build() -> Agent:
        """Surveys once, then finishes."""
        return react(AsyncScriptedModel(call_once_then_finish("survey", {"site": "A"})), survey, name="slow-surveyor")

    return registry


def test_an_async_worker_keeps_a_runs_lease_alive_through_a_call_longer_than_its_ttl(tmp_path: Path) -> None:
    agents = slow_call_agents(1.0)
    db = tmp_path / "runs.db"
    runtime = Runtime(SQLiteStore(db), agents=agents, lease=LeasePolicy(ttl_s=0.45, heartbeat_s=0.15))
    rival = SQLiteStore(db)
    run_id = runtime.submit(agents.create("slow-surveyor"), "survey A").run_id
    worker = AsyncWorker(runtime, concurrency=2, poll_s=0.02)
    rival_claims: list[Any] = []

    async def main() -> None:
        working = asyncio.create_task(worker.arun(idle_exit_s=0.2))
        await asyncio.sleep(0.7)  # the call is in flight, well past the lease's first expiry
        rival_claims.append(await asyncio.to_thread(rival.claim_next, "rival", 30))
        await working

    try:
        asyncio.run(asyncio.wait_for(main(), 30))
        assert rival_claims == [None]  # renewed meanwhile: nobody else could take the run
        assert runtime.get(run_id).status is RunStatus.COMPLETED
        assert worker.stats.stale_leases == 0 and worker.stats.claimed == 1
    finally:
        rival.close()
        runtime.close()


def test_an_async_worker_fills_its_free_slots_with_one_claim(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.db")
    peak = [0]
    agents = ledger_agents(ledger, peak)
    asked: list[int] = []

    class Counted(SQLiteStore):
        def claim_batch(
            self, owner: str, ttl_s: float, limit: int, statuses: tuple[str, ...] = ("RUNNING",), **kw: Any
        ) -> Any:
            asked.append(limit)
            return super().claim_batch(owner, ttl_s, limit, **kw)

    runtime = Runtime(Counted(tmp_path / "runs.db"), agents=agents)
    try:
        ids = [runtime.submit(agents.create("ledger-poster"), f"post {i}").run_id for i in range(10)]
        stats = AsyncWorker(runtime, concurrency=4, poll_s=0.02).run(idle_exit_s=0.2)
        assert asked[0] == 4  # every slot free: one claim for all four
        assert all(1 <= n <= 4 for n in asked)
        assert stats.claimed == 10 and peak[0] <= 4
        assert [runtime.get(run_id).status for run_id in ids] == [RunStatus.COMPLETED] * 10
    finally:
        runtime.close()
        ledger.close()
