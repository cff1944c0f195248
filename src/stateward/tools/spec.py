"""How a tool is declared: a typed Python function plus the policy the gateway enforces around it.

Schemas come from the type hints (pydantic), so the model sees exactly what the gateway will accept,
and the runtime never needs a second, hand-written description of a tool. A tool described by someone
else (an MCP server) brings a JSON Schema instead (``input_json_schema``): its handler is then called
as ``handler(arguments=<dict>, context=<ToolContext>)`` and its arguments are validated by
``jsonschema``, with the same INVALID_ARGUMENT field errors.
"""

from __future__ import annotations

import copy
import inspect
import json
import typing
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal, overload

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, TypeAdapter, create_model, model_validator
from pydantic_core import to_jsonable_python

from stateward.core.bridge import resolve
from stateward.core.budget import Budget
from stateward.core.errors import UserError
from stateward.core.state import ApprovalScope, ChildHandoff

from . import json_args
from .breaker import BreakerPolicy
from .errors import (
    RateLimited,
    ServiceUnavailable,
    ToolFailure,
    ToolInvalidArgument,
    ToolPermissionDenied,
    ToolTimeout,
)
from .execution import is_async_handler
from .redaction import RedactionRules, rules_from
from .retry import RetryPolicy
from .scope import ScopedArg
from .types import ArtifactDraft, LookupStatus

if typing.TYPE_CHECKING:
    from jsonschema.protocols import Validator

__all__ = [
    "BreakerPolicy",
    "LookupFn",
    "RateLimited",
    "RedactionRules",
    "RetryPolicy",
    "ServiceUnavailable",
    "ToolContext",
    "ToolFailure",
    "ToolInvalidArgument",
    "ToolPermissionDenied",
    "ToolSpec",
    "ToolTimeout",
    "tool",
]

# ``lookup(key)``; a domain that fences declares ``run_id`` and ``fencing_token`` keywords too: told the
# asking holder's lease, it can refuse a superseded holder's call that lands after it answered NOT_EXECUTED.
LookupFn = Callable[..., tuple[LookupStatus, Any]]
TooLarge = Literal["truncate", "refuse"]
# Every result is bounded unless its tool says otherwise: ``max_result_bytes=None`` lifts the limit,
# ``on_too_large="refuse"`` turns a cut into a RESULT_TOO_LARGE failure.
DEFAULT_MAX_RESULT_BYTES = 64 * 1024
REPLACED_CONTEXT = "__context__"  # where :meth:`ToolSpec.answered_by`'s handler gets the ToolContext


