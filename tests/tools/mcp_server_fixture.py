"""A real MCP server for the tests, written with the official SDK and started as a subprocess.

``python mcp_server_fixture.py LEDGER stdio`` or ``... LEDGER http PORT``. Its tools: ``search``
(read-only), ``send_email`` (appends one line, keyed by the caller's idempotency key, to the ledger
file), ``crash_after_send`` (appends, then the whole process exits mid-call), ``fail`` (an ``isError``
result), ``shout`` (a long text) and ``odd name!`` (an unusable name). The ledger is the test's view
of the world's side effects.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer

IDEMPOTENCY_META_KEY = "stateward/idempotency-key"

LEDGER = Path(sys.argv[1])
server = MCPServer("stateward-test-fixture")


def _key(ctx: Context) -> str | None:
    meta: Any = ctx.request_context.meta
    if meta is None:
        return None
    value = meta.get(IDEMPOTENCY_META_KEY) if isinstance(meta, dict) else getattr(meta, IDEMPOTENCY_META_KEY, None)
    return str(value) if value is not None else None


def _append(tool: str, to: str, ctx: Context) -> None:
    with LEDGER.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps({"tool": tool, "to": to, "key": _key(ctx)}) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


@server.tool()
def search(query: str, limit: int = 3) -> str:
    """Find documents matching the query (read-only)."""
    return "\n".join(f"result {i} for {query}" for i in range(1, limit + 1))


@server.tool()
def send_email(to: str, body: str, ctx: Context) -> str:
    """Send an email (a side effect: one ledger line per delivery)."""
    _append("send_email", to, ctx)
    return f"sent to {to}"


@server.tool()
def crash_after_send(to: str, ctx: Context) -> str:
    """Deliver, then die before answering: the caller cannot know whether it happened."""
    _append("crash_after_send", to, ctx)
    os._exit(3)


@server.tool()
def fail(reason: str) -> str:
    """Always fails inside the tool (an isError result, not a protocol error)."""
    raise ValueError(f"refused: {reason}")


@server.tool()
def shout(text: str) -> str:
    """Return a long text (bounded by the gateway's max_result_bytes)."""
    return text * 1000


def _odd() -> str:
    return "odd"


# A name no stateward tool may carry: the client must refuse it by name, not crash on it.
server.add_tool(_odd, name="odd name!", description="A tool whose name is not usable.")


if __name__ == "__main__":
    if sys.argv[2] == "stdio":
        server.run()
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[3]))
