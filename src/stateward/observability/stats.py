"""``stateward stats``: the operational figures computed from the store's event log, no metrics stack needed.

Counts come from the same reading of events as the live metrics (:func:`signals_of`), so a figure
means the same thing in both. Rates are ``null`` when nothing could have moved them (no tool call, no
plan, ...), never a misleading 0 or 100%. The scan is bounded: at most ``max_runs`` runs whose last
write falls in the window, newest first; ``runs_scanned`` and ``truncated`` say what was read.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict

from stateward.core.errors import ErrorCode, UserError
from stateward.core.events import Event, EventType
from stateward.core.status import RunStatus
from stateward.observability.signals import Signal, signals_of
from stateward.store.base import Store
from stateward.store.records import RunRow

DEFAULT_MAX_RUNS = 10_000
_PAGE = 1000
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(text: str, now: datetime) -> datetime:
    """``30m``, ``24h``, ``7d`` (before ``now``) or an ISO-8601 time with a zone; INVALID_SINCE otherwise."""
    found = _DURATION.match(text.strip())
    if found:
        return now - timedelta(seconds=float(found.group(1)) * _UNITS[found.group(2)])
    try:
        at = datetime.fromisoformat(text.strip())
    except ValueError:
        at = None
    if at is None or at.tzinfo is None:
        raise UserError(
            f"--since must be a duration (30m, 24h, 7d) or an ISO time with a zone, not {text!r}"[:200],
            code=ErrorCode.INVALID_SINCE,
        )
    return at


class Rate(BaseModel):
    """``part`` of ``whole``; ``rate`` is None when ``whole`` is 0."""

    model_config = ConfigDict(frozen=True)

    part: int
    whole: int
    rate: float | None


def _rate(part: int, whole: int) -> Rate:
    return Rate(part=part, whole=whole, rate=None if whole == 0 else round(part / whole, 4))


class StatsReport(BaseModel):
    """The figures of issue 14's list, over the runs written since ``since``."""

    model_config = ConfigDict(frozen=True)

    since: datetime | None
    until: datetime
    runs_scanned: int
    truncated: bool
    runs_by_status: dict[str, int]
    runs_by_agent_version: dict[str, dict[str, int]]  # agent -> version ("unknown": before versions) -> runs
    oldest_waiting_request_age_s: float | None
    tokens: dict[str, int]
    plan_first_pass_rate: Rate
    replans_per_run: float | None
    cycles_blocked: int
    work_item_success_rate: Rate
    duplicate_call_rate: Rate
    tool_timeout_rate: Rate
    retry_success_rate: Rate
    breaker_rejections: int
    unknown_outcomes: int
    unknown_outcome_reconciliation_s: dict[str, float | None]
    verification_pass_rate: Rate
    claims_without_evidence: int
    checkpoint_recovery_rate: Rate
    budget_overruns: int
    no_progress_stops: int
    degradation_rate: Rate
    handoff_rate: Rate
    illegal_transitions: int
    counts: dict[str, int]