class ChildAgent(BaseModel):
    """What a tool made by ``agent_tool`` calls: a registered agent, built from ``params``, run as a child run
    with at most ``budget`` (each bound further capped by what the caller has left; None: all it has left);
    ``on_handoff``: whether the child's handoffs are answered by its own approvers or escalated to the caller's;
    ``parallel``: above 1, one call gives up to that many goals, one child each, and waits for them all."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    agent: str = Field(min_length=1, max_length=200)
    params: dict[str, Any] = Field(default_factory=dict)
    budget: Budget | None = None
    on_handoff: ChildHandoff = ChildHandoff.ANSWER_IN_CHILD  # who answers the child's handoffs
    parallel: int = Field(default=1, ge=1, le=16)  # the most children one call starts, run concurrently


@dataclass
class ToolContext:
    """Injected into a handler that declares a parameter of this type; never part of the input schema.

    Carries the idempotency key so a side-effecting handler can pass it on to the remote system.
    """

    run_id: str
    step: int
    idempotency_key: str
    principal: str
    fencing_token: int | None = None
    _artifacts: list[ArtifactDraft] = field(default_factory=list, repr=False)

    def emit_artifact(self, name: str, content: str, media_type: str = "text/markdown") -> ArtifactDraft:
        """Record an artifact the tool produced; it is stored with the step that ran the tool."""
        draft = ArtifactDraft(name=name, content=content, media_type=media_type)
        self._artifacts.append(draft)
        return draft

    @property
    def artifacts(self) -> list[ArtifactDraft]:
        """A copy of the artifacts emitted so far in this call."""
        return list(self._artifacts)


@dataclass(frozen=True)
class _Shape:
    input_model: type[BaseModel]
    context_param: str | None
    output: TypeAdapter[Any] | None
    json_validator: Validator | None = None  # set for a tool whose input is a JSON Schema
    is_async: bool = False  # an ``async def`` handler (asked once, not on every call)


def _introspect(name: str, handler: Callable[..., Any]) -> _Shape:
    """Build the input model (ToolContext excluded) and the output adapter from type hints."""
    try:
        hints = typing.get_type_hints(handler, include_extras=True)
    except Exception as exc:  # an unresolvable forward reference is a definition error
        raise UserError(f"tool {name!r}: cannot resolve type hints: {exc}") from exc
    fields: dict[str, Any] = {}
    context_param: str | None = None
    for param in inspect.signature(handler).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise UserError(f"tool {name!r}: parameter {param.name!r} must be a plain named parameter")
        hint = hints.get(param.name, Any)
        if hint is ToolContext:
            context_param = param.name
            continue
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (hint, default)
    model = create_model(f"{name}_args", __config__=ConfigDict(extra="forbid"), **fields)
    output = TypeAdapter(hints["return"]) if "return" in hints else None
    return _Shape(model, context_param, output)


class ToolSpec(BaseModel):
    """One registered tool. Build it with ``@tool`` (or directly); calling it calls the handler."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    name: str
    description: str = ""
    handler: Callable[..., Any]
    permission: str | None = None
    side_effect: bool = False
    requires_approval: bool = False
    approval_scope: ApprovalScope = ApprovalScope.ONCE  # RUN: one approval admits the action for the run
    # Who may answer this tool's requests (its approvals and reconciliations), over the agent's approver_role.
    approver_role: str | None = Field(default=None, min_length=1, max_length=200)
    timeout_s: float = Field(default=30.0, gt=0)
    retry: RetryPolicy = RetryPolicy()
    breaker: BreakerPolicy = BreakerPolicy()
    max_result_bytes: int | None = Field(default=DEFAULT_MAX_RESULT_BYTES, ge=0)
    on_too_large: TooLarge = "truncate"
    redact: RedactionRules = RedactionRules()
    health_check: Callable[[], bool] | None = None
    lookup: LookupFn | None = None
    available: bool = True
    input_json_schema: dict[str, Any] | None = None  # instead of the handler's signature (e.g. an MCP tool)
    scoped_args: tuple[ScopedArg, ...] = ()  # arguments naming a scoped resource: held to the goal's scope
    child_agent: ChildAgent | None = None  # an agent tool's: the call starts a child run (tools/agent_tool.py)

    _shape: _Shape = PrivateAttr()
    _lookup_keywords: frozenset[str] = PrivateAttr(default=frozenset())
    _schema: str | None = PrivateAttr(default=None)  # the input schema's JSON, generated once: it costs milliseconds

    @model_validator(mode="before")
    @classmethod
    def _approval_implies_journal(cls, data: Any) -> Any:
        """A guarded tool acts on the world: its calls are journalled like any side effect."""
        if isinstance(data, dict) and data.get("requires_approval"):
            return {**data, "side_effect": True}
        return data

    def model_post_init(self, context: Any, /) -> None:
        if self.input_json_schema is not None:
            validator = json_args.compile_schema(self.name, self.input_json_schema)
            shape = _Shape(json_args.JsonArgs, "context", None, validator)
        else:
            shape = _introspect(self.name, self.handler)
        self._shape = replace(shape, is_async=is_async_handler(self.handler))
        if self.lookup is not None:
            self._lookup_keywords = frozenset(inspect.signature(self.lookup).parameters)
        self._check_scoped_args()

    def _check_scoped_args(self) -> None:
        """A scoped argument the tool does not take would hold nothing to the scope: a definition error."""
        if not self.scoped_args:
            return
        if self.input_json_schema is not None:
            known = set(self.input_json_schema.get("properties", {}))
        else:
            known = set(self._shape.input_model.model_fields)
        missing = sorted({s.arg for s in self.scoped_args} - known)
        if missing:
            raise UserError(f"tool {self.name!r}: scoped argument(s) {', '.join(missing)} are not parameters")

    def input_schema(self) -> dict[str, Any]:
        """JSON schema of the arguments a caller must send (the ToolContext parameter is excluded)."""
        if self.input_json_schema is not None:
            return copy.deepcopy(self.input_json_schema)
        if self._schema is None:  # the model is fixed at construction; every agent built over it shares this
            self._schema = json.dumps(self._shape.input_model.model_json_schema())
        schema: dict[str, Any] = json.loads(self._schema)  # a fresh copy, several times faster than a deep copy
        return schema

    @property
    def handler_is_async(self) -> bool:
        """Whether the handler is an ``async def`` (awaited under its timeout rather than run on a thread)."""
        return self._fast_shape().is_async

    def _fast_shape(self) -> _Shape:
        # The private attribute read straight from pydantic's store: ``self._shape`` goes through pydantic's
        # ``__getattr__`` (a miss on the instance, then a probe of the attribute's descriptor) on every call.
        return self.__pydantic_private__["_shape"]  # type: ignore[index,no-any-return]

    def answered_by(self, handler: Callable[..., Any]) -> ToolSpec:
        """This tool with ``handler`` in place of its own (same schema, checks and policies, no lookup): the
        handler gets the validated fields and, under ``REPLACED_CONTEXT``, the call's ToolContext whether or not
        the original asked for it. A replay answers calls from a run's record this way (runtime/replay.py)."""
        copy = self.model_copy(update={"handler": handler, "lookup": None})
        shape = self._fast_shape()
        context = shape.context_param or REPLACED_CONTEXT
        copy.__pydantic_private__["_shape"] = replace(  # type: ignore[index]
            shape, context_param=context, is_async=is_async_handler(handler)
        )
        return copy

    def validate_args(self, args: dict[str, Any]) -> BaseModel:
        """Raises pydantic.ValidationError on bad input."""
        shape = self._fast_shape()
        if shape.json_validator is not None:
            return json_args.validate(self.name, shape.json_validator, args)
        return shape.input_model.model_validate(args)

    @staticmethod
    def canonical_args(validated: BaseModel) -> dict[str, Any]:
        """The JSON form digests and idempotency keys are computed from (defaults filled in)."""
        return validated.model_dump(mode="json")

    def handler_kwargs(self, validated: BaseModel, context: ToolContext) -> dict[str, Any]:
        """The keyword arguments the handler is called with: validated fields, plus the context if it asks."""
        if isinstance(validated, json_args.JsonArgs):
            return {"arguments": validated.root, "context": context}
        kwargs = dict(validated.__dict__)  # the validated fields (the input model forbids extra ones)
        param = self._fast_shape().context_param
        if param is not None:
            kwargs[param] = context
        return kwargs

    def validate_output(self, raw: Any) -> Any:
        """Check ``raw`` against the return annotation and return it as JSON-able data.

        Raises pydantic.ValidationError on mismatch. Without an annotation nothing is checked.
        """
        adapter = self._fast_shape().output
        if adapter is None:
            return to_jsonable_python(raw, fallback=str)
        return adapter.dump_python(adapter.validate_python(raw), mode="json")

    def look_up(self, key: str, *, run_id: str, fencing_token: int | None) -> tuple[LookupStatus, Any]:
        """Ask the domain what became of the side effect under ``key`` (the tool must have a lookup).

        Between a NOT_EXECUTED answer and the retry it allows, a call of a superseded holder (paused
        past its lease, say) may still land; a lookup that takes the fencing token can fence it off.
        """
        assert self.lookup is not None
        offered = {"run_id": run_id, "fencing_token": fencing_token}
        found = self.lookup(key, **{k: v for k, v in offered.items() if k in self._lookup_keywords})
        if inspect.isawaitable(found):  # an ``async def`` lookup, awaited like an async handler
            found = resolve(found)
        return found

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.handler(*args, **kwargs)


