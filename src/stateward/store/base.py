"""The helpers both stores share (payload limits, the event batch, claim arguments, why a write was refused).
The protocols are in ``store/protocols.py``; ``Store`` and ``Buildable`` are imported here as well, where callers
have long found them. It imports neither implementation: which store a URL opens is ``store/backends.py``'s to say."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from stateward.core.canonical import compact_json
from stateward.core.errors import ErrorCode, RunError, RunNotFoundError, StaleLeaseError, StoreError, UserError
from stateward.core.events import NewEvent
from stateward.store.protocols import Buildable, Store
from stateward.store.records import Lease

__all__ = [
    "MAX_BUILDS",
    "MAX_CLAIM_BATCH",
    "Buildable",
    "PayloadLimits",
    "Store",
    "build_pairs",
    "claim_limit",
    "event_batch",
    "refused_write",
    "utf8_size_over",
]

MAX_CLAIM_BATCH = 500  # runs leased by one claim_batch (SQLite binds one parameter per run)


MAX_BUILDS = 1000  # (agent, version) pairs one claim may name


def build_pairs(builds: Buildable) -> list[tuple[str, str]]:
    """The (agent, version) pairs of ``builds``, sorted; INVALID_ARGUMENT past MAX_BUILDS."""
    pairs = sorted({(str(agent), str(version)) for agent, versions in builds.items() for version in versions})
    if len(pairs) > MAX_BUILDS or len(builds) > MAX_BUILDS:
        raise UserError(
            f"a claim names at most {MAX_BUILDS} agent versions (asked with {len(pairs)})",
            code=ErrorCode.INVALID_ARGUMENT,
        )
    return pairs


def claim_limit(limit: int) -> int:
    """``limit`` if a claim may ask for that many runs, else INVALID_ARGUMENT (nothing is claimed)."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_CLAIM_BATCH:
        raise UserError(
            f"a claim takes 1 to {MAX_CLAIM_BATCH} runs at once (asked for {limit!r})",
            code=ErrorCode.INVALID_ARGUMENT,
            details={"limit": repr(limit), "max": MAX_CLAIM_BATCH},
        )
    return limit


DEFAULT_MAX_EVENT_BYTES = 1 << 20  # 1 MiB per event payload
DEFAULT_MAX_SNAPSHOT_BYTES = 4 << 20  # 4 MiB per run snapshot (and checkpoint)


@dataclass(frozen=True)
class PayloadLimits:
    """The largest document a store writes, in UTF-8 bytes of its JSON; ``None`` lifts a limit.

    A step with a larger event payload or snapshot is refused whole with PAYLOAD_TOO_LARGE before
    anything is written: one oversized answer or result cannot grow the database without bound.
    """

    event_bytes: int | None = DEFAULT_MAX_EVENT_BYTES
    snapshot_bytes: int | None = DEFAULT_MAX_SNAPSHOT_BYTES

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> PayloadLimits:
        """STATEWARD_MAX_EVENT_BYTES and STATEWARD_MAX_SNAPSHOT_BYTES (0 or less: no limit)."""
        env = os.environ if env is None else env
        return cls(
            event_bytes=_limit(env, "STATEWARD_MAX_EVENT_BYTES", DEFAULT_MAX_EVENT_BYTES),
            snapshot_bytes=_limit(env, "STATEWARD_MAX_SNAPSHOT_BYTES", DEFAULT_MAX_SNAPSHOT_BYTES),
        )

    def check_snapshot(self, run_id: str, snapshot: str) -> None:
        size = utf8_size_over(snapshot, self.snapshot_bytes)
        if size is not None:
            raise _too_large(run_id, "the run's snapshot", size, self.snapshot_bytes)

    def check_snapshot_parts(self, run_id: str, texts: Sequence[str]) -> None:
        """The snapshot as stored in parts (store/parts.py): the limit applies to all of them together."""
        if len(texts) == 1:
            self.check_snapshot(run_id, texts[0])
            return
        if self.snapshot_bytes is None or sum(len(t) for t in texts) * 4 <= self.snapshot_bytes:
            return
        size = sum(len(t.encode("utf-8")) for t in texts)
        if size > self.snapshot_bytes:
            raise _too_large(run_id, "the run's snapshot", size, self.snapshot_bytes)

    def check_events(self, run_id: str, events: Sequence[NewEvent], texts: Sequence[str]) -> None:
        """``texts`` holds each event's payload as it would be stored."""
        if self.event_bytes is None:
            return
        for event, text in zip(events, texts, strict=True):
            size = utf8_size_over(text, self.event_bytes)
            if size is not None:
                raise _too_large(run_id, f"the payload of a {event.type.value} event", size, self.event_bytes)


def event_batch(run_id: str, events: Sequence[NewEvent], limits: PayloadLimits) -> str:
    """A step's events (one to three, usually) as the one cell both stores keep them in (a JSON array of
    ``[type, payload]``): one serializer call, checked against the per-event limit (event by event only
    when the whole batch is over it)."""
    batch = compact_json([(ev.type._value_, ev.payload) for ev in events])  # _value_: not the enum's slow property
    if utf8_size_over(batch, limits.event_bytes) is not None:
        limits.check_events(run_id, events, [compact_json(ev.payload) for ev in events])
    return batch


def _limit(env: Mapping[str, str], name: str, default: int) -> int | None:
    raw = env.get(name, "").strip()
    try:
        value = int(raw) if raw else default
    except ValueError:
        raise UserError(f"{name} must be an integer (bytes)", code=ErrorCode.CONFIGURATION_ERROR) from None
    return value if value > 0 else None


def utf8_size_over(text: str, limit: int | None) -> int | None:
    """The UTF-8 size of ``text`` if it is over ``limit``, else None; encodes only near the limit."""
    if limit is None or len(text) * 4 <= limit:
        return None
    size = len(text) if len(text) > limit else len(text.encode("utf-8"))
    return size if size > limit else None


def _too_large(run_id: str, what: str, size: int, limit: int | None) -> StoreError:
    return StoreError(
        f"{what} of run {run_id} is {size} bytes or more, over the store's limit of {limit}; nothing was written",
        code=ErrorCode.PAYLOAD_TOO_LARGE,
        details={"run_id": run_id, "size": size, "limit": limit},
    )


GuardRow = tuple[int, str | None, int]  # the run's last_seq, lease_owner, lease_version


def refused_write(run_id: str, expected_seq: int, lease: Lease | None, row: GuardRow | None) -> RunError:
    """Why commit_step wrote nothing, in the precedence both stores share: a missing run, then a
    superseded lease, then a lease someone else holds, then a writer that got there first."""
    if row is None:
        return RunNotFoundError(f"no run {run_id!r}", details={"run_id": run_id})
    last_seq, owner, version = row
    details = {"run_id": run_id, "expected_seq": expected_seq, "lease_version": version}
    if lease is not None and (owner != lease.owner or version != lease.version):
        return StaleLeaseError(
            f"lease {lease.version} of {lease.owner} on run {run_id} was superseded (now {version} of {owner})",
            details=details,
        )
    if lease is None and last_seq == expected_seq:
        return RunError(f"run {run_id} is leased by {owner}", code=ErrorCode.LEASE_HELD, details=details)
    return RunError(
        f"run {run_id} changed since event {expected_seq}; reload and retry",
        code=ErrorCode.CONCURRENT_UPDATE,
        details=details,
    )
