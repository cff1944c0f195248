"""MCP tools through the same gateway: an MCP server's tools become ToolSpecs.

``mcp_tools(server, declare={...})`` lists the server's tools and builds one ToolSpec each. The input
is validated against the tool's own JSON Schema before anything is sent; the call goes through the
SDK with the spec's timeout; failures map to the gateway's error classes (see mcp_connection).

The operator, not the server, says what a tool does: a tool's annotations (``readOnlyHint`` and the
like) are hints from an untrusted party and are ignored. A tool declared ``McpTool(side_effect=False)``
is read-only; every tool *not* declared is treated as side-effecting and guarded (it needs an approval
bound to the exact call). Each call carries its idempotency key in the request's ``_meta``
(``IDEMPOTENCY_META_KEY``) so a server can deduplicate, and a ``lookup`` can ask what became of it.

A result's content blocks become JSON data (text as text; images, audio and blobs by size only), bounded
by ``max_result_bytes`` like any tool's. MCP text is data, never instructions: nothing reads it to decide.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from mcp_types import CallToolResult, ContentBlock, EmbeddedResource, TextContent, TextResourceContents, Tool
from pydantic import BaseModel, ConfigDict, Field

from stateward.core.canonical import canonical_json
from stateward.core.errors import ErrorCode, UserError
from stateward.core.state import ApprovalScope

from .errors import ToolFailure
from .mcp_connection import McpServer
from .redaction import RedactionRules, rules_from
from .retry import RetryPolicy
from .spec import DEFAULT_MAX_RESULT_BYTES, LookupFn, ToolContext, ToolSpec

__all__ = ["IDEMPOTENCY_META_KEY", "McpServer", "McpTool", "mcp_tools"]

IDEMPOTENCY_META_KEY = "stateward/idempotency-key"
# What a stateward tool name may be (what model APIs accept for function names, too).
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
_MAX_DESCRIPTION = 1024
_MAX_ERROR_TEXT = 500


class McpTool(BaseModel):
    """The operator's declaration of one MCP tool: what it does and the policy the gateway applies.

    A tool the operator does not declare gets the defaults below *as if* declared with
    ``side_effect=True, requires_approval=True``: guarded until someone says otherwise.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    side_effect: bool = True
    requires_approval: bool = False
    approval_scope: ApprovalScope = ApprovalScope.ONCE
    approver_role: str | None = None  # who may answer this tool's requests, over the agent's approver_role
    permission: str | None = None
    timeout_s: float = Field(default=30.0, gt=0)
    retry: RetryPolicy = RetryPolicy()
    max_result_bytes: int | None = Field(default=DEFAULT_MAX_RESULT_BYTES, ge=0)
    redact: RedactionRules | list[str] | None = None
    lookup: LookupFn | None = None
    description: str | None = None  # replaces the server's description


_UNDECLARED = McpTool(side_effect=True, requires_approval=True)


def mcp_tools(
    server: McpServer,
    *,
    declare: Mapping[str, McpTool] | None = None,
    include: frozenset[str] | set[str] | list[str] | None = None,
    prefix: str = "",
    max_tools: int = 128,
    max_schema_bytes: int = 64 * 1024,
    list_timeout_s: float = 30.0,
) -> list[ToolSpec]:
    """Turn the server's tools into ToolSpecs for a ToolRegistry.

    ``declare`` maps a tool's MCP name to its McpTool; an undeclared tool is side-effecting and guarded.
    ``include`` limits which MCP tools are taken; ``prefix`` namespaces them (``files_`` + ``read``).
    A tool that cannot be taken safely raises UserError naming it: MCP_TOOL_NAME_INVALID (not a usable
    name), MCP_TOOL_SCHEMA_TOO_LARGE, MCP_TOOL_SCHEMA_INVALID (not an object schema); MCP_TOOL_NOT_FOUND
    for a declared or included name the server does not list, MCP_TOO_MANY_TOOLS past ``max_tools``.
    """
    declare = dict(declare or {})
    listed = {t.name: t for t in server.list_tools(timeout_s=list_timeout_s)}
    wanted = set(include) if include is not None else set(listed)
    missing = sorted((set(declare) | wanted) - set(listed))
    if missing:
        raise UserError(f"MCP server {server.name!r} lists no tool named {missing}", code=ErrorCode.MCP_TOOL_NOT_FOUND)
    if len(wanted) > max_tools:
        raise UserError(
            f"MCP server {server.name!r} offers {len(wanted)} tools (max_tools={max_tools})",
            code=ErrorCode.MCP_TOO_MANY_TOOLS,
        )
    return [
        _spec(server, listed[name], declare.get(name, _UNDECLARED), prefix, max_schema_bytes) for name in sorted(wanted)
    ]