@overload
def tool(fn: Callable[..., Any], /) -> ToolSpec: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    permission: str | None = None,
    side_effect: bool = False,
    requires_approval: bool = False,
    approval_scope: ApprovalScope = ApprovalScope.ONCE,
    approver_role: str | None = None,
    timeout_s: float = 30.0,
    retry: RetryPolicy | None = None,
    breaker: BreakerPolicy | None = None,
    max_result_bytes: int | None = DEFAULT_MAX_RESULT_BYTES,
    on_too_large: TooLarge = "truncate",
    redact: RedactionRules | list[str] | tuple[str, ...] | None = None,
    health_check: Callable[[], bool] | None = None,
    lookup: LookupFn | None = None,
    available: bool = True,
    scope_arg: str | None = None,
    scoped_args: tuple[ScopedArg, ...] | list[ScopedArg] = (),
) -> Callable[[Callable[..., Any]], ToolSpec]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    permission: str | None = None,
    side_effect: bool = False,
    requires_approval: bool = False,
    approval_scope: ApprovalScope = ApprovalScope.ONCE,
    approver_role: str | None = None,
    timeout_s: float = 30.0,
    retry: RetryPolicy | None = None,
    breaker: BreakerPolicy | None = None,
    max_result_bytes: int | None = DEFAULT_MAX_RESULT_BYTES,
    on_too_large: TooLarge = "truncate",
    redact: RedactionRules | list[str] | tuple[str, ...] | None = None,
    health_check: Callable[[], bool] | None = None,
    lookup: LookupFn | None = None,
    available: bool = True,
    scope_arg: str | None = None,
    scoped_args: tuple[ScopedArg, ...] | list[ScopedArg] = (),
) -> ToolSpec | Callable[[Callable[..., Any]], ToolSpec]:
    """Declare a tool: ``@tool`` or ``@tool(side_effect=True, ...)``. ``redact`` accepts a list whose
    identifier-like entries are field names and the rest regexes. Results are cut at 64 KiB unless
    ``max_result_bytes`` says otherwise (``None``: unbounded). ``approver_role``: the role a person must hold
    to answer this tool's approvals and reconciliations (over the agent's ``approver_role``). ``scope_arg``
    names the argument that names a scoped resource (an exact name, e.g. a repository); ``scoped_args``
    declares several, or path-like ones."""
    declared = (*((ScopedArg(arg=scope_arg, kind=scope_arg),) if scope_arg else ()), *scoped_args)

    def build(handler: Callable[..., Any]) -> ToolSpec:
        doc = inspect.getdoc(handler) or ""
        return ToolSpec(
            name=name or handler.__name__,
            description=description if description is not None else doc.split("\n\n")[0].strip(),
            handler=handler,
            permission=permission,
            side_effect=side_effect,
            requires_approval=requires_approval,
            approval_scope=approval_scope,
            approver_role=approver_role,
            timeout_s=timeout_s,
            retry=retry or RetryPolicy(),
            breaker=breaker or BreakerPolicy(),
            max_result_bytes=max_result_bytes,
            on_too_large=on_too_large,
            redact=rules_from(redact),
            health_check=health_check,
            lookup=lookup,
            available=available,
            scoped_args=declared,
        )

    return build(fn) if fn is not None else build
