"""ControlDecision and the strict parser that turns a signal source's raw text into one.

The parser never guesses. The top-level JSON object's ``type`` decides; a wrapper such as
``{"type": "json_object", "content": {...}}``, prose around the JSON, duplicate keys, non-finite numbers
(``NaN``, ``Infinity``, ``1e999``: no store or digest can hold them) or unknown fields are named failures.
:func:`read_json` is the one strict JSON reader: native tool-call arguments go through it too.
Missing optional fields are *not* failures: whether a REQUEST_USER_INPUT without a
question may stop the run is the Runtime's call, made against the run's state.
"""

from __future__ import annotations

import json
import math
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator

from stateward.core.errors import DecisionParseError, ErrorCode


class DecisionType(StrEnum):
    """The four kinds of candidate decision; only the Runtime turns one into a transition."""

    EXECUTE_TOOL = "EXECUTE_TOOL"
    REQUEST_USER_INPUT = "REQUEST_USER_INPUT"
    FINISH = "FINISH"
    FAIL = "FAIL"


class SignalSource(StrEnum):
    """Who produced a decision; recorded on ``signal_received``."""

    MODEL = "model"
    PLAN_STEP = "plan_step"
    WORKFLOW_NODE = "workflow_node"
    OPERATOR = "operator"
    RUNTIME = "runtime"  # the Runtime itself: an approved guarded call it runs before deciding again
    CONTROLLER = "controller"  # the controller's own code, not a model (e.g. a loop guard ending the run)
    RULE = "rule"  # a plan item's registered procedure: a RULE, TOOL or VALIDATION item run as code, not by a model


