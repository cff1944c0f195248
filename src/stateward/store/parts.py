"""Large parts of a run's state, stored apart and written only when they change.

A controller's memo can hold a plan of many kilobytes that stays the same for many steps. Written
with every step's snapshot, it would make a step cost more the larger the plan, and every checkpoint
copy it again. A memo entry whose JSON is at least :data:`PART_MIN_CHARS` long and did not change
since the run's previous write is therefore kept as a *part* of its run, addressed by the SHA-256 of
its JSON: written once, then only named. The run's row keeps the rest of the snapshot (the entry's key
stays in place with the value ``null``, so the memo's key order survives) and a small map from entry to
digest. An unchanged plan thus costs a serialization and a hash per step, never a write; a large
entry that changes at every step (a history) stays in the row, where it is overwritten in place
instead of leaving a part behind at every step.

Parts are immutable and never deleted; a row only ever names parts written in the same transaction
or before it, so a reader in any process finds every part a row names (``join_state``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from pydantic_core import to_json

from stateward.core.canonical import sha256_hex
from stateward.core.errors import ErrorCode, StoreError
from stateward.core.state import RunState

PART_MIN_CHARS = 1024  # smaller entries stay in the row: a separate write would cost more than they do
PART_CACHE_RUNS = 10_000  # runs whose written digests a store remembers (a worker sees unboundedly many)

__all__ = ["PART_MIN_CHARS", "Known", "PartCache", "SplitState", "join_state", "referenced", "split_state"]


Known = tuple[str, bool]  # a large memo entry's digest at the run's last write, and whether it is a part


@dataclass(frozen=True)
class SplitState:
    """A snapshot as a step stores it: the row's JSON, the entry -> digest map, and the parts to write."""

    snapshot: str
    refs: str | None  # JSON {memo key: digest}; None when no entry was large enough
    known: dict[str, Known] = field(default_factory=dict)  # what the store remembers once this write commits
    new_parts: dict[str, str] = field(default_factory=dict)  # digest -> JSON not yet known written
    texts: tuple[str, ...] = ()  # every stored document of the state (row and parts), for the size limit


def split_state(state: RunState, known: Mapping[str, Known] | None = None) -> SplitState:
    """Split off ``state``'s large memo entries that did not change since the run's last write.

    ``known`` is what this store remembers of that write (:class:`PartCache`); without it (a fresh
    process, a new run) every entry counts as changed and stays in the row this time.
    """
    memo = state.memo
    if not memo:
        snapshot = state.__pydantic_serializer__.to_json(state).decode()
        return SplitState(snapshot, None, texts=(snapshot,))
    # Each entry is serialized once: its JSON is both what is hashed and what goes into the row.
    texts = {key: to_json(value).decode() for key, value in memo.items()}
    known = known or {}
    refs: dict[str, str] = {}
    remembered: dict[str, Known] = {}
    new_parts: dict[str, str] = {}
    for key, text in texts.items():
        if len(text) < PART_MIN_CHARS or not isinstance(memo[key], dict | list):
            continue
        digest = sha256_hex(text)
        last = known.get(key)
        if last is not None and last[0] == digest:  # unchanged since the last write: a part from now on
            refs[key] = digest
            if not last[1]:
                new_parts[digest] = text
        remembered[key] = (digest, key in refs)
    entries = ",".join(f"{to_json(key).decode()}:{'null' if key in refs else text}" for key, text in texts.items())
    rest = state.__pydantic_serializer__.to_json(state, exclude={"memo"}).decode()
    snapshot = f'{rest[:-1]},"memo":{{{entries}}}}}'
    parts = tuple(texts[key] for key in refs)
    return SplitState(
        snapshot,
        json.dumps(refs, separators=(",", ":")) if refs else None,
        remembered,
        new_parts,
        (snapshot, *parts),
    )


def join_state(run_id: str, snapshot: str, refs: str | None, parts: Mapping[str, str]) -> RunState:
    """The state a split stored: the row's snapshot with each referenced part back in its memo entry."""
    state = RunState.model_validate_json(snapshot)
    if not refs:
        return state
    memo = dict(state.memo)
    for key, digest in json.loads(refs).items():
        text = parts.get(digest)
        if text is None:  # parts are written with (or before) the row that names them
            raise StoreError(
                f"run {run_id}: the stored part {digest[:12]} of its memo entry {key!r} is missing",
                code=ErrorCode.STORE_CORRUPT,
                details={"run_id": run_id, "part": digest},
            )
        memo[key] = json.loads(text)
    return state.model_copy(update={"memo": memo})


def referenced(refs: str | None) -> list[str]:
    """The digests a row's map names (to fetch their parts)."""
    return sorted(set(json.loads(refs).values())) if refs else []


class PartCache:
    """Each large memo entry of a run as this store last committed it (digest, and whether as a part): a
    part known here exists in the database, so it is not written again. Bounded; forgetting costs a write."""

    def __init__(self, runs: int = PART_CACHE_RUNS):
        self._runs = runs
        self._known: dict[str, dict[str, Known]] = {}

    def known(self, run_id: str) -> Mapping[str, Known] | None:
        return self._known.get(run_id)

    def committed(self, run_id: str, digests: Mapping[str, Known]) -> None:
        """Call only after the transaction that wrote (or found) these parts committed."""
        if not digests:
            self._known.pop(run_id, None)
            return
        if run_id not in self._known and len(self._known) >= self._runs:
            self._known.clear()
        self._known[run_id] = dict(digests)

    def forget(self, run_ids: Iterable[str]) -> None:
        for run_id in run_ids:
            self._known.pop(run_id, None)
