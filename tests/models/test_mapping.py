"""The shared tool/decision mapping: one valid tool call is one decision, everything else is named."""

from __future__ import annotations

import json
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from stateward.core.decision import DecisionType, parse_decision
from stateward.core.errors import UserError
from stateward.models import contracts, mapping
from stateward.models.base import ActionSpec, ModelRequest
from stateward.models.errors import RejectionCode
from stateward.models.mapping import ToolCall


def test_tools_are_the_visible_actions_plus_the_two_control_tools(decide_request: ModelRequest) -> None:
    names = [t.name for t in mapping.tool_definitions(decide_request)]
    assert names == ["read_material", "list_materials", "request_user_input", "finish"]


def test_an_action_named_like_a_control_tool_is_a_definition_error(decide_request: ModelRequest) -> None:
    clash = decide_request.model_copy(update={"visible_actions": [ActionSpec(name="finish")]})
    with pytest.raises(UserError) as err:
        mapping.tool_definitions(clash)
    assert err.value.code == "RESERVED_TOOL_NAME"


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (ToolCall("read_material", '{"material_id": "m1"}'), {"type": "EXECUTE_TOOL", "action": "read_material"}),
        (ToolCall("list_materials", ""), {"type": "EXECUTE_TOOL", "action": "list_materials"}),
        (ToolCall("request_user_input", {"question": "Write it?"}), {"type": "REQUEST_USER_INPUT"}),
        (ToolCall("finish", '{"reason": "done"}'), {"type": "FINISH"}),
    ],
)
def test_one_valid_call_becomes_one_decision(
    decide_request: ModelRequest, call: ToolCall, expected: dict[str, Any]
) -> None:
    out = mapping.decision_from_tool_calls([call], decide_request)
    assert out.rejection_code is None
    decision = parse_decision(out.text)  # the Runtime's strict parser accepts it as is
    assert decision.type is DecisionType(expected["type"])
    assert decision.action == expected.get("action")


@pytest.mark.parametrize(
    ("calls", "code"),
    [
        ([ToolCall("read_material", '{"material_id": "m1"}'), ToolCall("finish", '{"reason": "x"}')], "MULTIPLE"),
        ([ToolCall("delete_everything", "{}")], "UNKNOWN_TOOL"),
        ([ToolCall("read_material", '{"material_id": 3}')], "INVALID_TOOL_ARGUMENTS"),
        ([ToolCall("read_material", "{}")], "INVALID_TOOL_ARGUMENTS"),
        ([ToolCall("read_material", '{"material_id": "m1", "extra": 1}')], "INVALID_TOOL_ARGUMENTS"),
        ([ToolCall("read_material", '{"material_id": "m1"')], "INVALID_TOOL_ARGUMENTS"),
        ([ToolCall("read_material", '["m1"]')], "INVALID_TOOL_ARGUMENTS"),
        ([ToolCall("request_user_input", "{}")], "INVALID_TOOL_ARGUMENTS"),
    ],
)
def test_anything_else_is_a_named_rejection(decide_request: ModelRequest, calls: list[ToolCall], code: str) -> None:
    out = mapping.decision_from_tool_calls(calls, decide_request)
    assert out.rejection_code is not None and out.rejection_code.value.startswith(code)
    assert json.loads(out.text)[0]["name"] == calls[0].name  # what the model sent is kept for the record


def test_no_tool_call_at_all_is_an_empty_reply(decide_request: ModelRequest) -> None:
    out = mapping.decision_from_tool_calls([], decide_request)
    assert out.rejection_code is not None and out.rejection_code.value == "EMPTY_REPLY"
    assert json.loads(out.text) == []


def test_empty_and_thinking_only_text_are_named() -> None:
    assert mapping.text_reply("  ", had_thinking=False).rejection_code is RejectionCode.EMPTY_REPLY
    assert mapping.text_reply("", had_thinking=True).rejection_code is RejectionCode.THINKING_ONLY
    assert mapping.text_reply("<think>hmm</think>\n", had_thinking=False).rejection_code is RejectionCode.THINKING_ONLY
    # Text is never repaired: prose around JSON goes to the strict parser unchanged.
    prose = 'Sure! {"type": "FINISH"}'
    assert mapping.text_reply(prose, had_thinking=False).text == prose