class ControlDecision(BaseModel):
    """A candidate next step. Proposing it changes nothing; only the Runtime acts on it (``transition.handle``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: DecisionType
    action: str | None = None
    args: dict[str, Any] | None = None
    question: str | None = None
    reason: str | None = None

    @field_validator("args")
    @classmethod
    def _finite_args(cls, args: dict[str, Any] | None) -> dict[str, Any] | None:
        """A decision built by code is refused at the door like parsed text (raises DecisionParseError)."""
        if args is not None:
            _refuse_non_finite(args, "args")
        return args


class ParseFailureCode(StrEnum):
    EMPTY_OUTPUT = ErrorCode.EMPTY_OUTPUT.value
    NOT_JSON = ErrorCode.NOT_JSON.value
    NOT_AN_OBJECT = ErrorCode.NOT_AN_OBJECT.value
    DUPLICATE_KEY = ErrorCode.DUPLICATE_KEY.value
    NON_FINITE_NUMBER = ErrorCode.NON_FINITE_NUMBER.value
    MISSING_TYPE = ErrorCode.MISSING_TYPE.value
    WRAPPED_DECISION = ErrorCode.WRAPPED_DECISION.value
    UNKNOWN_DECISION_TYPE = ErrorCode.UNKNOWN_DECISION_TYPE.value
    UNEXPECTED_FIELD = ErrorCode.UNEXPECTED_FIELD.value
    INVALID_FIELD = ErrorCode.INVALID_FIELD.value


_FIELDS = frozenset(ControlDecision.model_fields)
_STRING_FIELDS = ("action", "question", "reason")
_TYPES = frozenset(t.value for t in DecisionType)


def _fail(code: ParseFailureCode, message: str, **details: Any) -> DecisionParseError:
    return DecisionParseError(message, code=ErrorCode(code), details=details)


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise _fail(ParseFailureCode.DUPLICATE_KEY, f"key {key!r} appears twice", key=key)
        seen[key] = value
    return seen


def _finite_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):  # 1e999 reads as inf
        raise _fail(ParseFailureCode.NON_FINITE_NUMBER, f"number {literal[:40]} is not finite", literal=literal[:40])
    return value


def _no_constant(literal: str) -> Any:
    raise _fail(ParseFailureCode.NON_FINITE_NUMBER, f"{literal} is not a JSON number", literal=literal)


_STRICT = {"object_pairs_hook": _no_duplicate_keys, "parse_constant": _no_constant, "parse_float": _finite_float}
# Built once: ``json.loads`` with hooks builds a decoder (and its scanner) on every call. It keeps no state
# between calls, so threads share it.
_DECODER = json.JSONDecoder(**_STRICT)  # type: ignore[arg-type]


def read_json(text: str | bytes) -> Any:
    """Strict JSON: exactly one value, no duplicate keys, no NaN / Infinity (Python's json accepts both).

    Raises DecisionParseError: NOT_JSON, DUPLICATE_KEY or NON_FINITE_NUMBER.
    """
    try:
        if isinstance(text, str) and not text.startswith("\ufeff"):
            return _DECODER.decode(text)
        return json.loads(text, **_STRICT)  # type: ignore[arg-type]  # bytes, or a BOM json.loads refuses by name
    except DecisionParseError:
        raise
    except (ValueError, RecursionError) as exc:
        raise _fail(ParseFailureCode.NOT_JSON, f"not a single JSON value: {exc}") from None


def non_finite_path(value: Any, path: str = "") -> str | None:
    """Where in already-decoded data a NaN or an infinity sits (``args/a/0``), or None."""
    if isinstance(value, float):
        return None if math.isfinite(value) else (path or "<root>")
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, list | tuple):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        found = non_finite_path(item, f"{path}/{key}" if path else str(key))
        if found is not None:
            return found
    return None


def _refuse_non_finite(value: Any, path: str) -> None:
    found = non_finite_path(value, path)
    if found is not None:
        raise _fail(ParseFailureCode.NON_FINITE_NUMBER, f"{found} is not a finite number", path=found)


def _looks_wrapped(obj: dict[str, Any]) -> bool:
    kind = obj.get("type")
    known = isinstance(kind, str) and kind in _TYPES
    return isinstance(obj.get("content"), dict | str) and not known


def parse_decision(text: str) -> ControlDecision:
    """Exactly one decision object, or a DecisionParseError with a ParseFailureCode."""
    if not isinstance(text, str) or not text.strip():
        raise _fail(ParseFailureCode.EMPTY_OUTPUT, "the signal source produced no text")
    value = read_json(text)
    if not isinstance(value, dict):
        raise _fail(ParseFailureCode.NOT_AN_OBJECT, f"top level is {type(value).__name__}, not an object")
    return decision_from_object(value)


def decision_from_object(value: dict[str, Any]) -> ControlDecision:
    """The same strict rules for a decision that arrives already decoded (e.g. native tool calls)."""
    if "type" not in value:
        raise _fail(ParseFailureCode.MISSING_TYPE, "the object has no top-level 'type'")
    kind = value["type"]
    if _looks_wrapped(value):
        raise _fail(
            ParseFailureCode.WRAPPED_DECISION,
            f"decision wrapped in an envelope of type {kind!r}; only the top-level 'type' counts",
            envelope_type=kind if isinstance(kind, str) else None,
        )
    if not isinstance(kind, str) or kind not in _TYPES:
        raise _fail(ParseFailureCode.UNKNOWN_DECISION_TYPE, f"unknown decision type {kind!r}")
    extra = sorted(set(value) - _FIELDS)
    if extra:
        raise _fail(ParseFailureCode.UNEXPECTED_FIELD, f"unexpected field(s) {extra}", fields=extra)
    for name in _STRING_FIELDS:
        if value.get(name) is not None and not isinstance(value[name], str):
            raise _fail(ParseFailureCode.INVALID_FIELD, f"'{name}' must be a string", field=name)
    if value.get("args") is not None and not isinstance(value["args"], dict):
        raise _fail(ParseFailureCode.INVALID_FIELD, "'args' must be an object", field="args")
    # Non-finite numbers in ``args``: refused by ControlDecision's own validator, the one walk over them.
    return ControlDecision(
        type=DecisionType(kind),
        action=value.get("action"),
        args=value.get("args"),
        question=value.get("question"),
        reason=value.get("reason"),
    )
