"""The admission stages of a call, in order. Each either lets the call through or refuses it with a
stable code; none of them calls the handler, and none reads anything a tool ever returned."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from stateward.core.canonical import action_digest, canonical_json, idempotency_key_of, sha256_hex
from stateward.core.journal import AttemptRecord, BreakerState
from stateward.core.state import ApprovalScope, Grant

from .breaker import CircuitBreaker
from .execution import run_with_timeout
from .registry import ToolRegistry
from .scope import scoped_values
from .spec import ToolSpec
from .types import (
    CallContext,
    LookupStatus,
    OutcomeStatus,
    RuntimeAction,
    ToolCall,
    ToolErrorCode,
)


@dataclass
class CallState:
    """What the stages learn about one call as it moves through the pipeline."""

    call: ToolCall
    ctx: CallContext
    spec: ToolSpec | None = None
    validated: BaseModel | None = None
    args: dict[str, Any] | None = None  # canonical, validated arguments
    key: str | None = None
    digest: str | None = None
    budget_used: int = 0
    attempts: list[AttemptRecord] = field(default_factory=list)
    first_error: ToolErrorCode | None = None
    idempotency_status: LookupStatus | None = None
    retried_once: bool = False
    journal_note: dict[str, Any] | None = None  # kept on this call's STARTED / UNKNOWN_OUTCOME journal entries
    grant: Grant | None = None  # the approval that admitted this call
    breaker_admitted: BreakerState | None = None  # the circuit as admission read it, until an attempt is recorded
    _input_hash: str | None = field(default=None, repr=False)  # the arguments' digest, made once per call

    @property
    def once_grant(self) -> str | None:
        """The request id of the single-use approval this call consumes when its start is journalled."""
        if self.grant is None or self.grant.scope is not ApprovalScope.ONCE:
            return None
        return self.grant.request_id

    @property
    def tool_spec(self) -> ToolSpec:
        assert self.spec is not None, "stage ordering: the registry stage runs first"
        return self.spec

    @property
    def input_hash(self) -> str:
        """The digest of the call's arguments (validated and canonical once the input stage passed them), as
        every attempt record of the call carries it: computed once."""
        if self._input_hash is None:
            self._input_hash = self._digest_args()
        return self._input_hash

    def _digest_args(self) -> str:
        if self.args is not None:
            return sha256_hex(canonical_json(self.args))
        try:
            return sha256_hex(canonical_json(self.call.args or {}))
        except (TypeError, ValueError):
            return sha256_hex(repr(self.call.args))

    def note_failure(self, code: ToolErrorCode) -> None:
        if self.first_error is None:
            self.first_error = code


@dataclass(frozen=True)
class Refusal:
    code: ToolErrorCode
    message: str
    status: OutcomeStatus = OutcomeStatus.REJECTED
    action: RuntimeAction = RuntimeAction.REJECT
    field_errors: list[dict[str, Any]] = field(default_factory=list)


Stage = Callable[[CallState], Refusal | None]


def registered(registry: ToolRegistry) -> Stage:
    def stage(st: CallState) -> Refusal | None:
        st.spec = registry.get(st.call.tool)
        if st.spec is None:
            return Refusal(ToolErrorCode.UNKNOWN_TOOL, f"no tool named {st.call.tool!r}")
        return None

    return stage


def visible(st: CallState) -> Refusal | None:
    allowed = st.ctx.visible_actions
    if allowed is not None and st.call.tool not in allowed:
        return Refusal(ToolErrorCode.NOT_VISIBLE, f"{st.call.tool!r} is not an action of the current step")
    return None


def available(breaker: CircuitBreaker) -> Stage:
    """Offline tools and open circuits fail fast; a due half-open probe uses only the health check."""

    def stage(st: CallState) -> Refusal | None:
        spec = st.tool_spec
        if recorded_only(st):
            return None  # a person's "it happened" is recorded, the service not called: its health is beside the point
        if not spec.available:
            return Refusal(ToolErrorCode.TOOL_UNAVAILABLE, f"{spec.name!r} is offline")
        check = spec.health_check
        probe = None if check is None else (lambda: run_with_timeout(check, spec.timeout_s).value is True)
        seen = breaker.state(spec.name)
        if not breaker.admit(spec.name, spec.breaker, probe=probe, side_effect=spec.side_effect, state=seen):
            return Refusal(ToolErrorCode.CIRCUIT_OPEN, f"circuit for {spec.name!r} is open")
        st.breaker_admitted = seen
        return None

    return stage


def valid_input(st: CallState) -> Refusal | None:
    spec = st.tool_spec
    try:
        st.validated = spec.validate_args(st.call.args)
    except ValidationError as exc:
        errors = [
            {"loc": [str(p) for p in e["loc"]], "msg": spec.redact.text(e["msg"]), "type": e["type"]}
            for e in exc.errors()
        ]
        return Refusal(ToolErrorCode.INVALID_ARGUMENT, f"invalid arguments for {spec.name!r}", field_errors=errors)
    st.args = spec.canonical_args(st.validated)
    st._input_hash = None  # from the validated arguments from now on
    return None


def permitted(st: CallState) -> Refusal | None:
    needed = st.tool_spec.permission
    if needed is not None and needed not in st.ctx.permissions:
        return Refusal(ToolErrorCode.PERMISSION_DENIED, f"principal {st.ctx.principal!r} lacks permission {needed!r}")
    return None


def in_scope(st: CallState) -> Refusal | None:
    scope = st.ctx.scope
    if scope is not None and st.call.tool not in scope:
        return Refusal(ToolErrorCode.OUT_OF_SCOPE, f"{st.call.tool!r} is outside the goal's scope")
    return None


def in_resource_scope(st: CallState) -> Refusal | None:
    """A tool's declared scoped arguments must name resources inside the goal's scope (after validation, so the
    canonical values are checked, not what the caller spelled)."""
    scope = st.ctx.resource_scope
    declared = st.tool_spec.scoped_args
    if scope is None or not declared or st.args is None:
        return None
    for spec in declared:
        for value in scoped_values(spec, st.args):
            why = scope.why_outside(spec, value)
            if why is not None:
                return Refusal(ToolErrorCode.SCOPE_VIOLATION, f"{st.tool_spec.name!r}: {why}")
    return None


def action_gate(st: CallState) -> Refusal | None:
    """An approval admits exactly one action: this tool, these canonical args, this plan version.

    A digest over the call's raw args (exactly as sent) is accepted too: it names the same single
    action, and lets a caller bind approvals without re-validating arguments. A ONCE grant admits one
    execution: the executor consumes it when it journals the call's start.
    """
    spec = st.tool_spec
    if not spec.requires_approval:
        return None
    st.digest = action_digest(spec.name, st.args, st.ctx.plan_version)
    if st.ctx.reconciliation is not None:
        # The call its approval admitted, reconciled by a person: recorded (or retried once) under its own
        # journalled key, which ``assign_idempotency_key`` checks; no second approval is asked for it.
        return None
    digests = {st.digest, _raw_digest(st)}
    st.grant = next((g for g in st.ctx.grants if g.digest in digests), None)
    if st.grant is not None or not digests.isdisjoint(st.ctx.approved_digests):
        return None
    return Refusal(
        ToolErrorCode.BLOCKED_BY_ACTION_GATEWAY,
        f"{spec.name!r} needs an approval bound to this exact action",
        status=OutcomeStatus.BLOCKED,
        action=RuntimeAction.BLOCK,
    )


def _raw_digest(st: CallState) -> str | None:
    try:
        return action_digest(st.tool_spec.name, st.call.args, st.ctx.plan_version)
    except (TypeError, ValueError):
        return None


def recorded_only(st: CallState) -> bool:
    """A person said this call happened: the gateway records their word and calls nothing."""
    said = st.ctx.reconciliation
    return said is not None and said.happened


def reserve_budget(st: CallState) -> Refusal | None:
    if st.ctx.reconciliation is not None:
        # A person's answer is recorded even when the budget has run out; the one retry "it did not happen"
        # may allow reserves its own call (the executor's ``_retry_once``), or fails for want of budget.
        return None
    if not has_budget(st):
        return Refusal(ToolErrorCode.BUDGET_EXCEEDED, "no tool calls left in the run's budget")
    st.budget_used += 1
    return None


def has_budget(st: CallState) -> bool:
    remaining = st.ctx.remaining_tool_calls
    return remaining is None or st.budget_used < remaining


def assign_idempotency_key(st: CallState) -> Refusal | None:
    """Deterministic, so a retried or resumed step finds the journal entry of its earlier attempt."""
    args_json = canonical_json(st.args or {})  # one serialization for the key and the attempts' input hash
    st._input_hash = sha256_hex(args_json)
    st.key = idempotency_key_of(st.ctx.key_scope or st.ctx.run_id, st.ctx.step, st.tool_spec.name, args_json)
    said = st.ctx.reconciliation
    if said is not None and said.idempotency_key != st.key:
        return Refusal(
            ToolErrorCode.RECONCILIATION_MISMATCH,
            f"a person's answer about {said.idempotency_key} cannot settle another call ({st.key})",
        )
    return None
