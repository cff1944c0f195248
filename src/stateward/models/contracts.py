"""Reply contracts: for each document a model is asked for, the one schema both providers send.

A request names its contract (``ModelRequest.reply_contract``): a decision, a step plan, a plan
document, a plan patch, a workflow node's content or a model check's judgement. This module turns it
into the JSON schema a constrained server enforces (OpenAI ``response_format`` json_schema, Anthropic
``output_config.format``), the text the ``+json`` modes are told, and the reply's ``max_tokens``.

The decision, step-plan and node-content schemas are shaped by the visible actions and built here (via
``mapping``); the documents defined above the models layer (plan, patch, judgement) travel in the
request as their pydantic model's JSON schema (``ModelRequest.reply_schema``), attached by the caller
that parses the reply with that same model. Every schema is sent in the strict form
(:func:`strict_schema`): each object closed and every property required, every string and array
bounded. That admits a subset of what the Runtime's parser accepts (a field with a default must be
written out), never a document it refuses.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from stateward.core.errors import ErrorCode, UserError
from stateward.core.model_io import ModelRequest, ReplyContract
from stateward.models import mapping

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "DOCUMENT_MAX_ITEMS",
    "ReplyContract",
    "max_tokens_for",
    "reply_instructions",
    "response_schema",
    "strict_schema",
]
# A reply's max_tokens by the document it must be: a plan document for a real case runs to thousands
# of tokens (the payment case's plan is ~4k), a decision to a few hundred.
DEFAULT_MAX_TOKENS: Mapping[ReplyContract, int] = {
    ReplyContract.DECISION: 1024,
    ReplyContract.STEP_PLAN: 2048,
    ReplyContract.PLAN_DOCUMENT: 6000,
    ReplyContract.PLAN_PATCH: 4000,
    ReplyContract.NODE_CONTENT: 2048,
    ReplyContract.CHECK_JUDGEMENT: 512,
}
# How many entries an array of a document may hold: a plan's work items outnumber a decision's list args.
DOCUMENT_MAX_ITEMS: Mapping[ReplyContract, int] = {
    ReplyContract.PLAN_DOCUMENT: 32,
    ReplyContract.PLAN_PATCH: 32,
}
# The largest integer a document may hold: without a bound a constrained decoder may write digits until
# max_tokens cuts it off (a plan's version, an item's estimated tokens).
MAX_INTEGER = 999_999_999
# Keywords that only describe (pydantic's titles and class docstrings) or that strict mode refuses: dropped
# from a sent document schema, which the prompt shows too.
_DROPPED = frozenset({"title", "description", "default", "examples", "$schema", "$id"})


def max_tokens_for(
    contract: ReplyContract, *, flat: int | None = None, by_contract: Mapping[ReplyContract, int] | None = None
) -> int:
    """The reply limit for ``contract``: its own setting, else a flat limit for all, else its default."""
    if by_contract and contract in by_contract:
        return by_contract[contract]
    return flat if flat is not None else DEFAULT_MAX_TOKENS[contract]


def _free_form(node: Any) -> bool:
    """An object schema with no properties of its own (``dict[str, Any]``): strict mode cannot say it."""
    if not isinstance(node, dict):
        return False
    if "anyOf" in node:
        return any(_free_form(v) for v in node["anyOf"])
    return node.get("type") == "object" and not node.get("properties")


def strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` in the form strict decoders take: references inlined, each object closed and every
    property required, every integer bounded (``MAX_INTEGER``); an optional free-form object (e.g. a plan
    output's own ``schema``) must be ``null``, a required one is an UNSUPPORTED_SCHEMA error (no strict
    schema can admit it)."""

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(v) for v in node]
        if not isinstance(node, dict):
            return node
        out = {k: walk(v) for k, v in node.items() if k not in _DROPPED and k != "properties"}
        if isinstance(node.get("properties"), dict):  # a map of names, not of keywords: nothing dropped
            out["properties"] = {name: walk(v) for name, v in node["properties"].items()}
        if out.get("type") == "integer" and "maximum" not in out and "exclusiveMaximum" not in out:
            out["maximum"] = MAX_INTEGER
        props = out.get("properties")
        if out.get("type") == "object" and isinstance(props, dict):
            required = set(node.get("required", []))
            for name in props:
                if _free_form(node["properties"][name]):
                    if name in required:
                        raise UserError(
                            f"property {name!r} is a free-form object; a strict schema cannot require it",
                            code=ErrorCode.UNSUPPORTED_SCHEMA,
                        )
                    props[name] = {"type": "null"}
            out["required"] = list(props)
            out["additionalProperties"] = False
        return out

    result: dict[str, Any] = walk(mapping.inline_refs(schema))
    return result


def response_schema(
    request: ModelRequest, max_string: int = mapping.MAX_STRING, max_items: int | None = None
) -> tuple[str, dict[str, Any]]:
    """(name, schema) of the document this request's reply must be, as both providers send it.

    ``max_string`` bounds every string and ``max_items`` every array of a plan document or patch (None: 32):
    lower them for slow local servers, where a small constrained model fills every string and list to its
    bound before it closes the document.
    """
    contract = request.reply_contract
    if contract is ReplyContract.DECISION:
        return "control_decision", mapping.decision_schema(request, max_string)
    if contract is ReplyContract.STEP_PLAN:
        return "step_plan", mapping.plan_schema(request, max_string)
    if contract is ReplyContract.NODE_CONTENT:
        return "node_content", mapping.content_schema(request, max_string)
    if request.reply_schema is None:
        raise UserError(
            f"a {contract.value} request carries no reply_schema (attach the document's schema)",
            code=ErrorCode.UNSUPPORTED_SCHEMA,
        )
    items = max_items if max_items is not None and contract in DOCUMENT_MAX_ITEMS else None
    items = items or DOCUMENT_MAX_ITEMS.get(contract, mapping.MAX_ITEMS)
    return contract.value, mapping.bounded(strict_schema(request.reply_schema), max_string=max_string, max_items=items)


def reply_instructions(
    request: ModelRequest, max_string: int = mapping.MAX_STRING, max_items: int | None = None, *, enforced: bool = False
) -> str:
    """What a model is told about its reply: the schema itself when it answers in free text, or (when the
    server is sent the schema and holds the reply to it) the document's name, which keeps a small
    local model's prompt short."""
    name, schema = response_schema(request, max_string, max_items)
    if enforced:
        return f"Reply with exactly one JSON document ({name}); the server holds it to its JSON Schema."
    shown = json.dumps(schema, ensure_ascii=False, separators=(",", ":"))
    return f"Reply with exactly one JSON document ({name}) valid under this JSON Schema, and nothing else: {shown}"
