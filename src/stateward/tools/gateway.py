"""The Tool Gateway: the only path from a proposed tool call to a side effect.

``invoke`` runs the admission stages in a fixed order (each refusal has a stable code and never
reaches the handler), assigns the idempotency key, then hands the call to the Executor. Nothing here
reads a tool's result to decide anything: tool output is data, never control.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from pydantic import ValidationError

from stateward.core import bridge
from stateward.core.canonical import action_digest
from stateward.core.errors import ErrorCode, ToolCallError
from stateward.core.journal import BreakerState, SideEffectRecord, SideEffectStatus

from .breaker import CircuitBreaker
from .executor import Executor, make_attempt
from .ports import GatewayStore
from .registry import ToolRegistry
from .stages import (
    CallState,
    Refusal,
    Stage,
    action_gate,
    assign_idempotency_key,
    available,
    in_resource_scope,
    in_scope,
    permitted,
    registered,
    reserve_budget,
    valid_input,
    visible,
)
from .types import CallContext, LookupStatus, ToolCall, ToolOutcome


class ToolGateway:
    """Decides about and executes tool calls. ``sleep`` and ``clock`` are injected for tests."""

    def __init__(
        self,
        registry: ToolRegistry,
        store: GatewayStore,
        *,
        sleep: Callable[[float], None] = bridge.sleep,  # asyncio.sleep under the async Runtime
        clock: Callable[[], float] = time.time,
    ):
        self.registry = registry
        self._store = store
        self._breaker = CircuitBreaker(store, clock)
        self._executor = Executor(store, self._breaker, sleep)
        self._stages: Sequence[Stage] = (
            registered(registry),
            visible,
            available(self._breaker),
            valid_input,
            permitted,
            in_resource_scope,
            in_scope,
            action_gate,
            reserve_budget,
            assign_idempotency_key,
        )

    def invoke(self, call: ToolCall, ctx: CallContext) -> ToolOutcome:
        """Pass the call through the stages in order (schema, permission, approval...); run it if none refuses."""
        st = CallState(call=call, ctx=ctx)
        for stage in self._stages:
            refusal = stage(st)
            if refusal is not None:
                return self._refuse(st, refusal)
        return self._executor.run(st)

    def action_digest(self, call: ToolCall, plan_version: int | None) -> str:
        """The digest an approval for ``call`` must carry (the same one the action gate checks).

        Raises ToolCallError (UNKNOWN_TOOL / INVALID_ARGUMENT) if the call cannot be resolved.
        """
        spec = self.registry.get(call.tool)
        if spec is None:
            raise ToolCallError(f"no tool named {call.tool!r}", code=ErrorCode.UNKNOWN_TOOL)
        try:
            args = spec.canonical_args(spec.validate_args(call.args))
        except ValidationError as exc:
            raise ToolCallError(str(exc), code=ErrorCode.INVALID_ARGUMENT) from exc
        return action_digest(spec.name, args, plan_version)

    def reconcile(self, record: SideEffectRecord, fencing_token: int | None = None) -> LookupStatus:
        """Ask the domain what became of an unfinished side effect and journal the answer.

        Used on resume for calls a dead process left STARTED or UNKNOWN_OUTCOME: SUCCEEDED is
        recorded so the next invocation replays it; NOT_EXECUTED is recorded as FAILED (safe to run
        again); UNKNOWN leaves the record as it is — nobody may claim success or retry blindly.
        """
        spec = self.registry.get(record.tool)
        if spec is None or spec.lookup is None:
            return LookupStatus.UNKNOWN
        status, result = spec.look_up(record.idempotency_key, run_id=record.run_id, fencing_token=fencing_token)
        if status is LookupStatus.SUCCEEDED:
            journal = {"result": result, "artifacts": []}
            self._store.put_side_effect(
                record.model_copy(
                    update={
                        "status": SideEffectStatus.SUCCEEDED.value,
                        "result": journal,
                        "updated_at": datetime.now(UTC),
                    }
                )
            )
        elif status is LookupStatus.NOT_EXECUTED:
            self._store.put_side_effect(
                record.model_copy(
                    update={
                        "status": SideEffectStatus.FAILED.value,
                        "result": {"lookup": "NOT_EXECUTED"},
                        "updated_at": datetime.now(UTC),
                    }
                )
            )
        return status

    def breaker_state(self, tool: str) -> BreakerState:
        """The tool's breaker state, for inspection."""
        return self._breaker.state(tool)

    def reset_breaker(self, tool: str) -> None:
        """Operator override: close a circuit (the only way out for a side-effecting tool without a
        health check)."""
        self._breaker.reset(tool)

    @staticmethod
    def _refuse(st: CallState, refusal: Refusal) -> ToolOutcome:
        attempt = make_attempt(st, refusal.status.value, refusal.code, refusal.message)
        return ToolOutcome(
            tool=st.call.tool,
            status=refusal.status,
            runtime_action=refusal.action,
            error_code=refusal.code,
            last_error_code=refusal.code,
            error=attempt.error,
            field_errors=refusal.field_errors,
            attempts=[attempt],
            action_digest=st.digest,
            budget_used=st.budget_used,
        )
