"""The one mapping between a ModelRequest and what providers understand, shared by every provider.

Outbound: visible actions become tools (plus ``request_user_input`` and ``finish``), or a JSON schema
for servers that can constrain output but not call tools. Inbound: exactly one native tool call becomes
the text of one decision; anything else is a named rejection. Nothing here guesses what a model meant.

Arguments are read by the Runtime's own strict JSON reader (no duplicate keys, no NaN or infinity), and
a reply over ``max_reply_bytes`` (64 KiB by default) is refused as REPLY_TOO_LARGE before anything in it
is decoded.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from stateward.core.canonical import compact_json
from stateward.core.decision import ParseFailureCode, non_finite_path, read_json
from stateward.core.errors import DecisionParseError, ErrorCode, UserError
from stateward.models.base import ActionSpec, ModelRequest
from stateward.models.errors import RejectionCode

REQUEST_USER_INPUT_TOOL = "request_user_input"
FINISH_TOOL = "finish"
RESERVED_TOOLS = frozenset({REQUEST_USER_INPUT_TOOL, FINISH_TOOL})

# Bounds that keep a constrained generation from being cut off by max_tokens inside a string or a list.
MAX_STRING = 400
MAX_ITEMS = 12
MAX_PLAN_STEPS = 12
# The largest reply (text plus tool-call arguments, UTF-8) a provider hands on; a larger one is refused
# unread. Override per model (``max_reply_bytes=``) or with STATEWARD_MODEL_MAX_REPLY_BYTES.
DEFAULT_MAX_REPLY_BYTES = 64 * 1024
_KEPT_OF_A_LARGE_REPLY = 1024  # what a REPLY_TOO_LARGE rejection keeps for the record

_QUESTION = {"type": "string", "description": "The question for the user.", "maxLength": MAX_STRING}
_REASON = {"type": "string", "description": "Why the run ends here.", "maxLength": MAX_STRING}
_EMPTY_OBJECT: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}
CONTROL_PARAMETERS: dict[str, dict[str, Any]] = {
    REQUEST_USER_INPUT_TOOL: {
        "type": "object",
        "properties": {"question": _QUESTION},
        "required": ["question"],
        "additionalProperties": False,
    },
    FINISH_TOOL: {
        "type": "object",
        "properties": {"reason": _REASON},
        "required": ["reason"],
        "additionalProperties": False,
    },
}


@dataclass(frozen=True)
class ToolDef:
    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class ToolCall:
    """One native tool call as a provider returned it; ``arguments`` is raw JSON text or decoded."""

    name: str
    arguments: str | dict[str, Any] | None


@dataclass(frozen=True)
class Interpretation:
    """The text to hand to the Runtime, or why the reply is refused before parsing."""

    text: str
    rejection_code: RejectionCode | None = None
    rejection_message: str | None = None


def reject(code: RejectionCode, message: str, text: str = "") -> Interpretation:
    return Interpretation(text=text, rejection_code=code, rejection_message=message)


# -- outbound -----------------------------------------------------------------------------------------
def tool_definitions(request: ModelRequest) -> list[ToolDef]:
    """Visible actions as tools, then the two control tools. A clash with a control tool's name is a bug."""
    clash = sorted(a.name for a in request.visible_actions if a.name in RESERVED_TOOLS)
    if clash:
        raise UserError(
            f"action name(s) {clash} clash with stateward's control tools", code=ErrorCode.RESERVED_TOOL_NAME
        )
    tools = [ToolDef(a.name, a.description or a.name, _parameters(a)) for a in request.visible_actions]
    tools.append(
        ToolDef(
            REQUEST_USER_INPUT_TOOL,
            "Ask the user a question and stop the run until they answer.",
            CONTROL_PARAMETERS[REQUEST_USER_INPUT_TOOL],
        )
    )
    tools.append(ToolDef(FINISH_TOOL, "End the run: the goal is met.", CONTROL_PARAMETERS[FINISH_TOOL]))
    return tools


def _parameters(action: ActionSpec) -> dict[str, Any]:
    return inline_refs(action.input_schema) if action.input_schema else dict(_EMPTY_OBJECT)


def inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """Resolve local ``#/$defs/...`` references so a schema can be embedded inside another one."""
    defs: dict[str, Any] = schema.get("$defs", {})

    def walk(node: Any, depth: int) -> Any:
        if depth > 32:
            raise UserError("action schema nests references too deeply (recursive?)", code=ErrorCode.UNSUPPORTED_SCHEMA)
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/") and ref[8:] in defs:
                return walk(defs[ref[8:]], depth + 1)
            return {k: walk(v, depth + 1) for k, v in node.items() if k != "$defs"}
        if isinstance(node, list):
            return [walk(v, depth + 1) for v in node]
        return node

    out: dict[str, Any] = walk(schema, 0)
    return out


