"""What the gateway needs from durable storage. Both stores satisfy it structurally; so does an in-memory fake.

The records themselves live in ``stateward.core.journal`` (the store persists them without knowing the gateway).
"""

from __future__ import annotations

from typing import Protocol

from stateward.core.journal import BreakerState, SideEffectRecord


class GatewayStore(Protocol):
    """What the gateway needs from durable storage: breakers and the side-effect journal. Both stores implement it; so
    does InMemoryGatewayStore."""

    def get_breaker(self, tool: str) -> BreakerState | None:
        """The tool's breaker state, or None if it never tripped."""

    def put_breaker(self, state: BreakerState) -> None:
        """Store a tool's breaker state."""

    def get_side_effect(self, idempotency_key: str) -> SideEffectRecord | None:
        """The journal record under an idempotency key, or None."""

    def put_side_effect(self, record: SideEffectRecord) -> None:
        """Committed immediately (its own transaction): it must survive a crash of the step.

        A record carrying a ``grant_id`` that another key of the run already holds is refused with
        ``APPROVAL_CONSUMED``: journalling a guarded call's start is what consumes its approval.
        """
        ...
