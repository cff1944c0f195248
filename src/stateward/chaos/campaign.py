"""The fault-injection campaign behind ``stateward gates``: one table of agent x fault, run on one store.

Agents are named by their registered name and built through the process's :class:`AgentRegistry`
(the library never imports the demos: their agents arrive through the ``stateward.agents`` entry
point). A scenario whose agent this process cannot build is reported ``skipped``; a fault an agent
cannot meet is ``not_applicable`` with the reason; a fault no agent expresses yet is ``not_covered``.
A cell ``ran`` only if at least one of its runs shows the fault in its own records (chaos/observe.py);
injected runs that never met it are counted as ``unobserved``. Only ``ran`` cells count.

The ledger agent runs under the chaos storm (forked workers SIGKILLed at random and at every persistence
boundary, SIGSTOPped past the lease TTL so two workers meet one run, approvers dying). Every other
scenario runs in this process, except crashes and races (chaos/forked.py): a forked child drives the
run and SIGKILLs itself at the named persistence boundary, or freezes there while a second worker
process takes the run over; this process then finishes the run.
"""

from __future__ import annotations

import random
import sqlite3
import tempfile
import time
from collections.abc import Iterable
from contextlib import closing
from enum import StrEnum
from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field

from stateward.chaos import observe
from stateward.chaos.forked import CHILD_TIMEOUT_S, kill_child, race, resume_race
from stateward.chaos.forked import finish_with as _finish
from stateward.core.errors import StatewardError
from stateward.core.events import Event
from stateward.core.state import RunState
from stateward.core.status import RunStatus
from stateward.runtime.agent_registry import AgentRegistry
from stateward.runtime.faults import BOUNDARIES
from stateward.runtime.leases import LeasePolicy
from stateward.runtime.runtime import Runtime
from stateward.store.base import open_store


class SourceFault(StrEnum):
    """Every fault the source's fault-injection list names, plus the two storms around them."""

    TIMEOUT_ONCE = "timeout-once-then-recovery"
    THREE_FAILURES = "three-consecutive-failures"
    PERMISSION_DENIED = "permission-denied"
    PLAN_CYCLE = "plan-with-a-cycle"
    SAME_SEARCH = "same-search-repeated"
    MISSING_EVIDENCE = "report-missing-evidence"
    BUDGET_EXHAUSTED = "budget-exhausted-mid-run"
    CRASH_AFTER_TOOL = "crash-after-tool-before-checkpoint"
    TWO_WORKERS = "two-workers-resume-one-run"
    PROMPT_INJECTION = "prompt-injection-in-document"
    CONFLICTING_SOURCES = "conflicting-authoritative-sources"
    HIGH_RISK_LOW_CONFIDENCE = "high-risk-low-confidence"
    SIGKILL_AT_BOUNDARY = "sigkill-at-persistence-boundary"
    PAUSE_RESUME = "pause-resume-at-random-point"


class Coverage(StrEnum):
    """What became of one agent x fault cell. Only ``ran`` counts: the fault was injected and observed."""

    RAN = "ran"
    SKIPPED = "skipped"  # the agent is not registered in this process
    NOT_APPLICABLE = "not_applicable"  # the agent cannot meet this fault (the reason says why)
    NOT_COVERED = "not_covered"  # it could, and nothing injects it yet (or it was injected and never observed)


LEDGER: Final = "chaos-ledger"
REFUND: Final = "refund"
PAYMENT: Final = "payment-migration"
CAMPAIGN_AGENTS: Final = (LEDGER, "blog", REFUND, PAYMENT)
_F = SourceFault


