"""Gauges read from the store at collection time: runs by status, unfinished runs by agent version, and
the age of the oldest waiting request.

They describe the whole store, not one process, so a worker's scrape answers "how many runs wait for a
person, and since when" without a metrics backend joining per-process counts. Each collection reads at
most ``cap`` runs per status (newest first, a page at a time): past it a count saturates at the cap
and the oldest age is a lower bound, so a scrape stays bounded on a store of millions of runs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from datetime import UTC, datetime

from opentelemetry.metrics import CallbackOptions, Meter, Observation

from stateward.core.status import RunStatus
from stateward.store.base import Store

DEFAULT_CAP = 10_000
PAGE = 1000


class StoreGauges:
    """``stateward.runs`` (by ``status``), ``stateward.runs.unfinished`` (by ``agent`` and ``agent_version``:
    how many runs each build still has to drive, which a deploy watches drain) and
    ``stateward.requests.oldest_waiting_age`` (seconds)."""

    def __init__(
        self,
        meter: Meter,
        store: Callable[[], Store],
        *,
        cap: int = DEFAULT_CAP,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ):
        """``store`` opens a store for one collection (scrapes run on the exporter's thread) and is closed after."""
        self._open = store
        self._cap = cap
        self._clock = clock
        self._oldest: float = 0.0
        self._versions: Counter[tuple[str, str]] = Counter()
        meter.create_observable_gauge(
            "stateward.runs", [self._runs], unit="{run}", description="Runs in the store by status (capped)."
        )
        meter.create_observable_gauge(
            "stateward.runs.unfinished",
            [self._unfinished],
            unit="{run}",
            description="Runs not yet ended, by agent and agent version (capped per status; read with stateward.runs).",
        )
        meter.create_observable_gauge(
            "stateward.requests.oldest_waiting_age",
            [self._age],
            unit="s",
            description="Seconds the longest-waiting WAITING_FOR_USER run has waited (0 when none).",
        )

    def _runs(self, options: CallbackOptions) -> Iterable[Observation]:
        store = self._open()
        try:
            out = []
            oldest: datetime | None = None
            self._versions = Counter()
            for status in RunStatus:
                count, last = self._count(store, status.value, None if status.is_terminal else self._versions)
                out.append(Observation(count, {"status": status.value}))
                if status is RunStatus.WAITING_FOR_USER:
                    oldest = last
            self._oldest = 0.0 if oldest is None else max(0.0, (self._clock() - oldest).total_seconds())
            return out
        finally:
            store.close()

    def _unfinished(self, options: CallbackOptions) -> Iterable[Observation]:
        return [
            Observation(n, {"agent": agent, "agent_version": version})
            for (agent, version), n in sorted(self._versions.items())
        ]

    def _age(self, options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(self._oldest)]

    def _count(
        self, store: Store, status: str, versions: Counter[tuple[str, str]] | None = None
    ) -> tuple[int, datetime | None]:
        """How many runs have ``status`` (up to the cap) and the oldest last write among them; each run's
        (agent, version) tallied into ``versions`` when given."""
        count, cursor, oldest = 0, None, None
        while count < self._cap:
            page = store.page_runs(status=status, limit=min(PAGE, self._cap - count), cursor=cursor)
            count += len(page.items)
            if versions is not None:
                versions.update((r.agent, r.agent_version or "unknown") for r in page.items)
            if page.items:
                last = min(r.updated_at for r in page.items)
                oldest = last if oldest is None else min(oldest, last)
            cursor = page.next_cursor
            if cursor is None:
                break
        return count, oldest
