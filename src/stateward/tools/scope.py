"""Scope by arguments: which of a tool's arguments name a scoped resource, and the goal's resource scope
the gateway holds those arguments to.

The goal contract's scope used to be checked by tool name only, so a search of a repository outside the
contract reached the handler. A tool declares its scoped arguments (``@tool(scope_arg="repo")`` or
``scoped_args=[ScopedArg(arg="path", match=ScopeMatch.PATH)]``); the gateway's scope stage refuses a call
whose declared argument names a resource outside the scope (``SCOPE_VIOLATION``) before the handler runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class ScopeMatch(StrEnum):
    """How an argument's value is compared with a scope entry: EXACT (the value is the entry, e.g. a repository
    name) or PATH (the value is the entry or below it: ``entry/...`` or ``entry:...``)."""

    EXACT = "EXACT"
    PATH = "PATH"


class ScopedArg(BaseModel):
    """One argument of a tool that names a scoped resource. A string value is checked; a list of strings is
    checked item by item; ``None`` (an optional argument left out) names no resource."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    arg: str = Field(min_length=1)
    match: ScopeMatch = ScopeMatch.EXACT
    kind: str = "resource"  # what the argument names (repo, path, account): said in the refusal


class ResourceScope(BaseModel):
    """The resources a run may touch through scoped arguments: ``allowed`` (None: any resource not denied) and
    ``denied`` (always refused, even when also allowed), e.g. a goal contract's ``out_of_scope`` names."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    allowed: frozenset[str] | None = None
    denied: frozenset[str] = frozenset()

    def why_outside(self, spec: ScopedArg, value: str) -> str | None:
        """Why ``value`` of ``spec``'s argument lies outside this scope, or None when it is inside."""
        for entry in sorted(self.denied):
            if _covers(entry, value, spec.match):
                return f"{spec.kind} {value!r} (argument {spec.arg}) is out of the goal's scope ({entry})"
        if self.allowed is not None and not any(_covers(e, value, spec.match) for e in self.allowed):
            return f"{spec.kind} {value!r} (argument {spec.arg}) is not in the goal's scope"
        return None


def _covers(entry: str, value: str, match: ScopeMatch) -> bool:
    if value == entry:
        return True
    return match is ScopeMatch.PATH and value.startswith((f"{entry}/", f"{entry}:"))


def scoped_values(spec: ScopedArg, args: dict[str, Any]) -> Iterator[str]:
    """The resource names a call's (validated, canonical) arguments give ``spec``'s argument. A value that is
    neither a string nor a list of strings is yielded as its text, so it is checked, never skipped."""
    value = args.get(spec.arg)
    if value is None:
        return
    items = value if isinstance(value, list | tuple) else [value]
    for item in items:
        if item is not None:
            yield item if isinstance(item, str) else str(item)
