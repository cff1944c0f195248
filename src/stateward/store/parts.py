"""Large parts of a run's state, stored apart and written only when they change.

A controller's memo can hold a plan of many kilobytes that stays the same for many steps. Written
with every step's snapshot, it would make a step cost more the larger the plan, and every checkpoint
copy it again. A memo entry that did not change since the run's previous write is therefore kept as a
*part* of its run, addressed by the SHA-256 of its JSON: written once, then only named. The run's row
keeps the rest of the snapshot (the entry stays in place with the value ``null``, so the memo's key
order survives) and a small map from entry to digest. A large entry that changes at every step (a
history) stays in the row, where it is overwritten in place instead of leaving a part behind at every
step.

Which entries, and how a step tells that one did not change:

- a :class:`~stateward.core.sealed.Sealed` document (core/sealed.py) of at least
  :data:`SEALED_MIN_CHARS`: its text was made once, when the controller made its content; a step
  compares it with the text last written (the same object, usually: an identity check) and splices it
  into the row as it is, without serializing it again;
- a Sealed document one level down, as a value of a plain dict entry (``{"items": {"W01": Sealed,
  ...}}``): each is a part of its own, so one finished work item's record is written once however many
  others change (the map then names it ``{"items": {"W01": digest}}``);
- any other dict or list entry whose JSON is at least :data:`PART_MIN_CHARS` long: serialized at
  every step, and its text compared with the text last written (a string comparison, no hash).

Parts are immutable and never deleted; a row only ever names parts written in the same transaction
or before it, so a reader in any process finds every part a row names (``join_state``), and gets the
plain memo back (a reader never sees a Sealed value from the store).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic_core import to_json

from stateward.core.canonical import sha256_hex
from stateward.core.errors import ErrorCode, StoreError
from stateward.core.sealed import Sealed
from stateward.core.state import RunState

PART_MIN_CHARS = 1024  # smaller plain entries stay in the row: a separate write would cost more than they do
SEALED_MIN_CHARS = 128  # a sealed document is cheap to compare; past about twice a digest, naming it costs less
PART_CACHE_RUNS = 10_000  # runs whose last written entries a store remembers (a worker sees unboundedly many)
PART_CACHE_CHARS = 64_000_000  # and the text it keeps of them, in all

__all__ = [
    "PART_MIN_CHARS",
    "SEALED_MIN_CHARS",
    "EntryPath",
    "Known",
    "PartCache",
    "SplitState",
    "join_state",
    "referenced",
    "split_state",
]

EntryPath = str | tuple[str, str]  # a memo key, or (memo key, key inside that entry) for a nested document


@dataclass(frozen=True, slots=True)
class Known:
    """One tracked entry as the run's last write stored it: its JSON, and its part's digest if stored apart."""

    text: str
    part: str | None = None


@dataclass(frozen=True)
class SplitState:
    """A snapshot as a step stores it: the row's JSON, the entry -> digest map, and the parts to write."""

    snapshot: str
    refs: str | None  # JSON {memo key: digest | {key: digest}}; None when no entry is stored apart
    known: dict[EntryPath, Known] = field(default_factory=dict)  # what the store remembers once this commits
    new_parts: dict[str, str] = field(default_factory=dict)  # digest -> JSON not yet known written
    texts: tuple[str, ...] = ()  # every stored document of the state (row and parts), for the size limit


def split_state(state: RunState, known: Mapping[EntryPath, Known] | None = None) -> SplitState:
    """Split off ``state``'s memo entries that did not change since the run's last write.

    ``known`` is what this store remembers of that write (:class:`PartCache`); without it (a fresh
    process, a new run) every entry counts as changed and stays in the row this time.
    """
    memo = state.memo
    if not memo:
        snapshot = state.__pydantic_serializer__.to_json(state).decode()
        return SplitState(snapshot, None, texts=(snapshot,))
    splitter = _Splitter(known or {})
    entry = splitter.entry
    entries = ",".join([f"{_KEYS.get(key) or _key(key)}:{entry(key, value)}" for key, value in memo.items()])
    rest = state.__pydantic_serializer__.to_json(state, exclude=_MEMO).decode()
    snapshot = f'{rest[:-1]},"memo":{{{entries}}}}}'
    return SplitState(
        snapshot,
        to_json(splitter.refs).decode() if splitter.refs else None,
        splitter.remembered,
        splitter.new_parts,
        (snapshot, *splitter.part_texts),
    )


_MEMO = {"memo"}
_KEYS: dict[str, str] = {}  # a memo's keys (and its entries' keys) recur at every step: their JSON, once


def _key(key: str) -> str:
    """A key's JSON, kept for the next step (a bounded number of keys)."""
    text = to_json(key).decode()
    if len(_KEYS) >= 4096:
        _KEYS.clear()
    _KEYS[key] = text
    return text


def _holds_sealed(value: dict[Any, Any]) -> bool:
    """Whether some value is a Sealed document and each key is a string (else the serializer takes it whole)."""
    found = False
    for k, v in value.items():
        if not isinstance(k, str):
            return False
        found = found or type(v) is Sealed
    return found


