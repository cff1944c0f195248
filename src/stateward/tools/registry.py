"""The set of tools a gateway knows by name. Lookup by name is the first gate of every call."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from stateward.core.errors import ErrorCode, UserError

from .spec import ToolSpec


class ToolRegistry:
    """Name -> ToolSpec. Registering a second tool under one name is a definition error."""

    def __init__(self, tools: list[ToolSpec] | tuple[ToolSpec, ...] = ()):
        self._lock = threading.Lock()
        self._tools: dict[str, ToolSpec] = {}
        for spec in tools:
            self.register(spec)

    def register(self, spec: ToolSpec) -> ToolSpec:
        """Add a tool; a second tool under the same name is refused with DUPLICATE_TOOL."""
        with self._lock:
            if spec.name in self._tools:
                raise UserError(f"tool {spec.name!r} is already registered", code=ErrorCode.DUPLICATE_TOOL)
            self._tools[spec.name] = spec
        return spec

    def get(self, name: str) -> ToolSpec | None:
        """The tool registered under ``name``, or None."""
        with self._lock:
            return self._tools.get(name)

    def set_available(self, name: str, available: bool) -> None:
        """Take a tool offline (calls fail with TOOL_UNAVAILABLE) or bring it back."""
        with self._lock:
            if name not in self._tools:
                raise UserError(f"tool {name!r} is not registered", code=ErrorCode.UNKNOWN_TOOL)
            self._tools[name] = self._tools[name].model_copy(update={"available": available})

    def names(self) -> list[str]:
        """The registered tool names, sorted."""
        with self._lock:
            return sorted(self._tools)

    def schemas(self, names: frozenset[str] | None = None) -> list[dict[str, Any]]:
        """What a model may be shown: name, description and input schema of (the visible) tools."""
        with self._lock:
            specs = [s for n, s in sorted(self._tools.items()) if names is None or n in names]
        return [{"name": s.name, "description": s.description, "input_schema": s.input_schema()} for s in specs]

    def __contains__(self, name: object) -> bool:
        with self._lock:
            return name in self._tools

    def __iter__(self) -> Iterator[ToolSpec]:
        with self._lock:
            return iter(list(self._tools.values()))

    def __len__(self) -> int:
        with self._lock:
            return len(self._tools)
