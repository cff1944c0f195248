"""A recorded run's answers given again: tool calls answered from its journal and people's answers re-given.

Replay (another model's decisions against the record) and fork (the state at a seq rebuilt by re-driving) both
drive a run offline; neither may call a tool handler or invent an answer, so both take them from here.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from pydantic_core import to_jsonable_python

from stateward.core.canonical import canonical_json, sha256_hex
from stateward.core.errors import ErrorCode
from stateward.core.events import Event, EventType
from stateward.runtime.agent import Agent
from stateward.store.base import Store
from stateward.tools.errors import (
    RateLimited,
    ServiceUnavailable,
    ToolFailure,
    ToolInvalidArgument,
    ToolOutcomeUnknown,
    ToolPermissionDenied,
    ToolTimeout,
)
from stateward.tools.registry import ToolRegistry
from stateward.tools.spec import REPLACED_CONTEXT, ToolContext, ToolSpec

__all__ = ["Journal", "answering", "answering_tools", "args_digest", "give_answer", "roles_of"]

FAILURES = (ToolTimeout, ToolOutcomeUnknown, RateLimited, ServiceUnavailable, ToolPermissionDenied, ToolInvalidArgument)


def args_digest(args: Any) -> str:
    """The digest a call's or decision's arguments are matched by."""
    return sha256_hex(canonical_json(to_jsonable_python(args if args is not None else {})))


class Journal:
    """The source run's recorded tool answers: by idempotency key (the same run, step, tool and canonical
    arguments: a retried call gets its recorded outcome again), else queued per (tool, arguments digest) in the
    order they happened (the same call at another step)."""

    def __init__(self, events: list[Event], store: Store, run_id: str, tools: ToolRegistry):
        self._tools = tools
        self._by_key: dict[str, dict[str, Any]] = {}
        self._queued: dict[tuple[str, str], deque[tuple[str | None, dict[str, Any]]]] = {}
        self._used: set[str] = set()
        self._retried: set[str] = set()
        self._store = store
        self._run_id = run_id
        self.unrecorded: list[dict[str, Any]] = []
        for event in events:
            if event.type is not EventType.TOOL_ATTEMPTED:
                continue
            obs = event.payload.get("observation") or {}
            key = event.payload.get("idempotency_key")
            if isinstance(key, str):
                self._by_key[key] = obs
            call = (str(obs.get("action")), self.digest(str(obs.get("action")), obs.get("args")))
            self._queued.setdefault(call, deque()).append((key if isinstance(key, str) else None, obs))

    def digest(self, tool: str, args: Any) -> str:
        """The call's arguments as the gateway digests them (defaults filled in), else as given."""
        spec = self._tools.get(tool)
        if spec is not None and isinstance(args, dict):
            try:
                return args_digest(spec.canonical_args(spec.validate_args(args)))
            except ValueError:
                pass
        return args_digest(args)

    def _find(self, tool: str, args: dict[str, Any], key: str | None) -> dict[str, Any] | None:
        if key is not None and key in self._by_key:
            self._used.add(key)
            return self._by_key[key]
        queue = self._queued.get((tool, self.digest(tool, args)), deque())
        while queue:
            recorded_key, obs = queue.popleft()
            if recorded_key is None or recorded_key not in self._used:
                if recorded_key is not None:
                    self._used.add(recorded_key)
                return obs
        return None

    def answer(self, tool: str, args: dict[str, Any], context: ToolContext | None) -> Any:
        """The recorded result of this call (its artifacts emitted again), or a refusal if the record holds none."""
        obs = self._find(tool, args, None if context is None else context.idempotency_key)
        if obs is None:
            self.unrecorded.append({"tool": tool, "args": to_jsonable_python(args), "digest": self.digest(tool, args)})
            raise ToolFailure(f"replay: the record holds no answer for {tool}; the call is not executed")
        if obs.get("status") != "SUCCESS":
            raise _failure(obs.get("error_code"))
        if obs.get("error_code") and context is not None and context.idempotency_key not in self._retried:
            # It succeeded on a retry: the record keeps the last failure, so the first attempt fails as it did.
            self._retried.add(context.idempotency_key)
            raise _failure(obs.get("error_code"))
        if context is not None:
            for ref in obs.get("artifacts") or []:
                name, _, version = str(ref).rpartition(":v")
                found = self._store.get_artifact(self._run_id, name, int(version) if version.isdigit() else None)
                if found is not None:
                    context.emit_artifact(found.name, found.content, found.media_type)
        return obs.get("result")


def _failure(code: Any) -> ToolFailure:
    """The recorded failure raised again as the class the gateway classifies it by."""
    known = ErrorCode(code) if isinstance(code, str) and code in ErrorCode.__members__ else ErrorCode.EXECUTION_ERROR
    message = f"replay: the recorded call failed ({known.value})"
    cls = next((c for c in FAILURES if c.default_code is known), None)
    return ToolFailure(message, code=known) if cls is None else cls(message)


def answering(spec: ToolSpec, journal: Journal) -> ToolSpec:
    """``spec`` answering from the journal: same schema, checks and policies; its own handler is never called."""

    def split(kwargs: dict[str, Any]) -> tuple[dict[str, Any], ToolContext | None]:
        context = kwargs.pop(REPLACED_CONTEXT, None)
        context = next((v for v in kwargs.values() if isinstance(v, ToolContext)), context)
        args = {k: v for k, v in kwargs.items() if not isinstance(v, ToolContext)}
        if spec.input_json_schema is not None and isinstance(args.get("arguments"), dict):
            args = dict(args["arguments"])  # a JSON-schema tool is called as handler(arguments=..., context=...)
        return args, context if isinstance(context, ToolContext) else None

    def recorded(**kwargs: Any) -> Any:
        args, context = split(kwargs)
        return journal.answer(spec.name, args, context)

    async def recorded_async(**kwargs: Any) -> Any:
        args, context = split(kwargs)
        return journal.answer(spec.name, args, context)

    return spec.answered_by(recorded_async if spec.handler_is_async else recorded)


def answering_tools(tools: ToolRegistry, journal: Journal) -> ToolRegistry:
    """``tools`` answering from ``journal``: the same schemas and policies, no handler ever called; a call the
    record does not hold fails (and is listed in ``journal.unrecorded``)."""
    return ToolRegistry([answering(spec, journal) for spec in tools])


def roles_of(agent: Agent) -> frozenset[str]:
    """Every role the agent asks answers of: the recorded answerer held the one that was needed."""
    named = {agent.approver_role, agent.escalation_role, *(spec.approver_role for spec in agent.tools)}
    return frozenset(r for r in named if r)


def give_answer(runtime: Any, run_id: str, request_id: str, given: dict[str, Any], roles: frozenset[str]) -> Any:
    """The recorded answer, given again to the replay's request (not driven: the replay loop steps)."""
    by = str(given.get("by") or "replay")
    verdict = given.get("verdict")
    text = given.get("text")
    if verdict == "approved":
        return runtime.approve(run_id, request_id, by=by, comment=text, roles=roles, drive=False).state
    if verdict == "rejected":
        return runtime.reject(run_id, request_id, by=by, comment=text, roles=roles, drive=False).state
    return runtime.reply(run_id, request_id, by=by, text=str(text or ""), roles=roles, drive=False).state