class _Tally:
    """Counts over every scanned run, plus the per-run facts rates need."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[Signal, tuple[tuple[str, str], ...]]] = Counter()
        self.plan_runs = 0
        self.first_pass = 0
        self.resumes = 0
        self.recovered = 0
        self.reconcile_s: list[float] = []

    def total(self, signal: Signal, **match: str) -> int:
        return sum(n for (s, attrs), n in self.counts.items() if s is signal and _has(attrs, match))

    def run(self, events: Iterable[Event]) -> None:
        first_plan: str | None = None
        resumed_at: int | None = None
        asked: dict[str, datetime] = {}
        for event in events:
            for signal, attrs in signals_of(event.type, event.payload):
                self.counts[(signal, tuple(sorted(attrs.items())))] += 1
                if signal is Signal.PLAN_VALIDATED and first_plan is None:
                    first_plan = attrs.get("outcome")
            resumed_at = self._resume(event, resumed_at)
            self._reconciliation(event, asked)
        if first_plan is not None:
            self.plan_runs += 1
            self.first_pass += first_plan == "accepted"

    def _resume(self, event: Event, resumed_at: int | None) -> int | None:
        """A resume counts as recovered once a later step was taken (the run went on from its checkpoint)."""
        if event.type is EventType.RUN_RESUMED:
            self.resumes += 1
            return event.seq
        if resumed_at is not None and event.type is EventType.SIGNAL_RECEIVED:
            self.recovered += 1
            return None
        return resumed_at

    def _reconciliation(self, event: Event, asked: dict[str, datetime]) -> None:
        p = event.payload
        if event.type is EventType.PENDING_RECORDED and p.get("kind") == "reconciliation":
            asked[str(p.get("pending_request_id"))] = event.at
        elif event.type is EventType.REQUEST_ANSWERED and str(p.get("request_id")) in asked:
            self.reconcile_s.append((event.at - asked.pop(str(p.get("request_id")))).total_seconds())


def _has(attrs: tuple[tuple[str, str], ...], match: Mapping[str, str]) -> bool:
    got = dict(attrs)
    return all(got.get(k) == v for k, v in match.items())


def _rows(store: Store, since: datetime | None, max_runs: int) -> Iterator[RunRow]:
    """Runs newest first (by creation), those whose last write is in the window, at most ``max_runs`` + 1."""
    cursor: str | None = None
    seen = 0
    while seen <= max_runs:
        page = store.page_runs(limit=_PAGE, cursor=cursor)
        for row in page.items:
            if since is None or row.updated_at >= since:
                seen += 1
                yield row
                if seen > max_runs:
                    return
        cursor = page.next_cursor
        if cursor is None:
            return


def compute_stats(
    store: Store, *, now: datetime, since: datetime | None = None, max_runs: int = DEFAULT_MAX_RUNS
) -> StatsReport:
    """Read the runs written since ``since`` (all runs without it) and their events; a bounded scan."""
    tally = _Tally()
    by_status: Counter[str] = Counter()
    by_version: Counter[tuple[str, str]] = Counter()
    tokens: Counter[str] = Counter()
    oldest_wait: datetime | None = None
    scanned = 0
    truncated = False
    for row in _rows(store, since, max_runs):
        if scanned == max_runs:
            truncated = True
            break
        scanned += 1
        by_status[row.status] += 1
        by_version[(row.agent, row.agent_version or "unknown")] += 1
        if row.status == RunStatus.WAITING_FOR_USER.value:
            oldest_wait = row.updated_at if oldest_wait is None else min(oldest_wait, row.updated_at)
        usage = store.load_run(row.run_id).usage
        tokens["input"] += usage.input_tokens
        tokens["output"] += usage.output_tokens
        tally.run(e for e in store.read_events(row.run_id) if since is None or e.at >= since)
    report = _report(tally, since, now, scanned, truncated, by_status, tokens, oldest_wait)
    versions: dict[str, dict[str, int]] = {}
    for (agent, version), n in sorted(by_version.items()):
        versions.setdefault(agent, {})[version] = n
    return report.model_copy(update={"runs_by_agent_version": versions})


def _report(
    t: _Tally,
    since: datetime | None,
    now: datetime,
    scanned: int,
    truncated: bool,
    by_status: Counter[str],
    tokens: Counter[str],
    oldest_wait: datetime | None,
) -> StatsReport:
    tools = t.total(Signal.TOOL_CALL)
    ended_runs = t.total(Signal.RUN_ENDED)
    items = t.total(Signal.WORK_ITEM_ENDED)
    recon = t.reconcile_s
    return StatsReport(
        since=since,
        until=now,
        runs_scanned=scanned,
        truncated=truncated,
        runs_by_status={s.value: by_status.get(s.value, 0) for s in RunStatus},
        runs_by_agent_version={},
        oldest_waiting_request_age_s=None if oldest_wait is None else (now - oldest_wait).total_seconds(),
        tokens=dict(tokens),
        plan_first_pass_rate=_rate(t.first_pass, t.plan_runs),
        replans_per_run=None if t.plan_runs == 0 else round(t.total(Signal.REPLAN) / t.plan_runs, 4),
        cycles_blocked=t.total(Signal.CYCLE_BLOCKED),
        work_item_success_rate=_rate(t.total(Signal.WORK_ITEM_ENDED, outcome="COMPLETED"), items),
        duplicate_call_rate=_rate(t.total(Signal.TOOL_DUPLICATE), tools),
        tool_timeout_rate=_rate(t.total(Signal.TOOL_TIMEOUT), tools),
        retry_success_rate=_rate(t.total(Signal.TOOL_RETRIED, outcome="success"), t.total(Signal.TOOL_RETRIED)),
        breaker_rejections=t.total(Signal.BREAKER_OPEN),
        unknown_outcomes=t.total(Signal.UNKNOWN_OUTCOME),
        unknown_outcome_reconciliation_s={
            "count": float(len(recon)),
            "mean": None if not recon else round(sum(recon) / len(recon), 3),
            "max": None if not recon else round(max(recon), 3),
        },
        verification_pass_rate=_rate(t.total(Signal.VERIFICATION, outcome="ACCEPT"), t.total(Signal.VERIFICATION)),
        claims_without_evidence=t.total(Signal.CLAIM_WITHOUT_EVIDENCE),
        checkpoint_recovery_rate=_rate(t.recovered, t.resumes),
        budget_overruns=t.total(Signal.BUDGET_EXHAUSTED),
        no_progress_stops=t.total(Signal.NO_PROGRESS_STOP),
        degradation_rate=_rate(t.total(Signal.RUN_ENDED, status="PARTIALLY_COMPLETED"), ended_runs),
        handoff_rate=_rate(t.total(Signal.HANDOFF), scanned),
        illegal_transitions=t.total(Signal.ILLEGAL_TRANSITION),
        counts={s.value: t.total(s) for s in Signal},
    )
