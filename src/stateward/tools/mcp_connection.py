"""One connection to one MCP server, usable from the (synchronous) Tool Gateway.

The official SDK's client is async. Each McpServer owns a private event loop on a daemon thread; one
task on that loop holds the SDK session open, and every request is submitted to the loop with
``run_coroutine_threadsafe`` and waited for with a timeout. A session that broke (the server died,
the HTTP endpoint went away) is reopened before the *next* request, never in the middle of one.
``close()`` ends the session (over stdio: the server process too), then the loop and its thread.

Failures come out as the gateway's error classes, split by what the server can have done:
ServiceUnavailable when the request was never sent (cannot start or reach the server, handshake
failed) — safe to retry; ToolOutcomeUnknown when it was sent and the connection died before the
answer — a side effect is then reconciled, never repeated blindly; ToolTimeout when no answer came in
time; ToolInvalidArgument / ToolFailure for a JSON-RPC error answer.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import sys
import threading
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, TextIO, TypeVar

from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, RequestParamsMeta, Tool
from mcp_types.jsonrpc import CONNECTION_CLOSED, INVALID_PARAMS

from stateward.core.errors import ErrorCode, UserError

from .errors import ServiceUnavailable, ToolFailure, ToolInvalidArgument, ToolOutcomeUnknown, ToolTimeout

__all__ = ["McpServer"]

_T = TypeVar("_T")
_MAX_LIST_PAGES = 20  # a server cannot make listing its tools unbounded
_GRACE_S = 2.0  # the outer wait's margin over the loop-side timeout


class _Lifecycle(Enum):
    UNOPENED = "UNOPENED"
    OPEN = "OPEN"
    CLOSED = "CLOSED"


class _NotSent(Exception):
    """The request could not be sent: no session could be opened."""


class _LostMidCall(Exception):
    """The request was sent; the session died before its answer."""


@dataclass
class _Session:
    client: Client
    stop: asyncio.Event
    holder: asyncio.Task[None]
    broken: bool = False

    @property
    def usable(self) -> bool:
        return not self.broken and not self.holder.done()


@dataclass
class _Loop:
    loop: asyncio.AbstractEventLoop
    thread: threading.Thread
    session: _Session | None = None
    opening: asyncio.Lock = field(default_factory=asyncio.Lock)


class McpServer:
    """A connection to one MCP server (stdio subprocess or streamable HTTP URL), opened on first use.

    Build it with ``McpServer.stdio(command, args, env=...)`` or ``McpServer.http(url)``; use it as a
    context manager (or call ``close()``) so the session, its loop thread and any subprocess end.
    """

    def __init__(
        self,
        target: StdioServerParameters | str,
        *,
        name: str | None = None,
        connect_timeout_s: float = 10.0,
        close_timeout_s: float = 5.0,
        stderr: TextIO | None = None,
    ):
        if connect_timeout_s <= 0 or close_timeout_s <= 0:
            raise UserError("MCP timeouts must be positive", code=ErrorCode.INVALID_MCP_SERVER)
        self._target = target
        self.name = name or (target if isinstance(target, str) else Path(target.command).name)
        self._connect_timeout_s = connect_timeout_s
        self._close_timeout_s = close_timeout_s
        self._stderr = stderr
        self._lock = threading.Lock()
        self._state = _Lifecycle.UNOPENED
        self._loop: _Loop | None = None

    @classmethod
    def stdio(
        cls,
        command: str,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        name: str | None = None,
        connect_timeout_s: float = 10.0,
        stderr: TextIO | None = None,
    ) -> McpServer:
        """A server started as a subprocess speaking MCP on its stdin/stdout. ``env`` is merged over the
        SDK's minimal default environment (the parent's full environment is not passed on)."""
        params = StdioServerParameters(command=command, args=list(args), env=dict(env) if env else None, cwd=cwd)
        return cls(params, name=name, connect_timeout_s=connect_timeout_s, stderr=stderr)

    @classmethod
    def http(cls, url: str, *, name: str | None = None, connect_timeout_s: float = 10.0) -> McpServer:
        """A server reached over streamable HTTP at ``url`` (e.g. ``http://127.0.0.1:8000/mcp``)."""
        if not url.startswith(("http://", "https://")):
            raise UserError(f"not an http(s) URL: {url!r}", code=ErrorCode.INVALID_MCP_SERVER)
        return cls(url, name=name, connect_timeout_s=connect_timeout_s)

    # -- synchronous API ----------------------------------------------------------------------------
    def connect(self) -> McpServer:
        """Open the session now (otherwise the first request opens it). Raises ServiceUnavailable."""
        self._submit(self._ensure_session(), self._connect_timeout_s)
        return self

    def list_tools(self, *, timeout_s: float = 30.0) -> list[Tool]:
        """Every tool the server lists (at most 20 pages)."""
        return self._submit(self._list_tools(timeout_s), self._connect_timeout_s + timeout_s)

    def call_tool(
        self, name: str, arguments: dict[str, Any], *, timeout_s: float, meta: RequestParamsMeta | None = None
    ) -> CallToolResult:
        """Call one tool; raises the gateway's error classes (see the module docstring)."""
        return self._submit(self._call_tool(name, arguments, timeout_s, meta), self._connect_timeout_s + timeout_s)

    def close(self) -> None:
        """End the session (and a stdio server process), then the loop and its thread. Idempotent."""
        with self._lock:
            if self._state is _Lifecycle.CLOSED:
                return
            self._state = _Lifecycle.CLOSED
            running, self._loop = self._loop, None
        if running is None:
            return
        shutdown = asyncio.run_coroutine_threadsafe(self._shutdown(running), running.loop)
        try:
            shutdown.result(self._close_timeout_s + _GRACE_S)
        except Exception:  # a session that will not close is abandoned with its daemon thread
            shutdown.cancel()
        running.loop.call_soon_threadsafe(running.loop.stop)
        running.thread.join(self._close_timeout_s)
        if not running.thread.is_alive():
            running.loop.close()

    def __enter__(self) -> McpServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"McpServer(name={self.name!r}, state={self._state.value})"

    # -- the bridge to the private loop -------------------------------------------------------------
    def _running(self) -> _Loop:
        with self._lock:
            if self._state is _Lifecycle.CLOSED:
                raise UserError(f"MCP server {self.name!r} is closed", code=ErrorCode.MCP_SERVER_CLOSED)
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name=f"stateward-mcp-{self.name}", daemon=True)
                thread.start()
                self._loop = _Loop(loop, thread)
                self._state = _Lifecycle.OPEN
            return self._loop

    def _submit(self, coro: Coroutine[Any, Any, _T], timeout_s: float) -> _T:
        try:
            running = self._running()
        except UserError:
            coro.close()  # never scheduled
            raise
        future = asyncio.run_coroutine_threadsafe(coro, running.loop)
        try:
            return future.result(timeout_s + _GRACE_S)
        except concurrent.futures.TimeoutError as exc:
            future.cancel()
            raise ToolTimeout(f"MCP server {self.name!r} did not answer within {timeout_s}s") from exc
        except _NotSent as exc:
            raise ServiceUnavailable(f"MCP server {self.name!r} is unreachable: {exc}") from exc
        except _LostMidCall as exc:
            raise ToolOutcomeUnknown(f"MCP server {self.name!r} went away mid-call: {exc}") from exc
        except MCPError as exc:
            details = {"mcp_code": exc.code}
            if exc.code == INVALID_PARAMS:
                raise ToolInvalidArgument(f"MCP server refused the arguments: {exc.message}") from exc
            raise ToolFailure(f"MCP error {exc.code}: {exc.message}", details=details) from exc

    # -- on the private loop ------------------------------------------------------------------------
    async def _ensure_session(self) -> _Session:
        running = self._running()
        async with running.opening:
            if running.session is not None and running.session.usable:
                return running.session
            if running.session is not None:
                await self._end(running.session)
                running.session = None
            running.session = await self._open()
            return running.session

    async def _open(self) -> _Session:
        ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        stop = asyncio.Event()
        holder = asyncio.create_task(self._hold(ready, stop))
        try:
            client = await asyncio.wait_for(asyncio.shield(ready), self._connect_timeout_s)
        except TimeoutError as exc:
            stop.set()
            holder.cancel()
            raise _NotSent(f"no handshake within {self._connect_timeout_s}s") from exc
        except Exception as exc:
            raise _NotSent(_describe(exc)) from exc
        return _Session(client, stop, holder)

    async def _hold(self, ready: asyncio.Future[Client], stop: asyncio.Event) -> None:
        """Hold the SDK session open (its context must be entered and left by one task)."""
        try:
            async with Client(self._transport(), cache=None) as client:
                ready.set_result(client)
                await stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else ConnectionError("cancelled"))
            if not isinstance(exc, Exception):
                raise
            # after the handshake: the session broke; the next request opens a new one

    def _transport(self) -> Any:
        if isinstance(self._target, str):
            return self._target
        return stdio_client(self._target, errlog=self._stderr or sys.stderr)

    async def _call_tool(
        self, name: str, arguments: dict[str, Any], timeout_s: float, meta: RequestParamsMeta | None
    ) -> CallToolResult:
        session = await self._ensure_session()
        call = asyncio.ensure_future(session.client.call_tool(name, arguments, meta=meta))
        done, _ = await asyncio.wait({call, session.holder}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        if call in done:
            try:
                return call.result()
            except asyncio.CancelledError as exc:  # the SDK's task group cancelled it: the session died
                session.broken = True
                raise _LostMidCall("the session was torn down") from exc
            except MCPError as exc:
                if exc.code != CONNECTION_CLOSED:
                    raise
                session.broken = True
                raise _LostMidCall(exc.message) from exc
        call.cancel()
        if session.holder in done:
            session.broken = True
            raise _LostMidCall("the connection closed before the answer")
        raise concurrent.futures.TimeoutError

    async def _list_tools(self, timeout_s: float) -> list[Tool]:
        session = await self._ensure_session()
        tools: list[Tool] = []
        cursor: str | None = None
        for _ in range(_MAX_LIST_PAGES):
            try:
                page = await asyncio.wait_for(session.client.list_tools(cursor=cursor), timeout_s)
            except MCPError as exc:
                if exc.code != CONNECTION_CLOSED:
                    raise
                session.broken = True
                raise _NotSent(exc.message) from exc  # listing has no effect: safe to repeat
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        return tools

    async def _shutdown(self, running: _Loop) -> None:
        if running.session is not None:
            await self._end(running.session)
            running.session = None

    async def _end(self, session: _Session) -> None:
        session.stop.set()
        try:
            await asyncio.wait_for(session.holder, self._close_timeout_s)
        except BaseException:  # a holder that will not stop is cancelled by wait_for; nothing more to do
            return


def _describe(exc: BaseException) -> str:
    """The innermost reasons of a (possibly grouped) connection failure, e.g. ConnectError."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)
    return f"{type(exc).__name__}: {exc}"