class Scenario(BaseModel):
    """One row of the table: a registered agent, its JSON params, the fault, and how the run is disturbed."""

    model_config = ConfigDict(frozen=True)

    agent: str
    fault: SourceFault
    params: dict[str, Any] = Field(default_factory=dict)
    goal: str = "campaign run"
    builder: str | None = None  # the registered name that builds this agent under the fault (default: agent)
    kill_at: str | None = None  # a persistence boundary where a forked driver SIGKILLs itself
    race_at: str | None = None  # a boundary where a forked worker freezes while a second one takes over
    nth: int | None = None  # which arrival at the boundary (None: 1 or 2 at random)
    pause: bool = False  # pause after a random number of steps, then resume
    resume_race: bool = False  # pause, then two worker processes resume the run at once


def _process_rows(agent: str, goal: str, crash_nth: int | None = None) -> list[Scenario]:
    """SIGKILL at every persistence boundary, a crash after a tool, two workers (one frozen mid-step while
    the other takes over; two resuming one paused run), a pause at a random step."""
    rows = [Scenario(agent=agent, fault=_F.SIGKILL_AT_BOUNDARY, goal=goal, kill_at=point) for point in BOUNDARIES]
    rows.append(Scenario(agent=agent, fault=_F.CRASH_AFTER_TOOL, goal=goal, kill_at=BOUNDARIES[2], nth=crash_nth))
    rows.append(Scenario(agent=agent, fault=_F.TWO_WORKERS, goal=goal, race_at="before_commit"))
    rows.append(Scenario(agent=agent, fault=_F.TWO_WORKERS, goal=goal, resume_race=True))
    rows.append(Scenario(agent=agent, fault=_F.PAUSE_RESUME, goal=goal, pause=True))
    return rows


_BLOG_GOAL: Final = "write a blog brief"
_REFUND_GOAL: Final = "refund customer c-42"
_PAY_GOAL: Final = "assess the Payment SDK v2 migration"
SCENARIOS: Final[tuple[Scenario, ...]] = (
    *_process_rows("blog", _BLOG_GOAL),
    Scenario(agent="blog", fault=_F.BUDGET_EXHAUSTED, goal=_BLOG_GOAL, params={"max_steps": 3}),
    # The refund run's second tool call is the side-effecting refund: crash right after it.
    *_process_rows(REFUND, _REFUND_GOAL, crash_nth=2),
    Scenario(agent=REFUND, fault=_F.TIMEOUT_ONCE, goal=_REFUND_GOAL, params={"fault": "timeout-once"}),
    Scenario(agent=REFUND, fault=_F.PERMISSION_DENIED, goal=_REFUND_GOAL, params={"fault": "permission-denied"}),
    Scenario(agent=REFUND, fault=_F.SAME_SEARCH, goal=_REFUND_GOAL, params={"fault": "same-search"}),
    Scenario(agent=REFUND, fault=_F.HIGH_RISK_LOW_CONFIDENCE, goal=_REFUND_GOAL,
             params={"fault": "high-risk-low-confidence"}),
    Scenario(agent=REFUND, fault=_F.BUDGET_EXHAUSTED, goal=_REFUND_GOAL, params={"max_steps": 2}),
    *_process_rows(PAYMENT, _PAY_GOAL),
    Scenario(agent=PAYMENT, fault=_F.CONFLICTING_SOURCES, goal=_PAY_GOAL, params={"fault": "authority-conflict"}),
    Scenario(agent=PAYMENT, fault=_F.BUDGET_EXHAUSTED, goal=_PAY_GOAL, params={"fault": "budget"}),
    Scenario(agent=PAYMENT, fault=_F.PROMPT_INJECTION, goal=_PAY_GOAL, params={"fault": "injection"}),
    # The baseline's first draft has a high-risk claim citing nothing; verification must catch it.
    Scenario(agent=PAYMENT, fault=_F.MISSING_EVIDENCE, goal=_PAY_GOAL),
    # The planner's first plan has a dependency cycle: a variant the payment demo registers by its own name.
    Scenario(agent=PAYMENT, fault=_F.PLAN_CYCLE, goal=_PAY_GOAL, builder="payment-migration-plan-cycle"),
    # Last: its three timeouts open search_docs' circuit breaker, which the store keeps for every run after it.
    Scenario(agent=PAYMENT, fault=_F.THREE_FAILURES, goal=_PAY_GOAL, params={"fault": "doc-search-timeout"}),
)  # fmt: skip

