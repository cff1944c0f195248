"""Shaping a successful result before it leaves the gateway: redact, then enforce the size limit.

Redaction comes first so that a truncation cut cannot leave a partial secret that no longer matches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stateward.core.canonical import canonical_json

from .spec import ToolSpec

TRUNCATION_MARKER = "…[truncated by stateward: {shown} of {total} bytes]"


@dataclass(frozen=True)
class Shaped:
    result: Any
    truncated: bool = False
    too_large: bool = False
    size: int = 0


def _size(value: Any) -> int:
    return len(value.encode("utf-8")) if isinstance(value, str) else len(canonical_json(value).encode("utf-8"))


def shape_result(spec: ToolSpec, value: Any) -> Shaped:
    """Truncated results become a string (the text, or the canonical JSON) ending in the marker."""
    value = spec.redact.value(value)
    limit = spec.max_result_bytes
    size = _size(value)
    if limit is None or size <= limit:
        return Shaped(value, size=size)
    if spec.on_too_large == "refuse":
        return Shaped(None, too_large=True, size=size)
    text = value if isinstance(value, str) else canonical_json(value)
    head = text.encode("utf-8")[:limit].decode("utf-8", errors="ignore")
    marker = TRUNCATION_MARKER.format(shown=len(head.encode("utf-8")), total=size)
    return Shaped(head + marker, truncated=True, size=size)