def _spec(server: McpServer, remote: Tool, decl: McpTool, prefix: str, max_schema_bytes: int) -> ToolSpec:
    name = prefix + remote.name
    if not _NAME.match(name):
        raise UserError(
            f"MCP tool {remote.name[:80]!r} of {server.name!r}: {name[:80]!r} is not a usable tool name",
            code=ErrorCode.MCP_TOOL_NAME_INVALID,
        )
    schema = remote.input_schema
    size = len(canonical_json(schema).encode("utf-8"))
    if size > max_schema_bytes:
        raise UserError(
            f"MCP tool {remote.name!r}: input schema of {size} bytes exceeds {max_schema_bytes}",
            code=ErrorCode.MCP_TOOL_SCHEMA_TOO_LARGE,
        )
    if not isinstance(schema, dict) or schema.get("type") != "object":
        raise UserError(
            f"MCP tool {remote.name!r}: input schema is not an object schema", code=ErrorCode.MCP_TOOL_SCHEMA_INVALID
        )
    description = decl.description if decl.description is not None else (remote.description or "")
    try:
        return ToolSpec(
            name=name,
            description=description[:_MAX_DESCRIPTION],
            handler=_McpCall(server, remote.name, decl.timeout_s),
            input_json_schema=schema,
            permission=decl.permission,
            side_effect=decl.side_effect,
            requires_approval=decl.requires_approval,
            approval_scope=decl.approval_scope,
            approver_role=decl.approver_role,
            timeout_s=decl.timeout_s,
            retry=decl.retry,
            max_result_bytes=decl.max_result_bytes,
            redact=decl.redact if isinstance(decl.redact, RedactionRules) else rules_from(decl.redact),
            lookup=decl.lookup,
        )
    except UserError as exc:
        if exc.code == ErrorCode.INVALID_TOOL_SCHEMA:
            raise UserError(f"MCP tool {remote.name!r}: {exc.message}", code=ErrorCode.MCP_TOOL_SCHEMA_INVALID) from exc
        raise


class _McpCall:
    """The handler of one MCP tool: send the call (with its idempotency key), shape the answer."""

    def __init__(self, server: McpServer, remote_name: str, timeout_s: float):
        self._server = server
        self._remote = remote_name
        self._timeout_s = timeout_s

    def __call__(self, arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
        meta: Any = {IDEMPOTENCY_META_KEY: context.idempotency_key}
        result = self._server.call_tool(self._remote, arguments, timeout_s=self._timeout_s, meta=meta)
        shaped = result_to_json(result)
        if result.is_error:
            text = " ".join(b.get("text", "") for b in shaped["content"] if b.get("type") == "text")
            raise ToolFailure(f"MCP tool {self._remote!r} reported an error: {text[:_MAX_ERROR_TEXT]}")
        return shaped

    def __repr__(self) -> str:
        return f"mcp:{self._server.name}/{self._remote}"


def result_to_json(result: CallToolResult) -> dict[str, Any]:
    """``{"content": [...], "structured": ...}``: text kept, binary payloads replaced by their size."""
    out: dict[str, Any] = {"content": [_block(b) for b in result.content]}
    if result.structured_content is not None:
        out["structured"] = result.structured_content
    return out


def _block(block: ContentBlock) -> dict[str, Any]:
    if isinstance(block, TextContent):
        return {"type": "text", "text": block.text}
    if isinstance(block, EmbeddedResource):
        res = block.resource
        if isinstance(res, TextResourceContents):
            return {"type": "resource", "uri": str(res.uri), "text": res.text}
        return {"type": "resource", "uri": str(res.uri), "mime_type": res.mime_type, "bytes": len(res.blob)}
    dumped = block.model_dump(mode="json", exclude_none=True)
    if "data" in dumped:  # image / audio: base64 is not something a model step can use
        dumped["bytes"] = len(dumped.pop("data"))
    return dumped