class _Splitter:
    """One state's memo, entry by entry: the JSON each puts in the row, and what goes apart."""

    def __init__(self, known: Mapping[EntryPath, Known]):
        self.known = known
        self.refs: dict[str, Any] = {}
        self.remembered: dict[EntryPath, Known] = {}
        self.new_parts: dict[str, str] = {}
        self.part_texts: list[str] = []

    def entry(self, key: str, value: Any) -> str:
        """The entry's JSON in the row: its text, or ``null`` when it is stored apart."""
        if type(value) is Sealed:
            text = value.text
            return self._track(key, text, value) if len(text) >= SEALED_MIN_CHARS else text
        if type(value) is dict and _holds_sealed(value):
            nested = self._nested
            inner = [f"{_KEYS.get(sub) or _key(sub)}:{nested(key, sub, v)}" for sub, v in value.items()]
            return "{" + ",".join(inner) + "}"
        text = to_json(value).decode()  # a Sealed deeper inside is serialized as its plain value
        if len(text) >= PART_MIN_CHARS and isinstance(value, dict | list):
            return self._track(key, text, None)
        return text

    def _nested(self, key: str, sub: str, value: Any) -> str:
        if type(value) is Sealed:
            text = value.text
            return self._track((key, sub), text, value) if len(text) >= SEALED_MIN_CHARS else text
        return to_json(value).decode()

    def _track(self, path: EntryPath, text: str, sealed: Sealed | None) -> str:
        last = self.known.get(path)
        if last is None or last.text != text:  # new or changed since the last write: in the row, this time
            self.remembered[path] = Known(text)
            return text
        digest = last.part
        if digest is None:  # unchanged for a step: a part from now on, written once
            digest = sealed.digest if sealed is not None else sha256_hex(text)
            self.new_parts[digest] = text
            last = Known(last.text, digest)  # the text already kept (often the same object)
        self.remembered[path] = last
        if isinstance(path, str):
            self.refs[path] = digest
        else:
            self.refs.setdefault(path[0], {})[path[1]] = digest
        self.part_texts.append(text)
        return "null"


def join_state(run_id: str, snapshot: str, refs: str | None, parts: Mapping[str, str]) -> RunState:
    """The state a split stored: the row's snapshot with each referenced part back in its memo entry."""
    state = RunState.model_validate_json(snapshot)
    if not refs:
        return state
    memo = dict(state.memo)
    for key, named in json.loads(refs).items():
        if isinstance(named, str):
            memo[key] = _part(run_id, parts, key, named)
            continue
        inner = dict(memo[key])
        for sub, digest in named.items():
            inner[sub] = _part(run_id, parts, f"{key}.{sub}", digest)
        memo[key] = inner
    return state.model_copy(update={"memo": memo})


def _part(run_id: str, parts: Mapping[str, str], entry: str, digest: str) -> Any:
    text = parts.get(digest)
    if text is None:  # parts are written with (or before) the row that names them
        raise StoreError(
            f"run {run_id}: the stored part {digest[:12]} of its memo entry {entry!r} is missing",
            code=ErrorCode.STORE_CORRUPT,
            details={"run_id": run_id, "part": digest},
        )
    return json.loads(text)


def referenced(refs: str | None) -> list[str]:
    """The digests a row's map names (to fetch their parts)."""
    if not refs:
        return []
    digests: set[str] = set()
    for named in json.loads(refs).values():
        digests.update([named] if isinstance(named, str) else named.values())
    return sorted(digests)


class PartCache:
    """Each tracked memo entry of a run as this store last committed it (its text, and its part's digest if
    stored apart): a part known here exists in the database, so it is not written again. Bounded in runs and
    in the text it keeps; forgetting costs a write."""

    def __init__(self, runs: int = PART_CACHE_RUNS, chars: int = PART_CACHE_CHARS):
        self._runs = runs
        self._chars = chars
        self._lock = threading.Lock()  # a PostgreSQL store commits from many threads at once
        self._held = 0  # characters of text kept (a text shared by two runs counts twice)
        self._known: dict[str, tuple[dict[EntryPath, Known], int]] = {}

    def known(self, run_id: str) -> Mapping[EntryPath, Known] | None:
        found = self._known.get(run_id)
        return None if found is None else found[0]

    def committed(self, run_id: str, entries: Mapping[EntryPath, Known]) -> None:
        """Call only after the transaction that wrote (or found) these parts committed."""
        size = sum(len(k.text) for k in entries.values())
        with self._lock:
            self._drop(run_id)
            if not entries:
                return
            if len(self._known) >= self._runs or self._held + size > self._chars:
                self._known.clear()
                self._held = 0
            self._known[run_id] = (dict(entries), size)
            self._held += size

    def forget(self, run_ids: Iterable[str]) -> None:
        with self._lock:
            for run_id in run_ids:
                self._drop(run_id)

    def _drop(self, run_id: str) -> None:
        found = self._known.pop(run_id, None)
        if found is not None:
            self._held -= found[1]
