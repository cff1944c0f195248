"""An in-memory GatewayStore for tests and single-process demos (nothing survives the process)."""

from __future__ import annotations

import threading

from stateward.core.journal import BreakerState, SideEffectRecord, approval_consumed


class InMemoryGatewayStore:
    """Implements ``GatewayStore`` with two dicts behind a lock (handler threads may outlive a call)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._breakers: dict[str, BreakerState] = {}
        self._side_effects: dict[str, SideEffectRecord] = {}

    def get_breaker(self, tool: str) -> BreakerState | None:
        """The tool's breaker state, or None if it never tripped."""
        with self._lock:
            return self._breakers.get(tool)

    def put_breaker(self, state: BreakerState) -> None:
        """Store a tool's breaker state."""
        with self._lock:
            self._breakers[state.tool] = state

    def get_side_effect(self, idempotency_key: str) -> SideEffectRecord | None:
        """The journal record under an idempotency key, or None."""
        with self._lock:
            return self._side_effects.get(idempotency_key)

    def put_side_effect(self, record: SideEffectRecord) -> None:
        """Store a journal record; a second idempotency key for a grant the run already spent is refused."""
        with self._lock:
            if record.grant_id is not None and any(
                other.run_id == record.run_id
                and other.grant_id == record.grant_id
                and other.idempotency_key != record.idempotency_key
                for other in self._side_effects.values()
            ):
                raise approval_consumed(record)
            self._side_effects[record.idempotency_key] = record

    def side_effects(self) -> list[SideEffectRecord]:
        """All journal records, for inspection in tests and demos."""
        with self._lock:
            return list(self._side_effects.values())