def bounded(schema: dict[str, Any], *, max_string: int = MAX_STRING, max_items: int = MAX_ITEMS) -> dict[str, Any]:
    """A copy where every string has a ``maxLength`` and every array a ``maxItems``.

    Without bounds a constrained decoder may write one string until max_tokens cuts it off, and the
    reply is then truncated JSON rather than a decision.
    """

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(v) for v in node]
        if not isinstance(node, dict):
            return node
        out = {k: walk(v) for k, v in node.items()}
        kinds = out.get("type")
        kinds = kinds if isinstance(kinds, list) else [kinds]
        if "string" in kinds and "maxLength" not in out and "enum" not in out and "const" not in out:
            out["maxLength"] = max_string
        if "array" in kinds and "maxItems" not in out:
            out["maxItems"] = max_items
        return out

    result: dict[str, Any] = walk(inline_refs(schema))
    return result


def _text(description: str, max_string: int) -> dict[str, Any]:
    return {"type": "string", "description": description, "maxLength": max_string}


def _variant(fixed: dict[str, Any], free: dict[str, Any]) -> dict[str, Any]:
    props = {k: {"const": v} for k, v in fixed.items()} | free
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


def decision_schema(request: ModelRequest, max_string: int = MAX_STRING) -> dict[str, Any]:
    """JSON schema of exactly one ControlDecision over the visible actions (``type`` first, as parsed)."""
    variants = [
        _variant({"type": "EXECUTE_TOOL", "action": a.name}, {"args": bounded(_parameters(a), max_string=max_string)})
        for a in request.visible_actions
    ]
    variants.append(_variant({"type": "REQUEST_USER_INPUT"}, {"question": _text("The question.", max_string)}))
    variants.append(_variant({"type": "FINISH"}, {"reason": _text("Why the goal is met.", max_string)}))
    variants.append(_variant({"type": "FAIL"}, {"reason": _text("Why the run must fail.", max_string)}))
    return {"anyOf": variants}


def plan_schema(request: ModelRequest, max_string: int = MAX_STRING) -> dict[str, Any]:
    """JSON schema of the step plan that PlanAndExecuteController parses."""
    steps = [
        _variant({"kind": "tool", "action": a.name}, {"args": bounded(_parameters(a), max_string=max_string)})
        for a in request.visible_actions
    ]
    steps.append(_variant({"kind": "await_approval"}, {"question": _text("The question.", max_string)}))
    steps.append(_variant({"kind": "finish"}, {"reason": _text("Why the plan ends.", max_string)}))
    return {
        "type": "object",
        "properties": {
            "steps": {"type": "array", "minItems": 1, "maxItems": MAX_PLAN_STEPS, "items": {"anyOf": steps}}
        },
        "required": ["steps"],
        "additionalProperties": False,
    }


def content_schema(request: ModelRequest, max_string: int = MAX_STRING) -> dict[str, Any]:
    """A workflow model node fills the arguments of its single tool; otherwise any JSON object."""
    if len(request.visible_actions) == 1:
        return bounded(_parameters(request.visible_actions[0]), max_string=max_string)
    return {"type": "object"}


def truncated(limit: int, produced: int | None, text: str) -> Interpretation:
    """REPLY_TRUNCATED: the reply was cut before it ended, by ``max_tokens`` or, when it stopped short of
    that, by the server's context window (a local server's ``-c``); never handed to the parser."""
    if produced is not None and 0 < produced < limit:
        why = f"cut off after {produced} tokens, before max_tokens={limit}: the server's context window is full"
    else:
        why = f"cut off at max_tokens={limit}"
    return reject(RejectionCode.REPLY_TRUNCATED, why, text)


# -- inbound ------------------------------------------------------------------------------------------
def _schema_errors(schema: dict[str, Any], value: Any) -> list[str]:
    try:
        validator = Draft202012Validator(inline_refs(schema) if schema else _EMPTY_OBJECT)
        errors = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
    except SchemaError as exc:  # a broken tool schema is the agent's bug, not the model's
        raise UserError(f"tool schema is invalid: {exc.message}", code=ErrorCode.INVALID_TOOL_SCHEMA) from None
    return [f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in errors[:3]]


_STRICT_REJECTIONS = {
    ParseFailureCode.DUPLICATE_KEY.value: RejectionCode.DUPLICATE_KEY,
    ParseFailureCode.NON_FINITE_NUMBER.value: RejectionCode.NON_FINITE_NUMBER,
}


