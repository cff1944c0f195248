"""The store's protocols, one per concern, and :class:`Store`, their union.

A backend implements the parts it has; code that needs one part types its parameter with that part (the
gateway's journal takes an ``EffectJournal``, a lister a ``RunListing``). The built-in stores (``store/sqlite/``
and ``store/postgres/``) implement every part, each in a module of the same name as the concern:

- :class:`RunLog` (``runs.py``): create, load and commit runs; events; checkpoints; integrity and close.
- :class:`RequestBook` (``requests.py``): pending requests, their answers, pause/cancel controls.
- :class:`LeaseBook` (``leases.py``): leases and claims.
- :class:`EffectJournal` (``journal.py``): side effects by idempotency key, circuit breakers.
- :class:`ArtifactShelf` (``artifacts.py``): artifacts.
- :class:`ForkBook` (``forks.py``): forks and lineage.
- :class:`RunListing` (``listing.py``): listing and paging runs.

Besides :class:`Store`, the HTTP service needs three more parts, defined beside their records and re-exported
here: :class:`KeyStore` (API keys and idempotent responses; ``keys.py`` in each store),
:class:`WebhookStore` (the webhook outbox, store/outbox.py) and :class:`SessionStore` (signed-out sessions,
store/sessions.py). A backend without them runs agents but cannot back ``stateward serve``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Protocol

from stateward.core.events import Event, NewEvent
from stateward.core.journal import BreakerState, SideEffectRecord
from stateward.core.state import PendingRequest, RunState
from stateward.store.keys import KeyStore
from stateward.store.outbox import WebhookStore
from stateward.store.paging import DEFAULT_PAGE_SIZE, RequestPage, RunPage
from stateward.store.records import ArtifactRecord, Checkpoint, Lease, PendingRecord, RunRow, StepWrite
from stateward.store.sessions import SessionStore

__all__ = [
    "ArtifactShelf",
    "Buildable",
    "EffectJournal",
    "ForkBook",
    "KeyStore",
    "LeaseBook",
    "RequestBook",
    "RunListing",
    "RunLog",
    "SessionStore",
    "Store",
    "WebhookStore",
]

Buildable = Mapping[str, Sequence[str]]
"""Per agent name, the recorded versions a claimer can build: it is leased no run of those agents that
was recorded under another version (runs of agents it does not name, and runs recorded before versions
existed, are claimed as before)."""


class RunLog(Protocol):
    """Runs and their steps: a run's snapshot and events, the one guarded write per step, its checkpoints,
    and the store as a whole (an integrity check before use, and closing it). Every backend has this part."""

    def create_run(self, state: RunState, events: list[NewEvent]) -> list[Event]:
        """Insert a new run with its first events; RUN_EXISTS if the id is taken."""
        ...

    def load_run(self, run_id: str) -> RunState:
        """The latest committed snapshot; RunNotFoundError if there is none."""
        ...

    def load_run_at(self, run_id: str) -> tuple[RunState, int]:
        """The snapshot together with the number of the last event it reflects."""
        ...

    def last_seq(self, run_id: str) -> int: ...

    def commit_step(self, run_id: str, expected_seq: int, write: StepWrite, lease: Lease | None = None) -> int:
        """Apply one step atomically if the run's last event is still ``expected_seq``; return the new last seq.

        With a lease, the write also requires that lease to be current (else STALE_LEASE); without
        one, it requires that nobody holds a live lease (else LEASE_HELD). A concurrent writer that
        got there first makes this raise CONCURRENT_UPDATE. A refused write leaves nothing behind.
        """
        ...

    def read_events(self, run_id: str, after_seq: int = 0, limit: int | None = None) -> list[Event]:
        """The run's events numbered above ``after_seq`` in order, at most ``limit`` of them (None: all)."""
        ...

    def latest_checkpoint(self, run_id: str) -> Checkpoint | None: ...

    def checkpoints_of(self, run_id: str, limit: int = 1000) -> list[Checkpoint]:
        """The run's checkpoints in seq order, the ones it shares with its sources first (a fork's)."""
        ...

    def checkpoint_at(self, run_id: str, seq: int) -> Checkpoint | None:
        """The run's checkpoint taken at event ``seq`` (a shared one of its source's, for a fork), or None."""
        ...

    def check_integrity(self) -> None:
        """Refuse a damaged store (STORE_CORRUPT) before anyone writes to it or calls it ready: SQLite's
        ``PRAGMA quick_check``; on PostgreSQL a read of every table (the server checks its own pages)."""
        ...

    def close(self) -> None: ...


class RequestBook(Protocol):
    """What runs wait for people on: pending requests and their answers (an answer is written by the
    step that consumes it, ``StepWrite.close_request``), and the pause/cancel control a caller leaves for a run."""

    def get_request(self, run_id: str, request_id: str) -> PendingRecord | None: ...

    def list_requests(self, run_id: str | None = None, open_only: bool = True) -> list[PendingRecord]: ...

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

    def get_control(self, run_id: str) -> str | None:
        """A pending 'pause' or 'cancel' request for the lease holder to act on at its next step."""
        ...

    def set_control(self, run_id: str, control: str | None) -> None: ...


class LeaseBook(Protocol):
    """Who may write a run: fencing leases, and the claims by which workers find runnable runs and retries."""

    def acquire_lease(self, run_id: str, owner: str, ttl_s: float) -> Lease:
        """A new fencing token for ``owner``; LEASE_HELD while another owner's lease is live."""
        ...

    def renew_lease(self, lease: Lease, ttl_s: float) -> Lease: ...

    def release_lease(self, lease: Lease) -> None: ...

    def lease_of(self, run_id: str) -> Lease | None: ...

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


class EffectJournal(Protocol):
    """The Tool Gateway's journal: side-effect records by idempotency key and circuit breakers. It satisfies
    the gateway's ``GatewayStore`` port structurally (the store imports no gateway module)."""

    def get_breaker(self, tool: str) -> BreakerState | None: ...

    def put_breaker(self, state: BreakerState) -> None: ...

    def get_side_effect(self, idempotency_key: str) -> SideEffectRecord | None: ...

    def put_side_effect(self, record: SideEffectRecord) -> None:
        """Committed immediately (its own transaction); APPROVAL_CONSUMED / STALE_LEASE refusals as in GatewayStore."""
        ...

    def side_effects_of(self, run_id: str, statuses: tuple[str, ...]) -> list[SideEffectRecord]:
        """Journal records of this run's side-effecting calls in the given statuses."""
        ...


class ArtifactShelf(Protocol):
    """The versioned artifacts steps write (``StepWrite.artifacts``), a fork's inherited ones included."""

    def list_artifacts(self, run_id: str) -> list[ArtifactRecord]: ...

    def get_artifact(self, run_id: str, name: str, version: int | None = None) -> ArtifactRecord | None: ...


class ForkBook(Protocol):
    """Lineage: forks that read their source's history through (store/lineage.py), never copying it."""

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


class RunListing(Protocol):
    """The runs as operators list them: newest first, filtered and paged (store/paging.py)."""

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


class Store(RunLog, RequestBook, LeaseBook, EffectJournal, ArtifactShelf, ForkBook, RunListing, Protocol):
    """Every part a run needs: what ``open_store`` returns and the runtime is given."""
