"""The hard gates, audited from what a store recorded: the event log and the side-effect journal.

Each gate is a count that must be 0 (pause/resume correctness is a rate that must be 100%), shown with
how many opportunities it had: a gate nothing exercised proves nothing, and says so. The audit reads
records, never the code that wrote them, so it catches a protection that was switched off:

- illegal transitions: ``state_transition`` moves outside the transition table, operator resumes of a
  run that was neither paused nor abandoned (a wait resumed without its answer), plus the moves the
  Runtime recorded and refused (opportunities: transitions and resumes);
- unauthorized tool executions: journal entries (side effects that started) without an admission in the
  log (a ``tool_attempted`` or a resume's reconciliation naming that idempotency key), holding an
  approval no person gave, or (when the audit can rebuild the run's agent from its registered name) of a
  tool needing a permission that agent does not hold (opportunities: journal entries);
- duplicate side effects: an idempotency key whose handler ran in two recorded attempts, plus the
  duplicates a domain witnessed (a campaign's ledger and refund book count what was really performed,
  which no runtime record can hide) (opportunities: side-effecting attempts);
- high-risk delivered without evidence: a verification that accepted a version with a claim lacking
  evidence, a run that ended COMPLETED after a verification found such a claim and none passed since, or
  a work item's artifact accepted citing no evidence where it backs a high-risk conclusion (its item's own
  risk, or that of an item built on it) (opportunities: verifications and accepted work-item artifacts);
- budget resets: usage that goes down between two events, or fewer steps than decisions (opportunities:
  runs and resumes);
- double executions: an event written under a lease older than one already seen (opportunities: events
  written under a newer lease);
- unbounded loops: runs that took more steps than their budget allows (opportunities: runs with a step bound);
- budget breaches: a run whose usage is past its budget in a dimension the Runtime bounds before it spends
  (steps, model calls, tool calls; tokens are known only once a call returns, so a run may end past a token
  bound by its last call), a child run past the carve its parent's wait recorded for it (whatever budget the
  child's own record claims), and a child's spend not rolled up into its parent (the parent's returned usage
  lower than the child's) (opportunities: runs, child runs and children returned);
- pause/resume correctness: resumes that carried on with the usage the run had (not lower than before,
  no fewer steps than the decisions recorded before the resume) (opportunities: resumes).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict

from stateward.core.budget import Budget, Usage, spent
from stateward.core.errors import RunNotFoundError
from stateward.core.events import Event, EventType
from stateward.core.journal import SideEffectStatus
from stateward.core.state import RunState
from stateward.core.status import TRANSITIONS, RunStatus
from stateward.observability.payloads import with_defaults
from stateward.store.base import Store

LEGAL_MOVES = frozenset((before.value, after.value) for (before, _), after in TRANSITIONS.items())
COUNT_GATES = (
    "illegal_transitions",
    "unauthorized_tool_executions",
    "duplicate_side_effects",
    "high_risk_without_evidence",
    "budget_resets",
    "double_executions",
    "unbounded_loops",
    "budget_breaches",
)
RATE_GATE = "pause_resume_correctness"
LIVENESS_FLOOR = 0.95
# A run is live when it finished (completed, or delivered partially), waits for a person, or was ended by
# a bound doing its job (its budget, the no-progress rule): a campaign injects those faults on purpose.
_LIVE = (RunStatus.COMPLETED.value, RunStatus.PARTIALLY_COMPLETED.value, RunStatus.WAITING_FOR_USER.value)
_BOUNDED_ENDS = frozenset({"budget_exhausted", "no_progress"})
_RESUMABLE = (RunStatus.PAUSED.value, RunStatus.RUNNING.value)
_ALL_JOURNAL = tuple(s.value for s in SideEffectStatus)
# A run's tool -> the permission it needs and whether the run's agent holds it (None: the agent is unknown here).
PermissionsOf = Callable[[RunState], dict[str, bool] | None]
JournalRow = tuple[str, str | None, str]  # idempotency key, grant id, tool
# The dimensions the Runtime checks before it spends (a step, a model call, a tool call at a time).
_SPENT_IN_UNITS = (("max_steps", "steps"), ("max_model_calls", "model_calls"), ("max_tool_calls", "tool_attempts"))


class Gate(BaseModel):
    """One gate: its value (a count, or a rate for pause/resume), how many chances it had, whether it holds."""

    model_config = ConfigDict(frozen=True)

    name: str
    value: float
    opportunities: int
    holds: bool


class GateReport(BaseModel):
    """Every gate and the liveness floor (finished or waiting); ``passed`` only if all hold."""

    model_config = ConfigDict(frozen=True)

    runs: int
    gates: list[Gate]
    finished_or_waiting: float | None
    liveness_holds: bool
    passed: bool
    # Protections that held, counted (not gates: a refusal is the gateway doing its job, never a breach).
    scope_violations_refused: int = 0

    def breaches(self) -> list[str]:
        """The names of the gates (and ``liveness``) that do not hold."""
        out = [g.name for g in self.gates if not g.holds]
        return out if self.liveness_holds else [*out, "liveness"]


@dataclass
class _Audit:
    counts: Counter[str] = field(default_factory=Counter)
    chances: Counter[str] = field(default_factory=Counter)
    resumes_ok: int = 0

    def run(
        self, state: RunState, events: list[Event], journal: Iterable[JournalRow], held: dict[str, bool] | None
    ) -> None:
        self._transitions(state, events)
        self._journal(events, journal, held or {})
        self._usage(state, events)
        self._leases(events)
        self._evidence(state, events)
        self.chances["unbounded_loops"] += state.budget.max_steps is not None
        if state.budget.max_steps is not None and state.usage.steps > state.budget.max_steps:
            self.counts["unbounded_loops"] += 1

    def budgets(self, store: Store, state: RunState, events: list[Event]) -> None:
        """A run past its budget, a child past its carve, a child's spend its parent never counted."""
        self.chances["budget_breaches"] += 1
        self.counts["budget_breaches"] += _overrun(state.budget, state.usage)
        if state.parent is not None:
            self.chances["budget_breaches"] += 1
            asked = store.get_request(state.parent.run_id, state.parent.request_id)
            calls = (
                () if asked is None or asked.request.child is None else (asked.request.child, *asked.request.siblings)
            )
            call = next((c for c in calls if c.run_id == state.run_id), None)
            # The carve is what the parent's wait recorded; a child without one was never carved at all.
            self.counts["budget_breaches"] += call is None or _overrun(call.budget, state.usage)
        for ev in events:
            if ev.type is not EventType.CHILD_RUN_RETURNED or not isinstance(ev.payload.get("child_run_id"), str):
                continue
            self.chances["budget_breaches"] += 1
            self.counts["budget_breaches"] += _unrolled(store, ev.payload)

    def _transitions(self, state: RunState, events: list[Event]) -> None:
        self.counts["illegal_transitions"] += state.usage.illegal_transitions
        for ev in events:
            if ev.type is EventType.STATE_TRANSITION:
                self.chances["illegal_transitions"] += 1
                move = (ev.payload.get("state_before"), ev.payload.get("state_after"))
                self.counts["illegal_transitions"] += move not in LEGAL_MOVES
            elif ev.type is EventType.RUN_RESUMED and "from_status" in ev.payload:
                # An operator's resume moves a PAUSED (or abandoned RUNNING) run; from a wait it skips the answer.
                self.chances["illegal_transitions"] += 1
                self.counts["illegal_transitions"] += ev.payload["from_status"] not in _RESUMABLE

    def _journal(self, events: list[Event], journal: Iterable[JournalRow], held: dict[str, bool]) -> None:
        admitted: set[str] = set()
        approved: set[str] = set()
        executed: Counter[str] = Counter()
        for ev in events:
            p = ev.payload
            if ev.type is EventType.TOOL_ATTEMPTED and p.get("idempotency_key"):
                p = with_defaults(ev.type, p)  # a call executed once is stored without saying so
                key = str(p["idempotency_key"])
                admitted.add(key)
                if p.get("runtime_action") == "EXECUTE" and int(p.get("handler_calls") or 0) > 0:
                    executed[key] += 1
            elif ev.type is EventType.RUN_RESUMED:
                admitted.update(str(r.get("idempotency_key")) for r in p.get("reconciled") or () if isinstance(r, dict))
            elif ev.type is EventType.REQUEST_ANSWERED and p.get("verdict") == "approved":
                approved.add(str(p.get("request_id")))
        for key, grant, tool in journal:
            self.chances["unauthorized_tool_executions"] += 1
            ungranted = grant is not None and grant not in approved
            if key not in admitted or ungranted or held.get(tool) is False:
                self.counts["unauthorized_tool_executions"] += 1
        self.chances["duplicate_side_effects"] += len(executed)
        self.counts["duplicate_side_effects"] += sum(n - 1 for n in executed.values())

    def _usage(self, state: RunState, events: list[Event]) -> None:
        self.chances["budget_resets"] += 1
        last: dict[str, int] = {}
        signals = 0
        for ev in events:
            signals += ev.type is EventType.SIGNAL_RECEIVED
            usage = ev.payload.get("usage")
            if not isinstance(usage, dict) or ev.type is EventType.CHILD_RUN_RETURNED:  # a child's spend: a delta
                continue
            now = {k: int(v) for k, v in usage.items() if isinstance(v, int)}
            # Lower than before, or fewer steps than the decisions recorded so far: usage was lost.
            if any(now.get(k, 0) < v for k, v in last.items()) or now.get("steps", signals) < signals:
                self.counts["budget_resets"] += 1
            elif ev.type is EventType.RUN_RESUMED:
                self.resumes_ok += 1
            if ev.type is EventType.RUN_RESUMED:
                self.chances["budget_resets"] += 1
                self.chances[RATE_GATE] += 1
            last = now
        if state.usage.steps < signals:
            self.counts["budget_resets"] += 1  # fewer steps counted than decisions taken

    def _leases(self, events: list[Event]) -> None:
        highest = 0
        for ev in events:
            if ev.lease_version and ev.lease_version < highest:
                self.counts["double_executions"] += 1
            if ev.lease_version > highest:
                self.chances["double_executions"] += highest > 0
                highest = ev.lease_version

    def _evidence(self, state: RunState, events: list[Event]) -> None:
        bare = False
        for ev in events:
            if ev.type is EventType.WORK_ITEM_ENDED and "evidence" in ev.payload:
                # A work item's artifact accepted at once: how many evidence refs it cites, and (when none)
                # the highest risk of a conclusion built on it.
                self.chances["high_risk_without_evidence"] += 1
                self.counts["high_risk_without_evidence"] += _accepted_bare(ev.payload, ev.payload.get("evidence"))
                continue
            if ev.type is not EventType.VERIFICATION_RECORDED:
                continue
            self.chances["high_risk_without_evidence"] += 1
            if "evidence_refs" in ev.payload and ev.payload.get("outcome") == "ACCEPT":
                refs = ev.payload.get("evidence_refs")
                self.counts["high_risk_without_evidence"] += _accepted_bare(
                    ev.payload, len(refs) if isinstance(refs, list) else 0
                )
            checks = ev.payload.get("checks")
            failed = isinstance(checks, list) and any(
                isinstance(c, dict) and c.get("name") == "claims_have_evidence" and c.get("verdict") == "FAIL"
                for c in checks
            )
            accepted = ev.payload.get("outcome") == "ACCEPT"
            # Accepting a version whose claims lack evidence is delivering it as if it were sound.
            self.counts["high_risk_without_evidence"] += failed and accepted
            bare = failed or (bare and not accepted)
        if bare and state.status is RunStatus.COMPLETED:
            self.counts["high_risk_without_evidence"] += 1