def _decode(name: str, arguments: str | dict[str, Any] | None, raw: str) -> dict[str, Any] | Interpretation:
    """The decoded argument object, or the named rejection saying why there is none.

    Text is read as strictly as a decision (duplicate keys, NaN and infinities are refused); an object a
    provider already decoded is checked for non-finite numbers (its duplicates are checked on the body).
    """
    if arguments is None or arguments == "":
        return {}
    try:
        value = arguments if isinstance(arguments, dict) else read_json(arguments)
    except DecisionParseError as exc:
        code = _STRICT_REJECTIONS.get(exc.code, RejectionCode.INVALID_TOOL_ARGUMENTS)
        why = exc.message if code is not RejectionCode.INVALID_TOOL_ARGUMENTS else f"arguments are {exc.message}"
        return reject(code, f"{name}: {why}", raw)
    if not isinstance(value, dict):
        why = f"{name}: arguments are a {type(value).__name__}, not an object"
        return reject(RejectionCode.INVALID_TOOL_ARGUMENTS, why, raw)
    found = non_finite_path(value)
    if found is not None:
        return reject(RejectionCode.NON_FINITE_NUMBER, f"{name}: {found} is not a finite number", raw)
    return value


def reply_size(text: str, calls: Sequence[ToolCall] = ()) -> int:
    """UTF-8 bytes of a reply's text plus its tool calls' arguments (as sent, or compact JSON if decoded)."""
    size = len(text.encode("utf-8"))
    for call in calls:
        args = call.arguments
        if isinstance(args, str):
            size += len(args.encode("utf-8"))
        elif args is not None:
            size += len(compact_json(args).encode("utf-8"))
    return size


def oversized(text: str, calls: Sequence[ToolCall], limit: int | None) -> Interpretation | None:
    """REPLY_TOO_LARGE for a reply over ``limit`` bytes (None: no limit); only its head is kept."""
    if limit is None:
        return None
    size = reply_size(text, calls)
    if size <= limit:
        return None
    head = text[:_KEPT_OF_A_LARGE_REPLY] if text else ", ".join(c.name for c in calls)[:_KEPT_OF_A_LARGE_REPLY]
    why = f"the reply is {size} bytes, over the limit of {limit}; it was not read"
    return reject(RejectionCode.REPLY_TOO_LARGE, why, f"{head}…[{size} bytes, not kept]")


def _calls_text(calls: Sequence[ToolCall]) -> str:
    return json.dumps([{"name": c.name, "arguments": c.arguments} for c in calls], ensure_ascii=False)


def body_rejection(body: str | bytes, calls: Sequence[ToolCall]) -> Interpretation | None:
    """A provider SDK that decodes tool arguments itself drops duplicate keys and lets NaN through
    silently: the raw response body is read strictly instead, and a violation is named."""
    try:
        read_json(body)
    except DecisionParseError as exc:
        code = _STRICT_REJECTIONS.get(exc.code)
        if code is not None:
            return reject(code, f"the reply's tool arguments: {exc.message}", _calls_text(calls))
    return None


def decision_from_tool_calls(calls: list[ToolCall], request: ModelRequest) -> Interpretation:
    """Exactly one call to a known tool with schema-valid arguments becomes one decision's JSON text.

    A refused reply keeps the calls as they came (JSON) in its text, for the record.
    """
    raw = _calls_text(calls)
    if len(calls) != 1:
        names = [c.name for c in calls]
        why = f"{len(calls)} tool calls {names}; exactly one is allowed"
        return reject(RejectionCode.MULTIPLE_TOOL_CALLS if calls else RejectionCode.EMPTY_REPLY, why, raw)
    call = calls[0]
    actions = {a.name: a for a in request.visible_actions}
    if call.name not in actions and call.name not in RESERVED_TOOLS:
        return reject(RejectionCode.UNKNOWN_TOOL, f"tool {call.name!r} is not among the visible actions", raw)
    args = _decode(call.name, call.arguments, raw)
    if isinstance(args, Interpretation):
        return args
    schema = CONTROL_PARAMETERS[call.name] if call.name in RESERVED_TOOLS else actions[call.name].input_schema
    problems = _schema_errors(schema, args)
    if problems:
        return reject(RejectionCode.INVALID_TOOL_ARGUMENTS, f"{call.name}: " + "; ".join(problems), raw)
    if call.name == REQUEST_USER_INPUT_TOOL:
        decision: dict[str, Any] = {"type": "REQUEST_USER_INPUT", "question": args["question"]}
    elif call.name == FINISH_TOOL:
        decision = {"type": "FINISH", "reason": args["reason"]}
    else:
        decision = {"type": "EXECUTE_TOOL", "action": call.name, "args": args}
    return Interpretation(text=json.dumps(decision, ensure_ascii=False))


def strip_thinking(text: str) -> tuple[str, bool]:
    """(text without a leading <think>...</think> block, whether there was one)."""
    stripped = text.lstrip()
    if stripped.startswith("<think>") and "</think>" in stripped:
        return stripped.split("</think>", 1)[1], True
    return text, False


def text_reply(text: str, *, had_thinking: bool) -> Interpretation:
    """A reply without tool calls: its text goes to the Runtime's strict parser unless there is none."""
    visible, thought = strip_thinking(text)
    if not visible.strip():
        if had_thinking or thought:
            return reject(RejectionCode.THINKING_ONLY, "the reply contains only reasoning, no answer", text)
        return reject(RejectionCode.EMPTY_REPLY, "the reply is empty")
    return Interpretation(text=text)