# What the storm covers for the ledger agent (it runs under the storm, not as table rows).
STORM_FAULTS: Final = (_F.SIGKILL_AT_BOUNDARY, _F.CRASH_AFTER_TOOL, _F.TWO_WORKERS)

# The fault each cell must show in the run's records before the run counts.
OBSERVERS: Final[dict[SourceFault, observe.Observer]] = {
    _F.TIMEOUT_ONCE: observe.timeout_then_recovery,
    _F.THREE_FAILURES: observe.three_failures,
    _F.PERMISSION_DENIED: observe.permission_denied,
    _F.PLAN_CYCLE: observe.plan_cycle,
    _F.SAME_SEARCH: observe.same_search,
    _F.MISSING_EVIDENCE: observe.missing_evidence,
    _F.BUDGET_EXHAUSTED: observe.budget_exhausted,
    _F.PROMPT_INJECTION: observe.prompt_injection,
    _F.CONFLICTING_SOURCES: observe.conflicting_sources,
    _F.HIGH_RISK_LOW_CONFIDENCE: observe.high_risk_low_confidence,
    _F.PAUSE_RESUME: observe.paused_and_resumed,
    _F.TWO_WORKERS: observe.two_lease_holders,
}

_NO_MODEL = "a fixed workflow with no model"
# Faults an agent cannot meet, and why: said in the report, never counted as passed.
NOT_APPLICABLE: Final[dict[tuple[str, SourceFault], str]] = {
    (LEDGER, _F.PLAN_CYCLE): f"{_NO_MODEL}: no planner",
    (LEDGER, _F.SAME_SEARCH): f"{_NO_MODEL}: nothing proposes a search",
    (LEDGER, _F.MISSING_EVIDENCE): f"{_NO_MODEL}: it delivers no report",
    (LEDGER, _F.PROMPT_INJECTION): f"{_NO_MODEL}: no model reads a document",
    (LEDGER, _F.CONFLICTING_SOURCES): f"{_NO_MODEL}: it reads no sources",
    (LEDGER, _F.HIGH_RISK_LOW_CONFIDENCE): f"{_NO_MODEL}: it draws no conclusion",
    ("blog", _F.PERMISSION_DENIED): "the blog's tools require no permission: there is nothing to deny",
    ("blog", _F.PLAN_CYCLE): "the registered blog agent runs the ReAct controller: no plan to be cyclic",
    ("blog", _F.HIGH_RISK_LOW_CONFIDENCE): "a blog brief is no high-risk conclusion",
    ("blog", _F.CONFLICTING_SOURCES): "the blog's materials carry no authority to conflict",
    ("blog", _F.MISSING_EVIDENCE): "the blog agent delivers no verified report",
    (REFUND, _F.PLAN_CYCLE): "the refund agent is ReAct: it has no planner",
    (REFUND, _F.MISSING_EVIDENCE): "the refund agent delivers no verified report",
    (REFUND, _F.CONFLICTING_SOURCES): "the refund agent reads one payment system: no sources to conflict",
    (PAYMENT, _F.PERMISSION_DENIED): "the payment agent's tools require no permission: there is nothing to deny",
}
# Faults an agent could meet that nothing injects yet.
_WHY_NOT: Final[dict[tuple[str, SourceFault], str]] = {
    (LEDGER, _F.PAUSE_RESUME): "the ledger storm never pauses a run (the other agents are paused at random)",
    (LEDGER, _F.TIMEOUT_ONCE): "the ledger's tools have no once-then-recover timeout",
    (LEDGER, _F.THREE_FAILURES): "the ledger's tools do not fail three times in a row",
    (LEDGER, _F.PERMISSION_DENIED): "the ledger agent holds every permission its tools need",
    (LEDGER, _F.BUDGET_EXHAUSTED): "the storm's ledger runs stay within budget",
    ("blog", _F.TIMEOUT_ONCE): "the blog's materials are local: no tool variant times out",
    ("blog", _F.THREE_FAILURES): "the blog's materials are local: no tool variant fails",
    ("blog", _F.SAME_SEARCH): "the blog's scripted model reads each material once; no repeating variant",
    ("blog", _F.PROMPT_INJECTION): "no blog material set carries a planted instruction",
    (REFUND, _F.THREE_FAILURES): "the refund demo's payment system loses one answer (timeout-once), never three",
    (REFUND, _F.PROMPT_INJECTION): "no order record carries a planted instruction",
    (PAYMENT, _F.TIMEOUT_ONCE): "the payment demo's search times out persistently (three-failures), never once",
    (PAYMENT, _F.SAME_SEARCH): "the payment demo's worker does not repeat a search",
    (PAYMENT, _F.HIGH_RISK_LOW_CONFIDENCE): "the payment demo has no low-confidence variant",
}