def _overrun(budget: Budget, usage: Usage) -> bool:
    """``usage`` past ``budget`` in a dimension spent a unit at a time (reaching a bound is allowed, not passing it)."""
    return any(
        (limit := getattr(budget, bound)) is not None and getattr(usage, counter) > limit
        for bound, counter in _SPENT_IN_UNITS
    )


def _accepted_bare(payload: dict[str, object], cited: object) -> bool:
    """An artifact accepted citing no evidence while it backs a high-risk conclusion (its own item's or one
    built on it): delivered as sound with nothing under it."""
    return cited == 0 and payload.get("backs_risk") == "high"


def audit(
    store: Store,
    run_ids: Iterable[str],
    *,
    permissions: PermissionsOf | None = None,
    witnessed_duplicates: int = 0,
) -> GateReport:
    """The hard gates over ``run_ids`` as ``store`` recorded them. ``permissions`` (e.g.
    :func:`stateward.chaos.permissions.agent_permissions`) lets the audit check journalled calls against
    the permissions the run's agent holds; ``witnessed_duplicates`` adds side effects a domain saw performed
    twice."""
    found = _Audit()
    found.counts["duplicate_side_effects"] += witnessed_duplicates
    statuses: Counter[str] = Counter()
    runs = 0
    scope_refused = 0
    for run_id in run_ids:
        runs += 1
        state = store.load_run(run_id)
        scope_refused += state.usage.scope_violations
        bounded = state.status is RunStatus.FAILED and state.terminal_reason in _BOUNDED_ENDS
        statuses["BOUNDED" if bounded else state.status.value] += 1
        journal = [(r.idempotency_key, r.grant_id, r.tool) for r in store.side_effects_of(run_id, _ALL_JOURNAL)]
        events = store.read_events(run_id)
        found.run(state, events, journal, None if permissions is None else permissions(state))
        found.budgets(store, state, events)
    gates = [
        Gate(name=n, value=found.counts[n], opportunities=found.chances[n], holds=found.counts[n] == 0)
        for n in COUNT_GATES
    ]
    resumes = found.chances[RATE_GATE]
    rate = 1.0 if resumes == 0 else found.resumes_ok / resumes
    gates.append(Gate(name=RATE_GATE, value=round(rate, 4), opportunities=resumes, holds=rate == 1.0))
    live = sum(statuses[s] for s in (*_LIVE, "BOUNDED"))
    ratio = None if runs == 0 else round(live / runs, 4)
    liveness = ratio is not None and ratio >= LIVENESS_FLOOR
    return GateReport(
        runs=runs,
        gates=gates,
        finished_or_waiting=ratio,
        liveness_holds=liveness,
        passed=liveness and all(g.holds for g in gates),
        scope_violations_refused=scope_refused,
    )


def _unrolled(store: Store, returned: dict[str, Any]) -> bool:
    """Whether a ``child_run_returned`` counted less than its children spent (every child of a parallel call,
    together); a child never started (its agent unavailable) spent nothing."""
    ids = returned.get("child_run_ids")
    spend: dict[str, int] = {}
    for run_id in ids if isinstance(ids, list) else [returned["child_run_id"]]:
        try:
            child = store.load_run(str(run_id))
        except RunNotFoundError:
            continue
        for name, n in spent(child.usage).counts().items():
            spend[name] = spend.get(name, 0) + n
    rolled = returned.get("usage")
    rolled = rolled if isinstance(rolled, dict) else {}
    return any(int(rolled.get(k) or 0) < v for k, v in spend.items())
