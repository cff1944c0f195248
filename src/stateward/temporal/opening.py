"""Opening a Temporal backend by its URL, with the SDK imported only then: a process that never uses one
never loads ``temporalio``, and one without the temporal extra gets a named error saying how to install it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stateward.core.errors import ErrorCode, UserError

if TYPE_CHECKING:
    from stateward.runtime.agent_registry import AgentRegistry
    from stateward.temporal.client import TemporalRuntime


def open_temporal(url: str, agents: AgentRegistry | None = None) -> TemporalRuntime:
    """The runtime over the Temporal namespace ``url`` names; without the temporal extra installed, a named
    STORE_UNSUPPORTED that says how to install it (the SDK is imported only here, when a backend is used)."""
    try:
        from stateward.temporal.client import TemporalRuntime
    except ImportError as exc:
        raise UserError(
            f"a Temporal backend needs the temporal extra ({exc}); install it with: pip install 'stateward[temporal]'",
            code=ErrorCode.STORE_UNSUPPORTED,
        ) from None
    return TemporalRuntime.open(url, agents=agents)
