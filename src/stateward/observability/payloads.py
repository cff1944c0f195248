"""Trace hygiene: an event keeps ids, hashes and sizes; a large value lives in an artifact named by its hash.

The event log is what operators read, stream and export; copying every tool argument, result and raw
model reply into it made a long run's trace mostly payload. Before a step is committed, two things
happen to its events, both here:

- a value a reader assumes is left out (``compacted``): the per-type defaults in ``DEFAULTS`` (a tool
  call executed once, a signal from one model call) and a work item's unreserved budget dimensions;
  ``with_defaults`` puts the defaults back for a reader that wants every key;
- any value whose JSON is over the threshold (content — tool arguments and results, model words — sooner,
  wherever it sits in the payload) is replaced by a reference ``{"$payload": "sha256:<hex>", "bytes": n}``
  and the value itself is written, once per run and content, as that artifact (``application/json``) in
  the same transaction. Whoever needs the value back (the driver rebuilding a controller's observations)
  resolves the reference by hash.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from stateward.core.canonical import compact_json, sha256_hex
from stateward.core.events import EventType, NewEvent

DEFAULT_THRESHOLD = 512  # bytes of compact JSON above which a value leaves the event
# Content (model words, tool arguments and results, outputs) leaves the event sooner: the log keeps its hash.
CONTENT_KEYS = frozenset({"signal", "args", "arguments", "result", "output", "partial", "text", "detail", "message"})
CONTENT_THRESHOLD = 128
REF_KEY = "$payload"
PREFIX = "payload-"
MEDIA_TYPE = "application/json"

# Per event type, the values a stored payload leaves out because a reader assumes them: most tool calls
# run once and most signals come from one model call, and saying so on every step of a long run was a
# tenth of its trace. Compared by type and value (``True`` is not ``1``).
DEFAULTS: dict[EventType, dict[str, Any]] = {
    EventType.TOOL_ATTEMPTED: {"runtime_action": "EXECUTE", "attempts": 1, "handler_calls": 1},
    EventType.SIGNAL_RECEIVED: {"model_calls": 1},
    EventType.WORK_ITEM_STARTED: {"attempt": 1},
}
# Budget amounts (a work item's reservation): a dimension not reserved is left out rather than stored as 0.
_AMOUNTS = frozenset({"reserved"})


def _is_default(defaults: dict[str, Any], key: str, value: Any) -> bool:
    if key not in defaults:
        return False
    default = defaults[key]
    return type(value) is type(default) and value == default


def compacted(event: NewEvent) -> NewEvent:
    """``event`` without the type's ``DEFAULTS`` and the zero budget amounts it carries."""
    defaults = DEFAULTS.get(event.type)
    if defaults is None:
        if _AMOUNTS.isdisjoint(event.payload):  # most events: nothing to leave out, nothing to walk
            return event
        defaults = {}
    payload: dict[str, Any] = {}
    changed = False
    for key, value in event.payload.items():
        if _is_default(defaults, key, value):
            changed = True
            continue
        if key in _AMOUNTS and isinstance(value, dict) and any(v == 0 for v in value.values()):
            value = {k: v for k, v in value.items() if v != 0}
            changed = True
        payload[key] = value
    return NewEvent(type=event.type, payload=payload) if changed else event


def with_defaults(event_type: EventType, payload: dict[str, Any]) -> dict[str, Any]:
    """``payload`` as written before ``compacted``: every default of its type present."""
    defaults = DEFAULTS.get(event_type)
    if not defaults:
        return payload
    return {**defaults, **payload}


def artifact_name(digest: str) -> str:
    """The artifact holding the payload whose SHA-256 is ``digest``."""
    return PREFIX + digest


def is_payload_artifact(name: str) -> bool:
    """Whether an artifact holds an offloaded event payload (kept out of a run's product listings)."""
    return name.startswith(PREFIX)


def is_ref(value: Any) -> bool:
    """Whether ``value`` is a reference to an offloaded payload."""
    return isinstance(value, dict) and len(value) == 2 and str(value.get(REF_KEY, "")).startswith("sha256:")


