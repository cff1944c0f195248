"""The call runner (core/calls.py): reusable threads for calls that may be abandoned.

A call that ends hands its thread back for the next call; a call abandoned at its deadline or at a pause
keeps its thread to itself until it ends (the thread is then gone, never reused), so a stuck call never
holds up a later one; abandoned calls still running are capped, with a named error past the cap. Through
the gateway: a stuck handler times out, the next call runs at once, and a call refused at the cap is a
refusal without action (journalled FAILED, never UNKNOWN_OUTCOME).
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from stateward import RetryPolicy, ToolContext, ToolRegistry, tool
from stateward.core.calls import CallRunner, Outcome, TooManyAbandonedCalls, default_runner, run_off_loop
from stateward.core.errors import ErrorCode
from stateward.core.interrupt import PauseToken
from stateward.testing import InMemoryGatewayStore
from stateward.tools import CallContext, ToolCall, ToolGateway
from stateward.tools.types import ToolErrorCode

WAIT_S = 20.0  # far longer than anything here should take: a hang fails the test instead of passing it


def _eventually(check: Any, deadline_s: float = WAIT_S) -> bool:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.01)
    return False


def test_calls_one_after_another_reuse_one_thread() -> None:
    runner = CallRunner()
    seen = {runner.run(threading.get_ident, 5.0).result() for _ in range(50)}
    assert len(seen) == 1 and threading.get_ident() not in seen
    assert runner.threads == 1 and runner.abandoned == 0


def test_a_call_s_value_and_exception_come_back_to_the_caller() -> None:
    runner = CallRunner()
    assert runner.run(lambda: 41 + 1, 5.0).result() == 42

    def boom() -> None:
        raise KeyError("lost")

    call = runner.run(boom, 5.0)
    assert call.outcome is Outcome.DONE and isinstance(call.error, KeyError)
    with pytest.raises(KeyError):
        call.result()


def test_a_timed_out_call_is_abandoned_with_its_thread_which_is_never_reused() -> None:
    runner = CallRunner()
    release, late = threading.Event(), threading.Event()
    stuck_thread: list[int] = []

    def stuck() -> str:
        stuck_thread.append(threading.get_ident())
        release.wait(WAIT_S)
        late.set()
        return "late"

    call = runner.run(stuck, 0.05)
    assert call.outcome is Outcome.TIMED_OUT and runner.abandoned == 1
    try:
        # the next calls do not wait for the stuck one: another thread serves them at once
        started = time.monotonic()
        quick = [runner.run(threading.get_ident, WAIT_S) for _ in range(5)]
        assert all(c.outcome is Outcome.DONE for c in quick) and time.monotonic() - started < WAIT_S / 2
        assert {c.value for c in quick}.isdisjoint(stuck_thread)
    finally:
        release.set()
    assert late.wait(WAIT_S)
    assert _eventually(lambda: runner.abandoned == 0)
    assert call.value is None  # its late result is not taken
    assert runner.threads == 1  # the abandoned thread ended; the one serving the quick calls is idle
    assert not any(c.value in stuck_thread for c in (runner.run(threading.get_ident, WAIT_S) for _ in range(5)))


def test_a_pause_token_cancels_the_wait_at_once() -> None:
    runner = CallRunner()
    token, release = PauseToken(), threading.Event()
    threading.Timer(0.05, token.set).start()
    started = time.monotonic()
    call = runner.run(lambda: release.wait(WAIT_S), WAIT_S, token)
    assert call.outcome is Outcome.CANCELLED and time.monotonic() - started < WAIT_S / 2
    assert runner.abandoned == 1
    release.set()
    assert _eventually(lambda: runner.abandoned == 0)


def test_at_the_cap_of_abandoned_calls_a_new_call_is_refused_by_name() -> None:
    runner = CallRunner(max_abandoned=2)
    release = threading.Event()
    try:
        for _ in range(2):
            assert runner.run(lambda: release.wait(WAIT_S), 0.01).outcome is Outcome.TIMED_OUT
        with pytest.raises(TooManyAbandonedCalls) as refused:
            runner.run(lambda: "never run", 5.0)
        assert refused.value.code is ErrorCode.TOO_MANY_ABANDONED_CALLS
        assert refused.value.details == {"abandoned": 2, "max_abandoned": 2}
        assert runner.threads == 2  # no thread was started or used for the refused call
    finally:
        release.set()
    assert _eventually(lambda: runner.abandoned == 0)
    assert runner.run(lambda: "runs again", 5.0).result() == "runs again"


def test_idle_threads_are_bounded_and_end_when_unused() -> None:
    runner = CallRunner(max_idle=2, idle_s=0.1)
    gate = threading.Barrier(5, timeout=WAIT_S)
    calls = [runner.start(gate.wait) for _ in range(4)]
    gate.wait()
    assert all(c.wait(WAIT_S) is Outcome.DONE for c in calls)
    assert _eventually(lambda: runner.threads == 0)  # two kept idle (two ended at once), then idle too long


def test_a_call_awaited_on_a_loop_is_abandoned_at_its_deadline_and_when_cancelled() -> None:
    runner = CallRunner()
    release = threading.Event()

    async def scenario() -> tuple[Outcome, Outcome, Any]:
        timed = await run_off_loop(lambda: release.wait(WAIT_S), timeout_s=0.05, runner=runner)
        waiting = asyncio.ensure_future(run_off_loop(lambda: release.wait(WAIT_S), runner=runner))
        await asyncio.sleep(0.05)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        done = await run_off_loop(lambda: 7, timeout_s=WAIT_S, runner=runner)
        return timed.outcome, done.outcome, done.value

    try:
        timed, done, value = asyncio.run(scenario())
        assert (timed, done, value) == (Outcome.TIMED_OUT, Outcome.DONE, 7)
        assert runner.abandoned == 2
    finally:
        release.set()
    assert _eventually(lambda: runner.abandoned == 0)


# -- through the gateway --------------------------------------------------------------------------
def _invoke(gateway: ToolGateway, name: str, step: int) -> Any:
    return gateway.invoke(ToolCall(tool=name, args={}), CallContext(run_id="run-1", step=step))


def test_a_stuck_handler_times_out_and_the_next_call_runs_at_once() -> None:
    release = threading.Event()

    @tool(timeout_s=0.05, retry=RetryPolicy(max_attempts=1))
    def stuck() -> dict[str, int]:
        """Never answers in time."""
        release.wait(WAIT_S)
        return {}

    @tool(timeout_s=WAIT_S)
    def quick() -> dict[str, int]:
        """Answers at once."""
        return {"ok": 1}

    gateway = ToolGateway(ToolRegistry([stuck, quick]), InMemoryGatewayStore())
    try:
        assert _invoke(gateway, "stuck", 1).error_code is ToolErrorCode.TIMEOUT
        started = time.monotonic()
        assert _invoke(gateway, "quick", 2).result == {"ok": 1}
        assert time.monotonic() - started < WAIT_S / 2
    finally:
        release.set()


def test_a_side_effect_refused_at_the_cap_is_journalled_as_not_run(monkeypatch: pytest.MonkeyPatch) -> None:
    runner = default_runner()
    # A cap of 0 is always reached: every new call is refused. (The cap at today's count would race with an
    # earlier test's abandoned handler finishing, which lowers the count.)
    monkeypatch.setattr(runner, "max_abandoned", 0)
    ran: list[str] = []

    @tool(side_effect=True, timeout_s=5, retry=RetryPolicy(max_attempts=1))
    def send(ctx: ToolContext) -> dict[str, int]:
        """A side effect."""
        ran.append(ctx.idempotency_key)
        return {"sent": 1}

    store = InMemoryGatewayStore()
    outcome = _invoke(ToolGateway(ToolRegistry([send]), store), "send", 1)
    assert ran == [] and outcome.error_code is ToolErrorCode.SERVICE_UNAVAILABLE
    assert outcome.error is not None and "TOO_MANY_ABANDONED_CALLS" in outcome.error
    [record] = store.side_effects()
    assert record.status == "FAILED"  # not run: a later call may run it, no reconciliation needed


def test_a_failing_completion_callback_leaves_the_thread_serving_calls() -> None:
    runner = CallRunner()

    def broken() -> None:
        raise RuntimeError("callback bug")

    call = runner.start(threading.get_ident, on_done=broken)
    assert call.wait(WAIT_S) is Outcome.DONE
    after = runner.run(threading.get_ident, WAIT_S)
    assert after.outcome is Outcome.DONE and after.value == call.value  # the same thread, still alive