class Cell(BaseModel):
    """One agent x fault cell: runs where the fault was observed, runs where it never happened, kills."""

    model_config = ConfigDict(frozen=True)

    agent: str
    fault: SourceFault
    coverage: Coverage
    runs: int = 0
    unobserved: int = 0
    kills: int = 0
    seconds: float = 0.0
    reason: str = ""


class CampaignReport(BaseModel):
    """The campaign's cells, the ids of every run it made (the audit reads them), the storm's figures and
    what the domains witnessed (side effects performed twice under one key: the ledger's and the refund
    book's own rows, which no runtime record can hide)."""

    model_config = ConfigDict(frozen=True)

    store: str
    cells: list[Cell]
    run_ids: list[str]
    storm: dict[str, Any]
    witnessed_duplicates: int = 0
    errors: list[str] = Field(default_factory=list)  # runs the campaign could not drive to a stop, and why

    def covered(self) -> list[tuple[str, str]]:
        """The agent x fault cells that ran."""
        return [(c.agent, c.fault.value) for c in self.cells if c.coverage is Coverage.RAN]


class Campaign:
    """Runs the table on one new store: the ledger storm first, then every scenario ``size`` times.

    ``only`` limits the table to these faults and ``agents_only`` to these agents (the storm runs only
    when the ledger agent and a storm fault are both in): a quicker campaign for a test that switches one
    protection off. The long payment run is SIGKILLed at every boundary from ``size`` 3; below that at
    ``size`` + 1 of them, chosen by the seed (the other agents meet every boundary at every size).
    """

    def __init__(
        self,
        db: str,
        agents: AgentRegistry,
        *,
        size: int = 1,
        seed: int = 1,
        storm_kills: int = 15,
        only: Iterable[SourceFault] | None = None,
        agents_only: Iterable[str] | None = None,
        workdir: str | None = None,
    ):
        self.db = db
        self.agents = agents
        self.size = size
        self.rng = random.Random(seed)
        self.seed = seed
        self.storm_kills = storm_kills
        self.only = None if only is None else frozenset(only)
        self.agents_only = None if agents_only is None else frozenset(agents_only)
        self.errors: list[str] = []
        self.lease = LeasePolicy(ttl_s=0.6, heartbeat_s=0.2)
        self.book = str(Path(workdir or tempfile.mkdtemp(prefix="stateward-campaign-")) / "refund-book.db")

    def scenarios(self) -> list[Scenario]:
        """The rows this campaign runs: the table, limited to ``only``, for the agents registered here."""
        rows = [s for s in SCENARIOS if (s.builder or s.agent) in self.agents and self._selected(s.agent, s.fault)]
        heavy = [s for s in rows if s.agent == PAYMENT and s.fault is _F.SIGKILL_AT_BOUNDARY]
        if self.size < 3 and heavy:
            keep = random.Random(self.seed).sample(heavy, min(len(heavy), self.size + 1))
            rows = [s for s in rows if s not in heavy or s in keep]
        return rows

    def _selected(self, agent: str, fault: SourceFault) -> bool:
        return (self.only is None or fault in self.only) and (self.agents_only is None or agent in self.agents_only)

    def run(self) -> CampaignReport:
        """Storm, scenarios, then the cells: ran, skipped, not applicable or not covered."""
        started = time.monotonic()
        storm_runs = 0
        storm: dict[str, Any] = {"kills": 0, "duplicate_side_effects": 0}
        if any(self._selected(LEDGER, f) for f in STORM_FAULTS):
            from stateward.chaos.harness import ChaosConfig, Harness

            storm_runs = 4 + 4 * self.size
            config = ChaosConfig(db=self.db, runs=storm_runs, kills=self.storm_kills * self.size, seed=self.seed)
            storm = Harness(config).run()
        ids: list[str] = []
        if storm_runs:
            with closing(open_store(self.db)) as store:
                ids = [r.run_id for r in store.list_runs(limit=storm_runs + 10)]
        storm_s = time.monotonic() - started
        tally: dict[tuple[str, SourceFault], list[float]] = {
            (LEDGER, f): [storm_runs, 0, storm["kills"], storm_s]
            for f in STORM_FAULTS
            if storm_runs and self._selected(LEDGER, f)
        }
        for scenario in self.scenarios():
            for _ in range(self.size):
                began = time.monotonic()
                run_id, seen, killed = self._one(scenario)
                ids.append(run_id)
                cell = tally.setdefault((scenario.agent, scenario.fault), [0, 0, 0, 0.0])
                cell[0 if seen else 1] += 1
                cell[2] += killed
                cell[3] += time.monotonic() - began
        witnessed = int(storm.get("duplicate_side_effects", 0)) + self._book_duplicates()
        return CampaignReport(
            store=self.db,
            cells=self._cells(tally),
            run_ids=ids,
            storm=storm,
            witnessed_duplicates=witnessed,
            errors=self.errors,
        )

    def _book_duplicates(self) -> int:
        """Refunds the refund agent's payment system performed twice under one key. The book (its ``book``
        parameter, a SQLite file the campaign names) never deduplicates: its rows are the domain's witness."""
        if not Path(self.book).exists():
            return 0
        with closing(sqlite3.connect(self.book, timeout=30)) as db:
            rows = db.execute("SELECT COUNT(*) FROM refunds GROUP BY key HAVING COUNT(*) > 1").fetchall()
        return sum(int(n) - 1 for (n,) in rows)

    def _params(self, scenario: Scenario) -> dict[str, Any]:
        return {**scenario.params, "book": self.book} if scenario.agent == REFUND else dict(scenario.params)

    def _runtime(self) -> Runtime:
        return Runtime(open_store(self.db), lease=self.lease, agents=self.agents, owner="campaign")

    def _one(self, scenario: Scenario) -> tuple[str, bool, bool]:
        """One run of ``scenario``: its id, whether its fault was observed, whether a driver was killed."""
        agent = self.agents.create(scenario.builder or scenario.agent, self._params(scenario))
        with closing(self._runtime()) as runtime:
            run_id = runtime.submit(agent, scenario.goal).run_id
            paused = (scenario.pause or scenario.resume_race) and self._pause(runtime, run_id)
            if scenario.pause and paused:
                runtime.resume(run_id)
        # No store of this process is open across a fork: a child must not inherit a lock that one of its
        # threads (the WAL checkpointer's connect, a connection pool's worker) held at the fork.
        killed = raced = False
        # An approval boundary is met once per answer: the first arrival; any other, the first or second.
        nth = scenario.nth or (1 if (scenario.kill_at or "").startswith("approval") else self.rng.randint(1, 2))
        if scenario.kill_at is not None:
            killed = kill_child(self.db, self.agents, run_id, scenario.kill_at, nth, self.lease, _finish)
        elif scenario.race_at is not None:
            raced = race(self.db, self.agents, run_id, scenario.race_at, nth, self.lease, _finish)
        elif scenario.resume_race and paused:
            raced = resume_race(self.db, self.agents, run_id, self.lease)
        with closing(self._runtime()) as runtime:
            try:
                state = _finish(runtime, run_id, time.monotonic() + 4 * CHILD_TIMEOUT_S)
            except StatewardError as exc:  # the audit reads what the run left; the report names the refusal
                self.errors.append(f"{scenario.agent}/{scenario.fault.value}: {exc.code}: {exc.message}"[:300])
                state = runtime.get(run_id)
            events = runtime.store.read_events(run_id)
        return run_id, self._seen(scenario, state, events, killed, raced), killed

    @staticmethod
    def _seen(scenario: Scenario, state: RunState, events: list[Event], killed: bool, raced: bool) -> bool:
        """Whether the run met the scenario's fault, by its own records."""
        if scenario.kill_at is not None:
            return killed
        if scenario.race_at is not None:
            return raced and observe.two_lease_holders(state, events)
        if scenario.resume_race:
            return raced and observe.paused_and_resumed(state, events)
        observer = OBSERVERS.get(scenario.fault)
        return observer is not None and observer(state, events)

    def _pause(self, runtime: Runtime, run_id: str) -> bool:
        """Pause after one to three steps (answering a wait on the way); True when the run is PAUSED."""
        for _ in range(self.rng.randint(1, 3)):
            if self._answered(runtime, run_id) is not RunStatus.RUNNING:
                break
            runtime.step(run_id)
        if self._answered(runtime, run_id) is not RunStatus.RUNNING:
            return False
        return runtime.pause(run_id).status is RunStatus.PAUSED

    @staticmethod
    def _answered(runtime: Runtime, run_id: str) -> RunStatus:
        """The run's status once an open approval is answered (without driving on)."""
        state = runtime.get(run_id)
        if state.status is RunStatus.WAITING_FOR_USER:
            state = _finish(runtime, run_id, time.monotonic() + CHILD_TIMEOUT_S, answers=1, drive=False)
        return state.status

    def _cells(self, tally: dict[tuple[str, SourceFault], list[float]]) -> list[Cell]:
        return [
            self._cell(agent, fault, tally.get((agent, fault))) for agent in CAMPAIGN_AGENTS for fault in SourceFault
        ]

    def _cell(self, agent: str, fault: SourceFault, ran: list[float] | None) -> Cell:
        if ran is not None and ran[0] > 0:
            counts = {"runs": int(ran[0]), "unobserved": int(ran[1]), "kills": int(ran[2]), "seconds": round(ran[3], 2)}
            return Cell(agent=agent, fault=fault, coverage=Coverage.RAN, **counts)
        if ran is not None:
            why = f"injected in {int(ran[1])} run(s) and never observed in their records"
            return Cell(agent=agent, fault=fault, coverage=Coverage.NOT_COVERED, unobserved=int(ran[1]), reason=why)
        if (agent, fault) in NOT_APPLICABLE:
            return Cell(agent=agent, fault=fault, coverage=Coverage.NOT_APPLICABLE, reason=NOT_APPLICABLE[agent, fault])
        builders = {s.builder or s.agent for s in SCENARIOS if s.agent == agent and s.fault is fault}
        expressed = bool(builders)
        if expressed and not any(b in self.agents for b in builders):
            why = f"agent {sorted(builders)[0]!r} is not registered in this process (install stateward-demos)"
            return Cell(agent=agent, fault=fault, coverage=Coverage.SKIPPED, reason=why)
        if expressed or (agent == LEDGER and fault in STORM_FAULTS):  # left out by only / agents_only
            return Cell(agent=agent, fault=fault, coverage=Coverage.NOT_COVERED, reason="left out of this campaign")
        why = _WHY_NOT.get((agent, fault), f"nothing injects this fault into {agent!r} yet")
        return Cell(agent=agent, fault=fault, coverage=Coverage.NOT_COVERED, reason=why)
