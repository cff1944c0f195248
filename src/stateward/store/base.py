"""The Store protocol both stores implement, and the helpers they share. It imports neither implementation:
which store a URL opens is ``store/backends.py``'s to say."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from stateward.core.canonical import compact_json
from stateward.core.errors import ErrorCode, RunError, RunNotFoundError, StaleLeaseError, StoreError, UserError
from stateward.core.events import Event, NewEvent
from stateward.core.journal import BreakerState, SideEffectRecord
from stateward.core.state import PendingRequest, RunState
from stateward.store.paging import DEFAULT_PAGE_SIZE, RequestPage, RunPage
from stateward.store.records import ArtifactRecord, Checkpoint, Lease, PendingRecord, RunRow, StepWrite


class Store(Protocol):
    """Durable runs, events, requests and the gateway's journal; it satisfies the gateway's
    ``GatewayStore`` port structurally (the store imports no gateway module)."""

    def get_breaker(self, tool: str) -> BreakerState | None: ...

    def put_breaker(self, state: BreakerState) -> None: ...

    def get_side_effect(self, idempotency_key: str) -> SideEffectRecord | None: ...

    def put_side_effect(self, record: SideEffectRecord) -> None:
        """Committed immediately (its own transaction); APPROVAL_CONSUMED / STALE_LEASE refusals as in GatewayStore."""
        ...

    def create_run(self, state: RunState, events: list[NewEvent]) -> list[Event]:
        """Insert a new run with its first events; RUN_EXISTS if the id is taken."""
        ...

    def load_run(self, run_id: str) -> RunState:
        """The latest committed snapshot; RunNotFoundError if there is none."""
        ...

    def commit_step(self, run_id: str, expected_seq: int, write: StepWrite, lease: Lease | None = None) -> int:
        """Apply one step atomically if the run's last event is still ``expected_seq``; return the new last seq.

        With a lease, the write also requires that lease to be current (else STALE_LEASE); without
        one, it requires that nobody holds a live lease (else LEASE_HELD). A concurrent writer that
        got there first makes this raise CONCURRENT_UPDATE. A refused write leaves nothing behind.
        """
        ...

    def acquire_lease(self, run_id: str, owner: str, ttl_s: float) -> Lease:
        """A new fencing token for ``owner``; LEASE_HELD while another owner's lease is live."""
        ...

    def claim_next(
        self,
        owner: str,
        ttl_s: float,
        statuses: tuple[str, ...] = ("RUNNING", "PAUSING"),
        *,
        builds: Buildable | None = None,
    ) -> Lease | None:
        """Lease the oldest runnable run nobody holds, skipping rows other claimers have locked, runs
        held back by a ``not_before`` still in the future (by the store's clock, as lease expiry is) and,
        when ``builds`` is given, runs recorded under an agent version the claimer cannot build."""
        ...

    def claim_batch(
        self,
        owner: str,
        ttl_s: float,
        limit: int,
        statuses: tuple[str, ...] = ("RUNNING", "PAUSING"),
        *,
        builds: Buildable | None = None,
    ) -> list[Lease]:
        """Lease up to ``limit`` runnable runs in one transaction, oldest first (``claim_next``'s order and
        rules), each with its own fencing token: a worker with many free slots fills them in one round trip.
        INVALID_ARGUMENT unless 1 <= ``limit`` <= MAX_CLAIM_BATCH."""
        ...

    def due_runs(self, status: str, now: datetime, limit: int = 100) -> list[str]:
        """Ids of runs in ``status`` whose ``not_before`` has come by ``now``, the earliest due first.

        Runs never held back (no ``not_before``) are not listed: this finds retries, not every run.
        """
        ...

    def renew_lease(self, lease: Lease, ttl_s: float) -> Lease: ...

    def release_lease(self, lease: Lease) -> None: ...

    def lease_of(self, run_id: str) -> Lease | None: ...

    def get_control(self, run_id: str) -> str | None:
        """A pending 'pause' or 'cancel' request for the lease holder to act on at its next step."""
        ...

    def set_control(self, run_id: str, control: str | None) -> None: ...

    def latest_checkpoint(self, run_id: str) -> Checkpoint | None: ...

    def checkpoints_of(self, run_id: str, limit: int = 1000) -> list[Checkpoint]:
        """The run's checkpoints in seq order, the ones it shares with its sources first (a fork's)."""
        ...

    def checkpoint_at(self, run_id: str, seq: int) -> Checkpoint | None:
        """The run's checkpoint taken at event ``seq`` (a shared one of its source's, for a fork), or None."""
        ...

    def create_fork(
        self,
        state: RunState,
        events: list[NewEvent],
        *,
        source: str,
        at_seq: int,
        open_request: PendingRequest | None = None,
        checkpoint: str | None = None,
    ) -> int:
        """Insert a fork of ``source``: its history up to ``at_seq`` is read through the source's rows (never
        copied, see store/lineage.py), then its own ``events``; RUN_EXISTS if the id is taken. Returns its last seq."""
        ...

    def forks_of(self, run_id: str, limit: int = 100) -> list[str]:
        """The ids of the runs forked from ``run_id``, oldest first."""
        ...

    def side_effects_of(self, run_id: str, statuses: tuple[str, ...]) -> list[SideEffectRecord]:
        """Journal records of this run's side-effecting calls in the given statuses."""
        ...

    def load_run_at(self, run_id: str) -> tuple[RunState, int]:
        """The snapshot together with the number of the last event it reflects."""
        ...

    def last_seq(self, run_id: str) -> int: ...

    def read_events(self, run_id: str, after_seq: int = 0, limit: int | None = None) -> list[Event]:
        """The run's events numbered above ``after_seq`` in order, at most ``limit`` of them (None: all)."""
        ...

    def check_integrity(self) -> None:
        """Refuse a damaged store (STORE_CORRUPT) before anyone writes to it or calls it ready: SQLite's
        ``PRAGMA quick_check``; on PostgreSQL a read of every table (the server checks its own pages)."""
        ...

    def list_runs(self, limit: int = 100) -> list[RunRow]:
        """The newest runs, unfiltered (see :meth:`page_runs` for filters and paging)."""
        ...

    def page_runs(
        self,
        *,
        status: str | None = None,
        tenant: str | None = None,
        agent: str | None = None,
        limit: int = DEFAULT_PAGE_SIZE,
        cursor: str | None = None,
        version: str | None = None,
        search: str | None = None,
    ) -> RunPage:
        """One page of runs newest first, filters combined (see ``store/paging.py``); INVALID_CURSOR,
        INVALID_PAGE_SIZE or INVALID_FILTER for a bad argument. ``version``: the agent version's runs.
        ``search``: runs whose id starts with it or whose goal (its first GOAL_SEARCH_CHARS characters)
        holds it, ASCII case ignored; a page reads at most SEARCH_WINDOW runs, so it may hold fewer than
        ``limit`` and its ``next_cursor`` still leads on."""
        ...

    def page_requests(
        self,
        *,
        run_id: str | None = None,
        tenant: str | None = None,
        open_only: bool = True,
        limit: int = DEFAULT_PAGE_SIZE,
        cursor: str | None = None,
        kind: str | None = None,
        agent: str | None = None,
        role: str | None = None,
    ) -> RequestPage:
        """One page of pending requests (open ones by default) in (run_id, request_id) order; ``kind`` (a
        RequestKind, else INVALID_FILTER), ``agent`` (its run's agent) and ``role`` (its approver role)
        narrow it in the query, each by its own index of a tenant's open requests."""
        ...

    def get_request(self, run_id: str, request_id: str) -> PendingRecord | None: ...

    def list_requests(self, run_id: str | None = None, open_only: bool = True) -> list[PendingRecord]: ...

    def list_artifacts(self, run_id: str) -> list[ArtifactRecord]: ...

    def get_artifact(self, run_id: str, name: str, version: int | None = None) -> ArtifactRecord | None: ...

    def close(self) -> None: ...


MAX_CLAIM_BATCH = 500  # runs leased by one claim_batch (SQLite binds one parameter per run)


Buildable = Mapping[str, Sequence[str]]
"""Per agent name, the recorded versions a claimer can build: it is leased no run of those agents that
was recorded under another version (runs of agents it does not name, and runs recorded before versions
existed, are claimed as before)."""

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