def ref_artifact(ref: dict[str, Any]) -> str:
    """The artifact a reference names."""
    return artifact_name(str(ref[REF_KEY]).removeprefix("sha256:"))


class Offloader:
    """Replaces large values in event payloads by references; collects the contents by hash."""

    def __init__(self, threshold: int = DEFAULT_THRESHOLD):
        self.threshold = threshold
        self.blobs: dict[str, str] = {}

    def events(self, events: Sequence[NewEvent]) -> list[NewEvent]:
        """``events`` compacted, each value over its threshold replaced by a reference (collected in ``blobs``)."""
        out: list[NewEvent] = []
        for event in events:
            event = compacted(event)
            size = len(compact_json(event.payload))
            if size <= CONTENT_THRESHOLD or (size <= self.threshold and not self._content_over(event.payload)):
                out.append(event)
                continue
            payload = {k: self._value(v, k) for k, v in event.payload.items()}
            out.append(event if _same(payload, event.payload) else NewEvent(type=event.type, payload=payload))
        return out

    def _content_over(self, payload: dict[str, Any]) -> bool:
        """Whether ``_value`` would offload any of a payload whose whole JSON is within the threshold: then no
        value but content can be over its limit (each is part of that JSON), so only content is measured,
        found where ``_value`` looks for it (inside dicts and lists of records), and nothing is copied."""
        limit = min(self.threshold, CONTENT_THRESHOLD)
        stack: list[tuple[str, Any]] = list(payload.items())
        while stack:
            key, value = stack.pop()
            if key in CONTENT_KEYS:
                if not is_ref(value) and not _surely_within(value, limit) and len(compact_json(value)) > limit:
                    return True
            elif isinstance(value, dict):
                if not is_ref(value):
                    stack.extend(value.items())
            elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
                stack.extend(("", v) for v in value)
        return False

    def _value(self, value: Any, key: str = "") -> Any:
        if is_ref(value):
            return value
        content = key in CONTENT_KEYS
        limit = min(self.threshold, CONTENT_THRESHOLD) if content else self.threshold
        if _surely_within(value, limit):  # a number, a short string: nothing to serialize
            return value
        records = isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)
        if not content:  # keep the structure (ids, codes) visible; the content inside leaves sooner
            if isinstance(value, dict):
                inner = {k: self._value(v, k) for k, v in value.items()}
                value = value if _same(inner, value) else inner
            elif records:  # a list of records (checks, issues): each kept in shape
                kept = [self._value(v) for v in value]
                value = value if all(a is b for a, b in zip(kept, value, strict=True)) else kept
        text = compact_json(value)
        if len(text) <= limit:
            return value
        if not content and len(text) <= self.threshold * (4 if records else 2 if isinstance(value, dict) else 1):
            return value
        digest = sha256_hex(text)
        self.blobs.setdefault(digest, text)
        return {REF_KEY: f"sha256:{digest}", "bytes": len(text.encode())}


def _same(new: dict[str, Any], old: dict[str, Any]) -> bool:
    """Whether offloading left every value of ``old`` as it was (then ``old`` itself is kept)."""
    return all(new[k] is v for k, v in old.items())


def _surely_within(value: Any, limit: int) -> bool:
    """Whether ``value``'s compact JSON is no longer than ``limit``, told without serializing it (a JSON
    string takes at most six characters per character, plus its quotes)."""
    if value is None or isinstance(value, bool | float):
        return limit >= 24  # the longest float: -1.2345678901234567e-308
    if isinstance(value, int):
        return limit >= 17 and -(10**15) < value < 10**15
    return isinstance(value, str) and 6 * len(value) + 2 <= limit


def resolve(value: Any, fetch: Callable[[str], str | None]) -> Any:
    """``value`` with every payload reference replaced by its content (``fetch``: artifact name -> JSON)."""
    if is_ref(value):
        content = fetch(ref_artifact(value))
        if content is None:
            return value  # an artifact gone missing stays a visible reference, never a guess
        return resolve(json.loads(content), fetch)
    if isinstance(value, dict):
        return {k: resolve(v, fetch) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve(v, fetch) for v in value]
    return value
