from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stateward import ControlDecision, DecisionParseError, DecisionType, parse_decision


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("", "EMPTY_OUTPUT"),
        ("   \n", "EMPTY_OUTPUT"),
        ("please confirm", "NOT_JSON"),
        ('Sure! {"type": "FINISH"}', "NOT_JSON"),
        ('{"type": "FINISH"} thanks', "NOT_JSON"),
        ("[1, 2]", "NOT_AN_OBJECT"),
        ('"FINISH"', "NOT_AN_OBJECT"),
        ('{"action": "read"}', "MISSING_TYPE"),
        ('{"type": "json_object", "content": {"type": "REQUEST_USER_INPUT", "question": "ok?"}}', "WRAPPED_DECISION"),
        ('{"type": "json_object", "content": "{\\"type\\": \\"FINISH\\"}"}', "WRAPPED_DECISION"),  # content as text
        ('{"type": "FINISH", "reason": "x", "content": "y"}', "UNEXPECTED_FIELD"),  # a real type is no wrapper
        ('{"type": "PAUSE"}', "UNKNOWN_DECISION_TYPE"),
        ('{"type": "finish"}', "UNKNOWN_DECISION_TYPE"),
        ('{"type": 3}', "UNKNOWN_DECISION_TYPE"),
        ('{"type": "FINISH", "type": "EXECUTE_TOOL"}', "DUPLICATE_KEY"),
        ('{"type": "FINISH", "confidence": 0.9}', "UNEXPECTED_FIELD"),
        ('{"type": "EXECUTE_TOOL", "action": "x", "args": [1]}', "INVALID_FIELD"),
        ('{"type": "REQUEST_USER_INPUT", "question": 42}', "INVALID_FIELD"),
    ],
)
def test_named_parse_failures(text: str, code: str) -> None:
    with pytest.raises(DecisionParseError) as err:
        parse_decision(text)
    assert err.value.code == code


def test_missing_optional_fields_are_normal_input() -> None:
    decision = parse_decision('{"type": "REQUEST_USER_INPUT"}')
    assert decision == ControlDecision(type=DecisionType.REQUEST_USER_INPUT)


def test_top_level_type_decides() -> None:
    text = '{"type": "EXECUTE_TOOL", "action": "read_material", "args": {"material_id": "m1"}}'
    decision = parse_decision(text)
    assert decision.type is DecisionType.EXECUTE_TOOL
    assert decision.args == {"material_id": "m1"}


@given(st.text(max_size=200))
def test_random_text_only_ever_raises_named_parse_errors(text: str) -> None:
    try:
        decision = parse_decision(text)
    except DecisionParseError as exc:
        assert exc.code
    else:
        assert isinstance(decision, ControlDecision)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=10,
)


@given(st.dictionaries(st.sampled_from(["type", "action", "args", "question", "reason", "content", "x"]), _json))
def test_random_objects_parse_strictly(obj: dict[str, object]) -> None:
    try:
        decision = parse_decision(json.dumps(obj))
    except DecisionParseError as exc:
        assert exc.code in {
            "MISSING_TYPE",
            "WRAPPED_DECISION",
            "UNKNOWN_DECISION_TYPE",
            "UNEXPECTED_FIELD",
            "INVALID_FIELD",
        }
    else:
        assert decision.type.value == obj["type"]
        assert set(obj) <= {"type", "action", "args", "question", "reason"}


# -- values no store or digest can hold are refused at the door ------------------------------------------
@pytest.mark.parametrize(
    "text",
    [
        '{"type": "EXECUTE_TOOL", "action": "pay", "args": {"amount": NaN}}',
        '{"type": "EXECUTE_TOOL", "action": "pay", "args": {"amount": Infinity}}',
        '{"type": "EXECUTE_TOOL", "action": "pay", "args": {"limits": [1, -Infinity]}}',
        '{"type": "EXECUTE_TOOL", "action": "pay", "args": {"amount": 1e999}}',  # a literal that reads as inf
        '{"type": "FAIL", "reason": "x", "score": NaN}',  # anywhere in the text, not only in args
    ],
)
def test_non_finite_numbers_are_a_named_parse_failure(text: str) -> None:
    with pytest.raises(DecisionParseError) as err:
        parse_decision(text)
    assert err.value.code == "NON_FINITE_NUMBER"


def test_large_finite_numbers_still_parse() -> None:
    decision = parse_decision('{"type": "EXECUTE_TOOL", "action": "pay", "args": {"amount": 1.5e308, "n": -0.0}}')
    assert decision.args == {"amount": 1.5e308, "n": -0.0}


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_a_decision_built_by_code_with_a_non_finite_number_is_refused(bad: float) -> None:
    with pytest.raises(DecisionParseError) as err:
        ControlDecision(type=DecisionType.EXECUTE_TOOL, action="pay", args={"order": {"amounts": [1.0, bad]}})
    assert (err.value.code, err.value.details["path"]) == ("NON_FINITE_NUMBER", "args/order/amounts/1")


def test_read_json_is_the_one_strict_reader() -> None:
    from stateward.core.decision import read_json

    assert read_json('{"a": [1, 2.5, "x"]}') == {"a": [1, 2.5, "x"]}
    for text, code in [('{"a": 1, "a": 2}', "DUPLICATE_KEY"), ("[NaN]", "NON_FINITE_NUMBER"), ("{", "NOT_JSON")]:
        with pytest.raises(DecisionParseError) as err:
            read_json(text)
        assert err.value.code == code
