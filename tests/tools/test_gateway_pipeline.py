"""Admission pipeline: every refusal has a stable code, comes in the documented order, and never
reaches the handler."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stateward.core.canonical import action_digest, idempotency_key
from stateward.tools import (
    BreakerPolicy,
    CallContext,
    InMemoryGatewayStore,
    OutcomeStatus,
    RetryPolicy,
    RuntimeAction,
    ServiceUnavailable,
    ToolCall,
    ToolContext,
    ToolErrorCode,
    ToolGateway,
    ToolRegistry,
    tool,
)


class Calls:
    def __init__(self) -> None:
        self.n = 0


def make_gateway(calls: Calls, **spec_kw: Any) -> ToolGateway:
    def pay(order_id: str, amount_cents: int = 100, note: str | None = None) -> dict[str, Any]:
        """Pay an order."""
        calls.n += 1
        return {"order_id": order_id, "amount_cents": amount_cents}

    kw: dict[str, Any] = {"permission": "pay", "side_effect": True}
    kw.update(spec_kw)
    return ToolGateway(ToolRegistry([tool(**kw)(pay)]), InMemoryGatewayStore())


def ctx(**kw: Any) -> CallContext:
    base: dict[str, Any] = {"run_id": "run-1", "step": 3, "permissions": frozenset({"pay"})}
    base.update(kw)
    return CallContext(**base)


GOOD = {"order_id": "A-1"}


@pytest.mark.parametrize(
    ("tool_name", "args", "context", "spec_kw", "code", "status"),
    [
        ("nope", GOOD, ctx(), {}, ToolErrorCode.UNKNOWN_TOOL, OutcomeStatus.REJECTED),
        ("pay", GOOD, ctx(visible_actions=frozenset({"other"})), {}, ToolErrorCode.NOT_VISIBLE, None),
        ("pay", GOOD, ctx(), {"available": False}, ToolErrorCode.TOOL_UNAVAILABLE, None),
        ("pay", {}, ctx(), {}, ToolErrorCode.INVALID_ARGUMENT, None),
        ("pay", {"order_id": "A", "amount_cents": "lots"}, ctx(), {}, ToolErrorCode.INVALID_ARGUMENT, None),
        ("pay", {"order_id": "A", "extra": 1}, ctx(), {}, ToolErrorCode.INVALID_ARGUMENT, None),
        ("pay", GOOD, ctx(permissions=frozenset()), {}, ToolErrorCode.PERMISSION_DENIED, None),
        ("pay", GOOD, ctx(scope=frozenset({"read"})), {}, ToolErrorCode.OUT_OF_SCOPE, None),
        (
            "pay",
            GOOD,
            ctx(),
            {"requires_approval": True},
            ToolErrorCode.BLOCKED_BY_ACTION_GATEWAY,
            OutcomeStatus.BLOCKED,
        ),
        ("pay", GOOD, ctx(remaining_tool_calls=0), {}, ToolErrorCode.BUDGET_EXCEEDED, None),
    ],
)
def test_each_refusal_has_its_code_and_never_calls_the_handler(
    tool_name: str,
    args: dict[str, Any],
    context: CallContext,
    spec_kw: dict[str, Any],
    code: ToolErrorCode,
    status: OutcomeStatus | None,
) -> None:
    calls = Calls()
    gw = make_gateway(calls, **spec_kw)
    out = gw.invoke(ToolCall(tool=tool_name, args=args), context)
    assert out.error_code is code
    assert out.status is (status or OutcomeStatus.REJECTED)
    assert calls.n == 0
    assert out.handler_calls == 0
    assert [a.handler_called for a in out.attempts] == [False]
    assert out.attempts[0].error_code == code.value
    assert out.result is None


def test_circuit_open_refuses_before_the_handler() -> None:
    calls = Calls()

    def flaky() -> str:
        calls.n += 1
        raise ServiceUnavailable("503")

    spec = tool(retry=RetryPolicy(max_attempts=1), breaker=BreakerPolicy(failure_threshold=1))(flaky)
    gw = ToolGateway(ToolRegistry([spec]), InMemoryGatewayStore())
    gw.invoke(ToolCall(tool="flaky"), ctx())
    out = gw.invoke(ToolCall(tool="flaky"), ctx())
    assert out.error_code is ToolErrorCode.CIRCUIT_OPEN
    assert calls.n == 1


@pytest.mark.parametrize(
    ("tool_name", "args", "context", "spec_kw", "code"),
    [
        ("nope", GOOD, ctx(visible_actions=frozenset({"x"})), {}, ToolErrorCode.UNKNOWN_TOOL),
        ("pay", {}, ctx(visible_actions=frozenset({"x"})), {}, ToolErrorCode.NOT_VISIBLE),
        ("pay", {}, ctx(), {"available": False}, ToolErrorCode.TOOL_UNAVAILABLE),
        ("pay", {}, ctx(permissions=frozenset()), {}, ToolErrorCode.INVALID_ARGUMENT),
        ("pay", GOOD, ctx(permissions=frozenset(), scope=frozenset()), {}, ToolErrorCode.PERMISSION_DENIED),
        ("pay", GOOD, ctx(scope=frozenset()), {"requires_approval": True}, ToolErrorCode.OUT_OF_SCOPE),
        (
            "pay",
            GOOD,
            ctx(remaining_tool_calls=0),
            {"requires_approval": True},
            ToolErrorCode.BLOCKED_BY_ACTION_GATEWAY,
        ),
    ],
)
def test_stages_run_in_the_documented_order(
    tool_name: str, args: dict[str, Any], context: CallContext, spec_kw: dict[str, Any], code: ToolErrorCode
) -> None:
    out = make_gateway(Calls(), **spec_kw).invoke(ToolCall(tool=tool_name, args=args), context)
    assert out.error_code is code


def test_invalid_argument_lists_field_errors() -> None:
    out = make_gateway(Calls()).invoke(ToolCall(tool="pay", args={"amount_cents": "x", "bogus": 1}), ctx())
    by_field = {e["loc"][0]: e["type"] for e in out.field_errors}
    assert by_field == {"order_id": "missing", "amount_cents": "int_parsing", "bogus": "extra_forbidden"}


def test_success_path_records_one_attempt_and_deterministic_key() -> None:
    calls = Calls()
    out = make_gateway(calls).invoke(ToolCall(tool="pay", args={"order_id": "A-1"}), ctx())
    assert out.status is OutcomeStatus.SUCCESS
    assert out.runtime_action is RuntimeAction.EXECUTE
    assert out.result == {"order_id": "A-1", "amount_cents": 100}
    canonical = {"order_id": "A-1", "amount_cents": 100, "note": None}
    assert out.idempotency_key == idempotency_key("run-1", 3, "pay", canonical)
    assert [a.sequence for a in out.attempts] == [1]
    assert out.attempts[0].handler_called and out.attempts[0].outcome == "SUCCESS"
    assert out.budget_used == 1
    assert calls.n == 1


class TestActionGate:
    def test_approval_for_args_a_admits_a_only(self) -> None:
        calls = Calls()
        gw = make_gateway(calls, requires_approval=True)
        call_a = ToolCall(tool="pay", args={"order_id": "A", "amount_cents": 100})
        call_b = ToolCall(tool="pay", args={"order_id": "A", "amount_cents": 100_000})
        digest_a = gw.action_digest(call_a, plan_version=2)
        approved = ctx(approved_digests=frozenset({digest_a}), plan_version=2)

        blocked = gw.invoke(call_b, approved)
        assert blocked.status is OutcomeStatus.BLOCKED
        assert blocked.runtime_action is RuntimeAction.BLOCK
        assert blocked.error_code is ToolErrorCode.BLOCKED_BY_ACTION_GATEWAY
        assert blocked.action_digest == gw.action_digest(call_b, plan_version=2) != digest_a
        assert calls.n == 0

        # the same approval under another plan version does not count either
        assert gw.invoke(call_a, approved.model_copy(update={"plan_version": 3})).status is OutcomeStatus.BLOCKED
        assert calls.n == 0

        ok = gw.invoke(call_a, approved)
        assert ok.status is OutcomeStatus.SUCCESS
        assert calls.n == 1

    def test_digest_is_over_canonical_validated_args(self) -> None:
        gw = make_gateway(Calls(), requires_approval=True)
        digest = action_digest("pay", {"order_id": "A", "amount_cents": 5, "note": None}, 1)
        out = gw.invoke(
            ToolCall(tool="pay", args={"amount_cents": "5", "order_id": "A"}),
            ctx(approved_digests=frozenset({digest}), plan_version=1),
        )
        assert out.status is OutcomeStatus.SUCCESS

    def test_digest_over_the_raw_args_admits_exactly_those_raw_args(self) -> None:
        calls = Calls()
        gw = make_gateway(calls, requires_approval=True)
        raw = {"order_id": "A"}  # the default amount is filled in by validation
        approved = ctx(approved_digests=frozenset({action_digest("pay", raw, None)}))
        assert gw.invoke(ToolCall(tool="pay", args={"order_id": "B"}), approved).status is OutcomeStatus.BLOCKED
        assert gw.invoke(ToolCall(tool="pay", args=raw), approved).status is OutcomeStatus.SUCCESS
        assert calls.n == 1

    @given(a=st.integers(0, 10**9), b=st.integers(0, 10**9))
    def test_digest_of_a_never_admits_different_b(self, a: int, b: int) -> None:
        calls = Calls()
        gw = make_gateway(calls, requires_approval=True)
        digest_a = gw.action_digest(ToolCall(tool="pay", args={"order_id": "X", "amount_cents": a}), None)
        out = gw.invoke(
            ToolCall(tool="pay", args={"order_id": "X", "amount_cents": b}),
            ctx(approved_digests=frozenset({digest_a})),
        )
        assert (out.status is OutcomeStatus.SUCCESS) == (a == b)
        assert calls.n == (1 if a == b else 0)


class TestSpec:
    def test_context_parameter_is_injected_and_not_in_schema(self) -> None:
        seen: list[ToolContext] = []

        @tool
        def write_note(text: str, context: ToolContext) -> str:
            """Write a note."""
            seen.append(context)
            context.emit_artifact("note", f"# {text}")
            return "ok"

        assert set(write_note.input_schema()["properties"]) == {"text"}
        assert write_note.description == "Write a note."
        gw = ToolGateway(ToolRegistry([write_note]), InMemoryGatewayStore())
        out = gw.invoke(ToolCall(tool="write_note", args={"text": "hi"}), ctx(principal="alice"))
        assert seen[0].idempotency_key == out.idempotency_key
        assert (seen[0].run_id, seen[0].step, seen[0].principal) == ("run-1", 3, "alice")
        assert [(a.name, a.content) for a in out.artifacts] == [("note", "# hi")]

    def test_output_not_matching_return_annotation_is_schema_mismatch(self) -> None:
        @tool
        def count() -> int:
            return "many"  # type: ignore[return-value]

        gw = ToolGateway(ToolRegistry([count]), InMemoryGatewayStore())
        out = gw.invoke(ToolCall(tool="count"), ctx())
        assert out.error_code is ToolErrorCode.SCHEMA_MISMATCH
        assert out.status is OutcomeStatus.FAILED
        assert out.runtime_action is RuntimeAction.BLOCK
        assert out.result is None
        assert out.handler_calls == 1

    def test_taking_a_tool_offline(self) -> None:
        calls = Calls()
        gw = make_gateway(calls)
        gw.registry.set_available("pay", False)
        assert gw.invoke(ToolCall(tool="pay", args=GOOD), ctx()).error_code is ToolErrorCode.TOOL_UNAVAILABLE
        gw.registry.set_available("pay", True)
        assert gw.invoke(ToolCall(tool="pay", args=GOOD), ctx()).status is OutcomeStatus.SUCCESS
        assert calls.n == 1
