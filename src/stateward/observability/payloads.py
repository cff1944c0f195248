"""Trace hygiene: an event keeps ids, hashes and sizes; a large value lives in an artifact named by its hash.

The event log is what operators read, stream and export; copying every tool argument, result and raw
model reply into it made a long run's trace mostly payload. Before a step is committed, any value in
an event payload whose JSON is over the threshold is replaced by a reference
``{"$payload": "sha256:<hex>", "bytes": n}`` and the value itself is written,
once per run and content, as that artifact (``application/json``) in the same transaction. Whoever needs
the value back (the driver rebuilding a controller's observations) resolves the reference by hash.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from stateward.core.canonical import compact_json, sha256_hex
from stateward.core.events import NewEvent

DEFAULT_THRESHOLD = 512  # bytes of compact JSON above which a value leaves the event
# Content (model words, tool arguments and results, outputs) leaves the event sooner: the log keeps its hash.
CONTENT_KEYS = frozenset({"signal", "args", "arguments", "result", "output", "partial", "text", "detail", "message"})
CONTENT_THRESHOLD = 128
REF_KEY = "$payload"
PREFIX = "payload-"
MEDIA_TYPE = "application/json"


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
        out: list[NewEvent] = []
        for event in events:
            if len(compact_json(event.payload)) <= CONTENT_THRESHOLD:
                out.append(event)
                continue
            payload = {k: self._value(v, k) for k, v in event.payload.items()}
            out.append(NewEvent(type=event.type, payload=payload))
        return out

    def _value(self, value: Any, key: str = "") -> Any:
        text = compact_json(value)
        limit = min(self.threshold, CONTENT_THRESHOLD) if key in CONTENT_KEYS else self.threshold
        if len(text) <= limit or is_ref(value):
            return value
        if isinstance(value, list) and key not in CONTENT_KEYS and all(isinstance(v, dict) for v in value):
            value = [self._value(v) for v in value]  # a list of records (checks, issues): each kept in shape
            text = compact_json(value)
            if len(text) <= self.threshold * 4:
                return value
        if isinstance(value, dict) and key not in CONTENT_KEYS:  # keep the structure (ids, codes) visible
            inner = {k: self._value(v, k) for k, v in value.items()}
            if len(compact_json(inner)) <= self.threshold * 2:
                return inner
            text = compact_json(inner)
            value = inner
        digest = sha256_hex(text)
        self.blobs.setdefault(digest, text)
        return {REF_KEY: f"sha256:{digest}", "bytes": len(text.encode())}


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
