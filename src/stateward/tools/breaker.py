"""Per-tool circuit breaker whose state lives in the GatewayStore, so every process sees one circuit.

CLOSED --N consecutive SERVICE_UNAVAILABLE/TIMEOUT/EXECUTION_ERROR--> OPEN --cooldown--> HALF_OPEN.
In HALF_OPEN only the tool's side-effect-free ``health_check`` probes: healthy -> CLOSED, else OPEN
again (cooldown restarts). Without a health check (documented choice):

* a side-effect-free tool lets the first call after the cooldown through as the trial (it cannot
  change anything), success closes the circuit, failure re-opens it;
* a side-effecting tool is never probed with a real business call: it stays OPEN until an operator
  calls ``reset`` (``ToolGateway.reset_breaker``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict, Field

from stateward.core.journal import BreakerPosition, BreakerState

from .ports import GatewayStore
from .retry import BREAKER_FAILURES
from .types import ToolErrorCode

_KEPT_CLOSED = 1024  # tools whose never-tripped state a breaker keeps made (a registry's tools, in practice)


class BreakerPolicy(BaseModel):
    """When a tool's circuit opens (consecutive failures) and how long it stays open before a half-open probe."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    failure_threshold: int = Field(default=3, ge=1)
    cooldown_s: float = Field(default=30.0, ge=0)


class CircuitBreaker:
    """Reads and writes breaker state through the store; time comes from the injected ``clock``."""

    def __init__(self, store: GatewayStore, clock: Callable[[], float]):
        self._store = store
        self._clock = clock
        self._never_tripped: dict[str, BreakerState] = {}  # a frozen value per tool, made once

    def state(self, tool: str) -> BreakerState:
        """The tool's breaker state (CLOSED when it never tripped)."""
        found = self._store.get_breaker(tool)
        if found is not None:
            return found
        closed = self._never_tripped.get(tool)
        if closed is None:
            closed = BreakerState(tool=tool)
            if len(self._never_tripped) < _KEPT_CLOSED:
                self._never_tripped[tool] = closed
        return closed

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self._clock(), UTC)

    def _cooling(self, state: BreakerState, policy: BreakerPolicy) -> bool:
        opened = state.opened_at.timestamp() if state.opened_at else float("-inf")
        return self._clock() - opened < policy.cooldown_s

    def _put(self, tool: str, position: BreakerPosition, failures: int = 0) -> None:
        opened_at = None if position is BreakerPosition.CLOSED else self._now()
        self._store.put_breaker(
            BreakerState(tool=tool, position=position, consecutive_failures=failures, opened_at=opened_at)
        )

    def admit(
        self,
        tool: str,
        policy: BreakerPolicy,
        *,
        probe: Callable[[], bool] | None,
        side_effect: bool,
        state: BreakerState | None = None,
    ) -> bool:
        """May a call reach the handler now? Runs the health probe when the cooldown has passed.
        ``state``: the tool's state, if the caller has just read it (else it is read here)."""
        state = self.state(tool) if state is None else state
        if state.position is BreakerPosition.CLOSED:
            return True
        if self._cooling(state, policy):
            return False  # OPEN and cooling down, or a HALF_OPEN trial is in flight
        if probe is None:
            if side_effect:
                return False
            self._put(tool, BreakerPosition.HALF_OPEN, state.consecutive_failures)
            return True
        self._put(tool, BreakerPosition.HALF_OPEN, state.consecutive_failures)
        try:
            healthy = probe()
        except Exception:
            healthy = False
        if healthy:
            self._put(tool, BreakerPosition.CLOSED)
            return True
        self._put(tool, BreakerPosition.OPEN, state.consecutive_failures)
        return False

    def is_open(self, tool: str) -> bool:
        """Checked between retries: an OPEN circuit stops the retry loop."""
        return self.state(tool).position is BreakerPosition.OPEN

    def record(
        self, tool: str, policy: BreakerPolicy, code: ToolErrorCode | None, *, admitted: BreakerState | None = None
    ) -> None:
        """Feed one attempt's result (None = success) into the breaker.

        ``admitted``: the state the call was admitted under, if nothing was recorded for this call since.
        A success admitted by a closed circuit with no failures counted leaves it so without reading it
        again (a failure another process counts meanwhile stays counted, as if recorded after this
        success); anything else reads the state afresh.
        """
        if code is None and admitted is not None and _clean(admitted):
            return
        state = self.state(tool)
        if code is None:
            if state.position is not BreakerPosition.CLOSED or state.consecutive_failures:
                self._put(tool, BreakerPosition.CLOSED)
            return
        if state.position is BreakerPosition.HALF_OPEN:
            self._put(tool, BreakerPosition.OPEN, state.consecutive_failures)
            return
        if code not in BREAKER_FAILURES or state.position is BreakerPosition.OPEN:
            return
        failures = state.consecutive_failures + 1
        position = BreakerPosition.OPEN if failures >= policy.failure_threshold else BreakerPosition.CLOSED
        self._put(tool, position, failures)

    def reset(self, tool: str) -> None:
        """Close the tool's breaker, as an operator does after fixing the cause."""
        self._put(tool, BreakerPosition.CLOSED)


def _clean(state: BreakerState) -> bool:
    """Closed, with no failure counted: a success leaves such a circuit as it is."""
    return state.position is BreakerPosition.CLOSED and not state.consecutive_failures
