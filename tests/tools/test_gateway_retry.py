"""Retry policy: which failure classes are retried, how often, and after how long (recorded, never
slept)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from stateward.tools import (
    BreakerPolicy,
    CallContext,
    InMemoryGatewayStore,
    OutcomeStatus,
    RateLimited,
    RetryPolicy,
    RuntimeAction,
    ServiceUnavailable,
    ToolCall,
    ToolErrorCode,
    ToolGateway,
    ToolInvalidArgument,
    ToolOutcome,
    ToolPermissionDenied,
    ToolRegistry,
    tool,
)

CTX = CallContext(run_id="run-r", step=1)
NO_BREAKER = BreakerPolicy(failure_threshold=100)


class Script:
    """A handler that raises the scripted exceptions in turn, then answers "ok"."""

    def __init__(self, *failures: BaseException | Callable[[], object]):
        self.failures = list(failures)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.failures:
            failure = self.failures.pop(0)
            if isinstance(failure, BaseException):
                raise failure
            failure()
        return "ok"


def run(
    script: Script, *, side_effect: bool = False, ctx: CallContext = CTX, timeout_s: float = 5.0, **retry: Any
) -> tuple[ToolOutcome, list[float]]:
    sleeps: list[float] = []
    spec = tool(
        name="op",
        side_effect=side_effect,
        timeout_s=timeout_s,
        retry=RetryPolicy(**retry),
        breaker=NO_BREAKER,
    )(script.__call__)
    gw = ToolGateway(ToolRegistry([spec]), InMemoryGatewayStore(), sleep=sleeps.append)
    return gw.invoke(ToolCall(tool="op"), ctx), sleeps


def test_rate_limited_honours_retry_after() -> None:
    script = Script(RateLimited(retry_after_s=7.0))
    out, sleeps = run(script, backoff_base_s=0.1)
    assert out.status is OutcomeStatus.SUCCESS
    assert out.runtime_action is RuntimeAction.RETRY
    assert out.error_code is ToolErrorCode.RATE_LIMITED  # first failure class stays visible
    assert sleeps == [7.0]
    assert script.calls == 2
    assert [a.sequence for a in out.attempts] == [1, 2]
    assert out.budget_used == 2


def test_retry_after_ignored_when_policy_says_so() -> None:
    out, sleeps = run(Script(RateLimited(retry_after_s=7.0)), backoff_base_s=0.1, honour_retry_after=False)
    assert out.status is OutcomeStatus.SUCCESS
    assert sleeps == [0.1]


def test_retry_after_longer_than_allowed_ends_the_call() -> None:
    script = Script(RateLimited(retry_after_s=600.0))
    out, sleeps = run(script, max_retry_after_s=60.0)
    assert out.status is OutcomeStatus.FAILED
    assert out.last_error_code is ToolErrorCode.RATE_LIMITED
    assert sleeps == []
    assert script.calls == 1


def test_backoff_is_exponential_capped_and_bounded_by_max_attempts() -> None:
    script = Script(*(ServiceUnavailable("503") for _ in range(10)))
    out, sleeps = run(script, max_attempts=6, backoff_base_s=0.5, backoff_cap_s=3.0)
    assert script.calls == 6
    assert sleeps == [0.5, 1.0, 2.0, 3.0, 3.0]  # doubling (linear growth would give 1.5 third), then the cap
    assert out.status is OutcomeStatus.FAILED
    assert out.last_error_code is ToolErrorCode.SERVICE_UNAVAILABLE
    assert out.runtime_action is RuntimeAction.RETRY
    assert out.handler_calls == 6


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (ToolPermissionDenied("no"), ToolErrorCode.PERMISSION_DENIED),
        (ToolInvalidArgument("bad order id"), ToolErrorCode.INVALID_ARGUMENT),
        (ValueError("boom"), ToolErrorCode.EXECUTION_ERROR),
    ],
)
def test_final_failure_classes_are_never_retried(exc: BaseException, code: ToolErrorCode) -> None:
    script = Script(exc)
    out, sleeps = run(script, max_attempts=5)
    assert script.calls == 1
    assert sleeps == []
    assert out.error_code is code
    assert out.status is OutcomeStatus.FAILED
    assert out.runtime_action is RuntimeAction.EXECUTE


def test_retries_consume_the_tool_call_budget() -> None:
    script = Script(*(ServiceUnavailable("503") for _ in range(10)))
    out, sleeps = run(script, ctx=CTX.model_copy(update={"remaining_tool_calls": 2}), max_attempts=5)
    assert script.calls == 2
    assert out.budget_used == 2
    assert len(sleeps) == 1
    assert out.status is OutcomeStatus.FAILED
    assert out.attempts[-1].error_code == ToolErrorCode.BUDGET_EXCEEDED.value


def test_timeout_of_side_effect_free_tool_is_retried() -> None:
    release = threading.Event()
    script = Script(lambda: release.wait(5))
    try:
        out, sleeps = run(script, timeout_s=0.05, max_attempts=2, backoff_base_s=0.0)
    finally:
        release.set()
    assert out.status is OutcomeStatus.SUCCESS
    assert out.error_code is ToolErrorCode.TIMEOUT
    assert out.runtime_action is RuntimeAction.RETRY
    assert script.calls == 2
    assert sleeps == [0.0]


def test_timeout_of_side_effecting_tool_is_not_blindly_retried() -> None:
    release = threading.Event()
    script = Script(lambda: release.wait(5))
    try:
        out, _ = run(script, side_effect=True, timeout_s=0.05, max_attempts=5)
    finally:
        release.set()
    assert script.calls == 1
    assert out.status is OutcomeStatus.PENDING_VERIFICATION
    assert out.runtime_action is RuntimeAction.AWAIT_RECONCILIATION
