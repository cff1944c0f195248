"""Events as people read them: one line naming the type and the few payload fields that say what happened;
the whole payload stays one click away on the page."""

from __future__ import annotations

import json
from typing import Any

from stateward.core.events import Event
from stateward.core.inert import inert

# The payload fields an event's one-line summary names, when present.
_LINE_KEYS = (
    *("state_before", "state_after", "runtime_decision", "tool", "action", "work_item_id", "outcome"),
    *("request_id", "pending_request_id", "verdict", "by", "error", "code", "reason", "plan_version"),
)


def event_line(event: Event) -> str:
    """One readable line for an event: its type and the few fields that say what happened."""
    p = event.payload
    bits = [f"{k}={_short(p[k])}" for k in _LINE_KEYS if k in p and p[k] not in (None, "", [], {})]
    return inert(f"{event.type.value}  " + "  ".join(bits), 300)


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    return text if len(text) <= 80 else text[:79] + "…"


__all__ = ["event_line"]