def _strings_and_arrays(node: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    if isinstance(node, dict):
        if node.get("type") in ("string", "array") and "const" not in node:
            found.append(node)
        for value in node.values():
            found.extend(_strings_and_arrays(value))
    elif isinstance(node, list):
        for value in node:
            found.extend(_strings_and_arrays(value))
    return found


def test_response_schemas_bound_every_string_and_array(decide_request: ModelRequest) -> None:
    brief = ActionSpec(
        name="create_brief",
        input_schema={
            "type": "object",
            "properties": {"title": {"type": "string"}, "outline": {"type": "array", "items": {"type": "string"}}},
            "required": ["title", "outline"],
        },
    )
    req = decide_request.model_copy(update={"visible_actions": [*decide_request.visible_actions, brief]})
    for purpose in ("decide", "plan", "content"):
        _, schema = contracts.response_schema(req.model_copy(update={"purpose": purpose}))
        Draft202012Validator.check_schema(schema)
        for node in _strings_and_arrays(schema):
            assert ("maxLength" if node["type"] == "string" else "maxItems") in node, node


def test_decision_schema_admits_exactly_the_decisions_the_parser_accepts(decide_request: ModelRequest) -> None:
    validator = Draft202012Validator(mapping.decision_schema(decide_request))
    good = [
        {"type": "EXECUTE_TOOL", "action": "read_material", "args": {"material_id": "m1"}},
        {"type": "REQUEST_USER_INPUT", "question": "Write the draft?"},
        {"type": "FINISH", "reason": "done"},
    ]
    bad = [
        {"type": "EXECUTE_TOOL", "action": "write_draft", "args": {}},
        {"type": "json_object", "content": {"type": "FINISH", "reason": "done"}},
        {"type": "FINISH", "reason": "done", "extra": 1},
    ]
    for value in good:
        assert validator.is_valid(value)
        parse_decision(json.dumps(value))
    for value in bad:
        assert not validator.is_valid(value)


def test_refs_are_inlined_so_schemas_embed() -> None:
    schema = {
        "type": "object",
        "properties": {"item": {"$ref": "#/$defs/Item"}},
        "$defs": {"Item": {"type": "object", "properties": {"name": {"type": "string"}}}},
    }
    out = mapping.bounded(schema)
    assert "$defs" not in json.dumps(out)
    assert out["properties"]["item"]["properties"]["name"]["maxLength"] == mapping.MAX_STRING


def test_bounds_reach_every_free_string_and_array_but_leave_fixed_values_and_given_bounds() -> None:
    schema = {
        "type": "object",
        "properties": {
            "note": {"type": "string"},
            "kind": {"type": "string", "enum": ["a", "b"]},
            "tag": {"type": "string", "const": "x" * 500},  # a bound here would make the schema unsatisfiable
            "items": {"type": "array", "items": {"type": "string"}},
            "few": {"type": "array", "maxItems": 50, "items": {"type": "integer"}},
        },
    }
    out = mapping.bounded(schema, max_string=80, max_items=8)["properties"]
    assert out["note"]["maxLength"] == 80 and out["items"]["maxItems"] == 8
    assert out["items"]["items"]["maxLength"] == 80
    assert "maxLength" not in out["kind"] and "maxLength" not in out["tag"]
    assert out["few"]["maxItems"] == 50


def test_a_recursive_schema_is_refused_by_name() -> None:
    schema = {
        "$defs": {"Node": {"type": "object", "properties": {"child": {"$ref": "#/$defs/Node"}}}},
        "$ref": "#/$defs/Node",
    }
    with pytest.raises(UserError) as err:
        mapping.inline_refs(schema)
    assert err.value.code == "UNSUPPORTED_SCHEMA"


def test_an_invalid_arguments_message_names_the_first_three_problems(decide_request: ModelRequest) -> None:
    wide = {
        "type": "object",
        "properties": {name: {"type": "integer"} for name in "abcde"},
        "additionalProperties": False,
    }
    request = decide_request.model_copy(
        update={"visible_actions": [ActionSpec(name="fill", description="Fill in five numbers.", input_schema=wide)]}
    )
    args = json.dumps(dict.fromkeys("abcde", "not a number"))
    out = mapping.decision_from_tool_calls([ToolCall("fill", args)], request)
    assert out.rejection_code is RejectionCode.INVALID_TOOL_ARGUMENTS
    message = out.rejection_message or ""
    assert [name for name in "abcde" if f"{name}: " in message] == ["a", "b", "c"]


def test_content_is_shaped_by_the_one_tool_it_fills_and_is_free_otherwise(decide_request: ModelRequest) -> None:
    assert mapping.content_schema(decide_request) == {"type": "object"}  # two actions: nothing to shape by
    one = decide_request.model_copy(update={"visible_actions": decide_request.visible_actions[:1]})
    shaped = mapping.content_schema(one)
    assert shaped["properties"].keys() == one.visible_actions[0].input_schema["properties"].keys()


# -- strict arguments and bounded replies ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("arguments", "code"),
    [
        ('{"material_id": "m1", "material_id": "m2"}', "DUPLICATE_KEY"),
        ('{"material_id": "m1", "n": NaN}', "NON_FINITE_NUMBER"),
        ('{"material_id": "m1", "n": -Infinity}', "NON_FINITE_NUMBER"),
        ({"material_id": "m1", "n": float("inf")}, "NON_FINITE_NUMBER"),  # already decoded by an SDK
        ({"material_id": "m1", "n": [float("nan")]}, "NON_FINITE_NUMBER"),
    ],
)
def test_native_arguments_are_read_as_strictly_as_a_decision(
    decide_request: ModelRequest, arguments: str | dict[str, Any], code: str
) -> None:
    out = mapping.decision_from_tool_calls([ToolCall("read_material", arguments)], decide_request)
    assert out.rejection_code is not None and out.rejection_code.value == code


def test_a_reply_over_the_limit_is_refused_unread_and_only_its_head_is_kept() -> None:
    big = '{"type": "FINISH", "reason": "' + "x" * 70_000 + '"}'
    out = mapping.oversized(big, [], mapping.DEFAULT_MAX_REPLY_BYTES)
    assert out is not None and out.rejection_code is RejectionCode.REPLY_TOO_LARGE
    assert len(out.text) < 2_000
    calls = [ToolCall("read_material", {"material_id": "é" * 40_000})]  # 80,000 bytes of UTF-8
    assert mapping.oversized("", calls, 65_536) is not None
    assert mapping.oversized("", calls, None) is None
    assert mapping.oversized('{"type": "FINISH", "reason": "ok"}', [], 65_536) is None
