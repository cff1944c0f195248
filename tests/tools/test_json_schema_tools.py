"""A tool whose input is a JSON Schema (as MCP servers describe theirs) is validated like any tool, and a
handler that reports an unknown outcome is reconciled like a timeout — never retried blindly."""

from __future__ import annotations

from typing import Any

import pytest

from stateward import ToolContext, ToolOutcomeUnknown, ToolRegistry, ToolSpec, UserError, tool
from stateward.testing import InMemoryGatewayStore
from stateward.tools import CallContext, LookupStatus, ToolCall, ToolGateway

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "to": {"type": "string", "minLength": 1},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["to"],
    "additionalProperties": False,
}


def invoke(spec: ToolSpec, **args: Any) -> Any:
    gateway = ToolGateway(ToolRegistry([spec]), InMemoryGatewayStore(), sleep=lambda _s: None)
    return gateway.invoke(ToolCall(tool=spec.name, args=args), CallContext(run_id="run_1", step=1))


def json_tool(calls: list[dict[str, Any]], **options: Any) -> ToolSpec:
    def handler(arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
        calls.append({"arguments": arguments, "key": context.idempotency_key})
        return {"ok": arguments["to"]}

    return ToolSpec(name="notify", handler=handler, input_json_schema=SCHEMA, **options)


def test_valid_arguments_reach_the_handler_as_sent_with_the_context() -> None:
    calls: list[dict[str, Any]] = []

    out = invoke(json_tool(calls), to="ann", tags=["a"])

    assert out.status == "SUCCESS" and out.result == {"ok": "ann"}
    assert calls == [{"arguments": {"to": "ann", "tags": ["a"]}, "key": out.idempotency_key}]


def test_invalid_arguments_are_field_errors_and_never_reach_the_handler() -> None:
    calls: list[dict[str, Any]] = []

    out = invoke(json_tool(calls), tags=["a", 3], extra=True)

    assert out.error_code == "INVALID_ARGUMENT" and calls == []
    errors = {(tuple(e["loc"]), e["type"]) for e in out.field_errors}
    assert errors == {
        (("to",), "missing"),
        (("tags", "1"), "json_schema_type"),
        ((), "json_schema_additionalProperties"),
    }


def test_the_schema_shown_to_models_is_the_declared_one_and_cannot_be_changed_through_it() -> None:
    spec = json_tool([])

    shown = spec.input_schema()
    shown["required"].append("tags")

    assert spec.input_schema() == SCHEMA
    assert ToolRegistry([spec]).schemas()[0]["input_schema"] == SCHEMA


def test_an_invalid_json_schema_is_a_definition_error() -> None:
    with pytest.raises(UserError) as bad:
        ToolSpec(name="broken", handler=lambda arguments, context: None, input_json_schema={"type": 12})
    assert bad.value.code == "INVALID_TOOL_SCHEMA"


def test_an_unknown_outcome_of_a_side_effect_is_reconciled_not_retried() -> None:
    effects: list[str] = []
    answers: dict[str, tuple[LookupStatus, Any]] = {}

    def lookup(key: str) -> tuple[LookupStatus, Any]:
        return answers.get(key, (LookupStatus.UNKNOWN, None))

    @tool(side_effect=True, lookup=lookup)
    def deliver(to: str, ctx: ToolContext) -> dict[str, str]:
        """Deliver, then lose the connection before the answer."""
        effects.append(ctx.idempotency_key)
        answers[ctx.idempotency_key] = (LookupStatus.SUCCEEDED, {"delivered": to})
        raise ToolOutcomeUnknown("connection closed mid-call")

    out = invoke(deliver, to="ann")

    assert out.runtime_action == "REPLAY_SUCCESS" and out.result == {"delivered": "ann"}
    assert out.error_code == "UNKNOWN_OUTCOME" and len(effects) == 1


def test_an_unknown_outcome_of_a_read_only_tool_is_retried() -> None:
    calls: list[int] = []

    @tool
    def peek(n: int) -> int:
        """Fails with an unknown outcome once, then answers."""
        calls.append(n)
        if len(calls) == 1:
            raise ToolOutcomeUnknown("connection closed mid-call")
        return n

    out = invoke(peek, n=2)

    assert out.status == "SUCCESS" and out.result == 2 and len(calls) == 2
