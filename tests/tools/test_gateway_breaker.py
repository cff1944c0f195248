"""Circuit breaker: shared state via the store, fail-fast while OPEN, health-check-only probes."""

from __future__ import annotations

import threading
from typing import Any

from stateward.tools import (
    BreakerPolicy,
    BreakerPosition,
    CallContext,
    InMemoryGatewayStore,
    OutcomeStatus,
    RetryPolicy,
    ServiceUnavailable,
    ToolCall,
    ToolErrorCode,
    ToolGateway,
    ToolOutcome,
    ToolRegistry,
    tool,
)

CTX = CallContext(run_id="run-b", step=1)
COOLDOWN = 30.0


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


class Service:
    """A remote service that is down or up; counts business calls and health probes separately."""

    def __init__(self) -> None:
        self.up = False
        self.hang = False
        self.calls = 0
        self.probes = 0
        self.release = threading.Event()

    def fetch(self) -> str:
        self.calls += 1
        if self.hang:
            self.release.wait(5)
        if not self.up:
            raise ServiceUnavailable("503 Service Unavailable")
        return "data"

    def healthy(self) -> bool:
        self.probes += 1
        return self.up


def setup(
    *, health: bool = True, side_effect: bool = False, max_attempts: int = 1, store: Any = None
) -> tuple[Service, ToolGateway, Clock]:
    svc, clock = Service(), Clock()
    spec = tool(
        name="fetch",
        side_effect=side_effect,
        timeout_s=0.05,
        retry=RetryPolicy(max_attempts=max_attempts, backoff_base_s=0),
        breaker=BreakerPolicy(failure_threshold=3, cooldown_s=COOLDOWN),
        health_check=svc.healthy if health else None,
    )(svc.fetch)
    gw = ToolGateway(ToolRegistry([spec]), store or InMemoryGatewayStore(), sleep=lambda s: None, clock=clock)
    return svc, gw, clock


def call(gw: ToolGateway) -> ToolOutcome:
    return gw.invoke(ToolCall(tool="fetch"), CTX)


def test_three_consecutive_unavailable_open_the_circuit_and_calls_fail_fast() -> None:
    svc, gw, _ = setup()
    for expected_failures in (1, 2):
        assert call(gw).error_code is ToolErrorCode.SERVICE_UNAVAILABLE
        state = gw.breaker_state("fetch")
        assert (state.position, state.consecutive_failures) == (BreakerPosition.CLOSED, expected_failures)
    call(gw)
    assert gw.breaker_state("fetch").position is BreakerPosition.OPEN
    assert svc.calls == 3

    for _ in range(5):
        out = call(gw)
        assert out.error_code is ToolErrorCode.CIRCUIT_OPEN
        assert out.status is OutcomeStatus.REJECTED
        assert out.handler_calls == 0
    assert svc.calls == 3
    assert svc.probes == 0  # no probing while cooling down


def test_half_open_probe_uses_only_the_health_check() -> None:
    svc, gw, clock = setup()
    for _ in range(3):
        call(gw)
    clock.now += COOLDOWN + 1

    # unhealthy probe: back to OPEN, the business call never ran, the cooldown restarts
    out = call(gw)
    assert out.error_code is ToolErrorCode.CIRCUIT_OPEN
    assert (svc.probes, svc.calls) == (1, 3)
    state = gw.breaker_state("fetch")
    assert state.position is BreakerPosition.OPEN
    assert state.opened_at is not None and state.opened_at.timestamp() == clock.now
    call(gw)
    assert svc.probes == 1  # cooling down again: no probe

    # healthy probe closes the circuit and only then the call goes through
    svc.up = True
    clock.now += COOLDOWN + 1
    out = call(gw)
    assert out.status is OutcomeStatus.SUCCESS
    assert (svc.probes, svc.calls) == (2, 4)
    assert gw.breaker_state("fetch").position is BreakerPosition.CLOSED
    assert gw.breaker_state("fetch").consecutive_failures == 0


def test_one_timeout_does_not_open_the_circuit_and_success_resets_the_count() -> None:
    svc, gw, _ = setup()
    svc.hang = True
    try:
        assert call(gw).error_code is ToolErrorCode.TIMEOUT
    finally:
        svc.release.set()
    svc.hang = False
    state = gw.breaker_state("fetch")
    assert (state.position, state.consecutive_failures) == (BreakerPosition.CLOSED, 1)
    call(gw)  # unavailable: 2 consecutive
    svc.up = True
    assert call(gw).status is OutcomeStatus.SUCCESS
    assert gw.breaker_state("fetch").consecutive_failures == 0
    svc.up = False
    call(gw)
    call(gw)
    assert gw.breaker_state("fetch").position is BreakerPosition.CLOSED


def test_circuit_opening_mid_retry_stops_the_retries() -> None:
    svc, gw, _ = setup(max_attempts=10)
    out = call(gw)
    assert svc.calls == 3
    assert out.last_error_code is ToolErrorCode.CIRCUIT_OPEN
    assert out.error_code is ToolErrorCode.SERVICE_UNAVAILABLE


def test_breaker_state_is_shared_through_the_store() -> None:
    store = InMemoryGatewayStore()
    _, gw_a, _ = setup(store=store)
    svc_b, gw_b, _ = setup(store=store)
    for _ in range(3):
        call(gw_a)
    assert call(gw_b).error_code is ToolErrorCode.CIRCUIT_OPEN
    assert svc_b.calls == 0


def test_side_effect_free_tool_without_health_check_uses_one_trial_call() -> None:
    svc, gw, clock = setup(health=False)
    for _ in range(3):
        call(gw)
    clock.now += COOLDOWN + 1
    svc.up = True
    assert call(gw).status is OutcomeStatus.SUCCESS
    assert gw.breaker_state("fetch").position is BreakerPosition.CLOSED


def test_failed_trial_call_reopens_the_circuit() -> None:
    svc, gw, clock = setup(health=False)
    for _ in range(3):
        call(gw)
    clock.now += COOLDOWN + 1
    assert call(gw).error_code is ToolErrorCode.SERVICE_UNAVAILABLE
    assert gw.breaker_state("fetch").position is BreakerPosition.OPEN
    assert call(gw).error_code is ToolErrorCode.CIRCUIT_OPEN
    assert svc.calls == 4


def test_side_effecting_tool_without_health_check_is_never_probed_with_a_real_call() -> None:
    svc, gw, clock = setup(health=False, side_effect=True)
    for _ in range(3):
        call(gw)
    svc.up = True
    clock.now += 10 * COOLDOWN
    assert call(gw).error_code is ToolErrorCode.CIRCUIT_OPEN
    assert svc.calls == 3
    gw.reset_breaker("fetch")  # an operator decides
    assert call(gw).status is OutcomeStatus.SUCCESS
    assert svc.calls == 4
