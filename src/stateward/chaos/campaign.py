"""The fault-injection campaign behind ``stateward gates``: one table of agent x fault, run on one store.

Agents are named by their registered name and built through the process's :class:`AgentRegistry`
(the library never imports the demos: their agents arrive through the ``stateward.agents`` entry
point). A scenario whose agent this process cannot build is reported ``skipped``; a fault an agent
cannot meet is ``not_applicable`` with the reason; a fault no agent expresses yet is ``not_covered``.
A cell ``ran`` only if at least one of its runs shows the fault in its own records (chaos/observe.py);
injected runs that never met it are counted as ``unobserved``. Only ``ran`` cells count.

The ledger agent's process faults run under the chaos storm (forked workers SIGKILLed at random and at
every persistence boundary, SIGSTOPped past the lease TTL so two workers meet one run, approvers dying);
its other faults are table rows. Every scenario runs in this process, except crashes and races
(chaos/forked.py): a forked child drives the run and SIGKILLs itself at the named persistence boundary,
or freezes there while a second worker process takes the run over; this process then finishes the run.

Every forked child has a deadline (``child_timeout_s``): one still running at it is killed and reported as
a :class:`LivenessFailure` of its cell, the campaign runs no further scenario, and ``gates`` exits
non-zero; nothing waits on a hung child.
``quick`` keeps each cell but samples its rows (two persistence boundaries per agent, together covering
all of them; one row of each other cell): CI's second store meets every cell in a fraction of the time.
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
from stateward.chaos.forked import CHILD_TIMEOUT_S, ChildWatch, HungChild, kill_child, race, resume_race
from stateward.chaos.forked import finish_with as _finish
from stateward.core.errors import StatewardError
from stateward.core.events import Event
from stateward.core.state import RunState
from stateward.core.status import RunStatus
from stateward.runtime.agent_registry import AgentRegistry
from stateward.runtime.faults import BOUNDARIES
from stateward.runtime.leases import LeasePolicy
from stateward.runtime.runtime import Runtime
from stateward.store.backends import open_store


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
_LEDGER_GOAL: Final = "post three entries"
SCENARIOS: Final[tuple[Scenario, ...]] = (
    *_process_rows("blog", _BLOG_GOAL),
    Scenario(agent="blog", fault=_F.BUDGET_EXHAUSTED, goal=_BLOG_GOAL, params={"max_steps": 3}),
    Scenario(agent="blog", fault=_F.TIMEOUT_ONCE, goal=_BLOG_GOAL, params={"fault": "timeout-once"}),
    Scenario(agent="blog", fault=_F.SAME_SEARCH, goal=_BLOG_GOAL, params={"fault": "same-search"}),
    Scenario(agent="blog", fault=_F.PROMPT_INJECTION, goal=_BLOG_GOAL, params={"fault": "injection"}),
    # The refund run's second tool call is the side-effecting refund: crash right after it.
    *_process_rows(REFUND, _REFUND_GOAL, crash_nth=2),
    Scenario(agent=REFUND, fault=_F.TIMEOUT_ONCE, goal=_REFUND_GOAL, params={"fault": "timeout-once"}),
    Scenario(agent=REFUND, fault=_F.PERMISSION_DENIED, goal=_REFUND_GOAL, params={"fault": "permission-denied"}),
    Scenario(agent=REFUND, fault=_F.SAME_SEARCH, goal=_REFUND_GOAL, params={"fault": "same-search"}),
    Scenario(agent=REFUND, fault=_F.HIGH_RISK_LOW_CONFIDENCE, goal=_REFUND_GOAL,
             params={"fault": "high-risk-low-confidence"}),
    Scenario(agent=REFUND, fault=_F.BUDGET_EXHAUSTED, goal=_REFUND_GOAL, params={"max_steps": 2}),
    Scenario(agent=REFUND, fault=_F.PROMPT_INJECTION, goal=_REFUND_GOAL, params={"fault": "injection"}),
    *_process_rows(PAYMENT, _PAY_GOAL),
    Scenario(agent=PAYMENT, fault=_F.CONFLICTING_SOURCES, goal=_PAY_GOAL, params={"fault": "authority-conflict"}),
    Scenario(agent=PAYMENT, fault=_F.BUDGET_EXHAUSTED, goal=_PAY_GOAL, params={"fault": "budget"}),
    Scenario(agent=PAYMENT, fault=_F.PROMPT_INJECTION, goal=_PAY_GOAL, params={"fault": "injection"}),
    # The baseline's first draft has a high-risk claim citing nothing; verification must catch it.
    Scenario(agent=PAYMENT, fault=_F.MISSING_EVIDENCE, goal=_PAY_GOAL),
    # The planner's first plan has a dependency cycle: a variant the payment demo registers by its own name.
    Scenario(agent=PAYMENT, fault=_F.PLAN_CYCLE, goal=_PAY_GOAL, builder="payment-migration-plan-cycle"),
    Scenario(agent=PAYMENT, fault=_F.TIMEOUT_ONCE, goal=_PAY_GOAL, params={"fault": "doc-search-timeout-once"}),
    Scenario(agent=PAYMENT, fault=_F.SAME_SEARCH, goal=_PAY_GOAL, params={"fault": "same-search"}),
    Scenario(agent=PAYMENT, fault=_F.HIGH_RISK_LOW_CONFIDENCE, goal=_PAY_GOAL,
             params={"fault": "high-risk-low-confidence"}),
    # The ledger's table rows (its process faults run under the storm). The campaign adds db, seed and index.
    Scenario(agent=LEDGER, fault=_F.TIMEOUT_ONCE, goal=_LEDGER_GOAL, params={"fault": "timeout-once"}),
    Scenario(agent=LEDGER, fault=_F.PERMISSION_DENIED, goal=_LEDGER_GOAL, params={"fault": "permission-denied"}),
    Scenario(agent=LEDGER, fault=_F.BUDGET_EXHAUSTED, goal=_LEDGER_GOAL, params={"max_steps": 3}),
    Scenario(agent=LEDGER, fault=_F.PAUSE_RESUME, goal=_LEDGER_GOAL, pause=True),
    # Last: three failures in a row open the failing tool's circuit breaker, which the store keeps (for its
    # cooldown) for every run after it.
    Scenario(agent=LEDGER, fault=_F.THREE_FAILURES, goal=_LEDGER_GOAL, params={"fault": "mirror-down"}),
    Scenario(agent="blog", fault=_F.THREE_FAILURES, goal=_BLOG_GOAL, params={"fault": "materials-down"}),
    Scenario(agent=REFUND, fault=_F.THREE_FAILURES, goal=_REFUND_GOAL, params={"fault": "payments-down"}),
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
# Faults an agent could meet that nothing injects yet (none today: every cell runs or does not apply).
_WHY_NOT: Final[dict[tuple[str, SourceFault], str]] = {}


class LivenessFailure(BaseModel):
    """A forked child of a cell still running at its deadline (killed, never waited for), or a storm that did
    not finish: the campaign did not stay live, whatever the gates say."""

    model_config = ConfigDict(frozen=True)

    agent: str
    fault: SourceFault
    role: str  # driver, racer, resumer (forked drivers of one run); worker, approver, storm (the ledger storm)
    waited_s: float
    detail: str


class Cell(BaseModel):
    """One agent x fault cell: runs where the fault was observed, runs where it never happened, kills."""

    model_config = ConfigDict(frozen=True)

    agent: str
    fault: SourceFault
    coverage: Coverage
    runs: int = 0
    unobserved: int = 0
    kills: int = 0
    hung: int = 0  # forked children killed at their deadline (each is a liveness failure)
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
    liveness_failures: list[LivenessFailure] = Field(default_factory=list)

    def covered(self) -> list[tuple[str, str]]:
        """The agent x fault cells that ran."""
        return [(c.agent, c.fault.value) for c in self.cells if c.coverage is Coverage.RAN]


class _Tally:
    """What the runs of one cell came to: runs that showed the fault, runs that did not, kills, hung
    children and seconds."""

    def __init__(self) -> None:
        self.seen = 0
        self.unobserved = 0
        self.kills = 0
        self.hung = 0
        self.seconds = 0.0


class Campaign:
    """Runs the table on one new store: the ledger storm first, then every scenario ``size`` times.

    ``only`` limits the table to these faults and ``agents_only`` to these agents (the storm runs only
    when the ledger agent and a storm fault are both in): a quicker campaign for a test that switches one
    protection off. The long payment run is SIGKILLed at every boundary from ``size`` 3; below that at
    ``size`` + 1 of them, chosen by the seed (the other agents meet every boundary at every size).
    ``quick`` samples every cell's rows instead (see the module docstring). Every forked child gets
    ``child_timeout_s``; the storm gives up after ``storm_seconds`` (default: 180 s + 60 s per size step).
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
        quick: bool = False,
        child_timeout_s: float = CHILD_TIMEOUT_S,
        storm_seconds: float | None = None,
    ):
        self.db = db
        self.agents = agents
        self.size = size
        self.rng = random.Random(seed)
        self.seed = seed
        self.storm_kills = storm_kills
        self.only = None if only is None else frozenset(only)
        self.agents_only = None if agents_only is None else frozenset(agents_only)
        self.quick = quick
        self.child_timeout_s = child_timeout_s
        self.storm_seconds = storm_seconds or 180.0 + 60.0 * size  # the storm's runs and kills grow with size
        self.errors: list[str] = []
        self.liveness: list[LivenessFailure] = []
        self.lease = LeasePolicy(ttl_s=0.6, heartbeat_s=0.2)
        self.book = str(Path(workdir or tempfile.mkdtemp(prefix="stateward-campaign-")) / "refund-book.db")
        self._ledger_runs = 0

    def scenarios(self) -> list[Scenario]:
        """The rows this campaign runs: the table, limited to ``only``, for the agents registered here."""
        rows = [s for s in SCENARIOS if (s.builder or s.agent) in self.agents and self._selected(s.agent, s.fault)]
        if self.quick:
            return self._sampled(rows)
        heavy = [s for s in rows if s.agent == PAYMENT and s.fault is _F.SIGKILL_AT_BOUNDARY]
        if self.size < 3 and heavy:
            keep = random.Random(self.seed).sample(heavy, min(len(heavy), self.size + 1))
            rows = [s for s in rows if s not in heavy or s in keep]
        return rows

    def _sampled(self, rows: list[Scenario]) -> list[Scenario]:
        """Every cell, fewer rows: two boundaries per agent (rotated by agent and seed, so the agents together
        meet every boundary) and one row, chosen by the seed and the agent, of each other cell."""
        by_cell: dict[tuple[str, SourceFault], list[Scenario]] = {}
        for row in rows:
            by_cell.setdefault((row.agent, row.fault), []).append(row)
        keep: set[int] = set()
        for (agent, fault), cell in by_cell.items():
            if fault is _F.SIGKILL_AT_BOUNDARY:
                first = 2 * CAMPAIGN_AGENTS.index(agent) + self.seed
                chosen = {BOUNDARIES[(first + i) % len(BOUNDARIES)] for i in range(2)}
                keep.update(id(r) for r in cell if r.kill_at in chosen)
            else:  # rotated by agent too: two agents' two-worker cells meet both races
                keep.add(id(cell[(self.seed + CAMPAIGN_AGENTS.index(agent)) % len(cell)]))
        return [r for r in rows if id(r) in keep]

    def _selected(self, agent: str, fault: SourceFault) -> bool:
        return (self.only is None or fault in self.only) and (self.agents_only is None or agent in self.agents_only)

    def run(self) -> CampaignReport:
        """Storm, scenarios, then the cells: ran, skipped, not applicable or not covered."""
        tally: dict[tuple[str, SourceFault], _Tally] = {}
        storm, ids = self._storm(tally)
        for scenario in self.scenarios():
            if self.liveness:
                break  # a hung child is a breach already; more forks would only wait on more hangs
            for _ in range(self.size):
                began = time.monotonic()
                run_id, seen, killed, hung = self._one(scenario)
                ids.append(run_id)
                cell = tally.setdefault((scenario.agent, scenario.fault), _Tally())
                cell.seen += seen
                cell.unobserved += not seen
                cell.kills += killed
                cell.hung += len(hung)
                cell.seconds += time.monotonic() - began
                self._hung(scenario.agent, scenario.fault, hung, f"run {run_id}")
        witnessed = self._ledger_duplicates(storm) + self._book_duplicates()
        return CampaignReport(
            store=self.db,
            cells=self._cells(tally),
            run_ids=ids,
            storm=storm,
            witnessed_duplicates=witnessed,
            errors=self.errors,
            liveness_failures=self.liveness,
        )

    def _storm(self, tally: dict[tuple[str, SourceFault], _Tally]) -> tuple[dict[str, Any], list[str]]:
        """The ledger storm (when selected): its report and run ids; its cells go into ``tally``."""
        if not any(self._selected(LEDGER, f) for f in STORM_FAULTS):
            return {"kills": 0, "duplicate_side_effects": 0}, []
        from stateward.chaos.config import ChaosConfig
        from stateward.chaos.harness import Harness

        started = time.monotonic()
        runs = 4 + 4 * self.size
        config = ChaosConfig(
            db=self.db,
            runs=runs,
            kills=self.storm_kills * self.size,
            seed=self.seed,
            max_seconds=self.storm_seconds,
            child_deadline_s=self.child_timeout_s,
            worker_lifetime_s=self.child_timeout_s / 3,
        )
        storm = Harness(config).run()
        with closing(open_store(self.db)) as store:
            ids = [r.run_id for r in store.list_runs(limit=runs + 10)]
        hung = [HungChild(**h) for h in storm.get("hung_children", ())]
        for fault in STORM_FAULTS:
            if self._selected(LEDGER, fault):
                cell = tally[(LEDGER, fault)] = _Tally()
                cell.seen, cell.kills, cell.hung = runs, int(storm["kills"]), len(hung)
                cell.seconds = time.monotonic() - started
        self._hung(LEDGER, _F.SIGKILL_AT_BOUNDARY, hung, "the ledger storm")
        if storm.get("timed_out"):
            detail = f"the ledger storm had not finished its runs after {self.storm_seconds:.0f} s"
            self.liveness.append(
                LivenessFailure(agent=LEDGER, fault=_F.SIGKILL_AT_BOUNDARY, role="storm", waited_s=0, detail=detail)
            )
        return storm, ids

    def _hung(self, agent: str, fault: SourceFault, hung: Iterable[HungChild], where: str) -> None:
        for child in hung:
            detail = f"forked {child.role} (pid {child.pid}) of {where} still running at its deadline: killed"
            self.liveness.append(
                LivenessFailure(agent=agent, fault=fault, role=child.role, waited_s=child.waited_s, detail=detail)
            )

    def _ledger_duplicates(self, storm: dict[str, Any]) -> int:
        """Entries the ledger posted twice for one run and operation, over every ledger run (the storm's and
        the table's); the storm's own count when the table ran none."""
        if not self._ledger_runs:
            return int(storm.get("duplicate_side_effects", 0))
        from stateward.chaos.ledger import ledger_for

        ledger = ledger_for(self.db)
        try:
            dup = ledger.rows("SELECT run_id, op, COUNT(*) FROM chaos_ledger GROUP BY run_id, op HAVING COUNT(*) > 1")
        finally:
            ledger.close()
        return sum(int(n) - 1 for _, _, n in dup)

    def _book_duplicates(self) -> int:
        """Refunds the refund agent's payment system performed twice under one key. The book (its ``book``
        parameter, a SQLite file the campaign names) never deduplicates: its rows are the domain's witness."""
        if not Path(self.book).exists():
            return 0
        with closing(sqlite3.connect(self.book, timeout=30)) as db:
            rows = db.execute("SELECT COUNT(*) FROM refunds GROUP BY key HAVING COUNT(*) > 1").fetchall()
        return sum(int(n) - 1 for (n,) in rows)

    def _params(self, scenario: Scenario) -> dict[str, Any]:
        if scenario.agent == REFUND:
            return {**scenario.params, "book": self.book}
        if scenario.agent == LEDGER:  # its ledger lives in the campaign's database
            from stateward.chaos.ledger import ledger_for

            if not self._ledger_runs:
                with closing(open_store(self.db)):  # first: a store refuses a file that has other tables
                    pass
                ledger_for(self.db).setup()
            self._ledger_runs += 1
            return {**scenario.params, "db": self.db, "seed": self.seed, "index": 1000 + self._ledger_runs}
        return dict(scenario.params)

    def _runtime(self) -> Runtime:
        return Runtime(open_store(self.db), lease=self.lease, agents=self.agents, owner="campaign")

    def _one(self, scenario: Scenario) -> tuple[str, bool, bool, list[HungChild]]:
        """One run of ``scenario``: its id, whether its fault was observed, whether a driver was killed, and
        the forked children that hung."""
        agent = self.agents.create(scenario.builder or scenario.agent, self._params(scenario))
        with closing(self._runtime()) as runtime:
            run_id = runtime.submit(agent, scenario.goal).run_id
            paused = (scenario.pause or scenario.resume_race) and self._pause(runtime, run_id)
            if scenario.pause and paused:
                runtime.resume(run_id)
        # No store of this process is open across a fork: a child must not inherit a lock that one of its
        # threads (the WAL checkpointer's connect, a connection pool's worker) held at the fork.
        killed = raced = False
        watch = ChildWatch(self.child_timeout_s)
        # An approval boundary is met once per answer: the first arrival; any other, the first or second.
        nth = scenario.nth or (1 if (scenario.kill_at or "").startswith("approval") else self.rng.randint(1, 2))
        if scenario.kill_at is not None:
            killed = kill_child(self.db, self.agents, run_id, scenario.kill_at, nth, self.lease, _finish, watch)
        elif scenario.race_at is not None:
            raced = race(self.db, self.agents, run_id, scenario.race_at, nth, self.lease, _finish, watch)
        elif scenario.resume_race and paused:
            raced = resume_race(self.db, self.agents, run_id, self.lease, watch)
        with closing(self._runtime()) as runtime:
            try:
                state = _finish(runtime, run_id, time.monotonic() + 4 * self.child_timeout_s)
            except StatewardError as exc:  # the audit reads what the run left; the report names the refusal
                self.errors.append(f"{scenario.agent}/{scenario.fault.value}: {exc.code}: {exc.message}"[:300])
                state = runtime.get(run_id)
            events = runtime.store.read_events(run_id)
        if scenario.agent == LEDGER:
            from stateward.chaos.ledger import ledger_for

            ledger_for(self.db).close()  # no ledger connection of this process is open across a later fork
        return run_id, self._seen(scenario, state, events, killed, raced), killed, watch.hung

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

    def _cells(self, tally: dict[tuple[str, SourceFault], _Tally]) -> list[Cell]:
        return [
            self._cell(agent, fault, tally.get((agent, fault))) for agent in CAMPAIGN_AGENTS for fault in SourceFault
        ]

    def _cell(self, agent: str, fault: SourceFault, ran: _Tally | None) -> Cell:
        if ran is not None and ran.seen > 0:
            counts = {"runs": ran.seen, "unobserved": ran.unobserved, "kills": ran.kills, "hung": ran.hung}
            return Cell(agent=agent, fault=fault, coverage=Coverage.RAN, seconds=round(ran.seconds, 2), **counts)
        if ran is not None:
            why = f"injected in {ran.unobserved} run(s) and never observed in their records"
            return Cell(
                agent=agent, fault=fault, coverage=Coverage.NOT_COVERED, unobserved=ran.unobserved, hung=ran.hung,
                reason=why,
            )  # fmt: skip
        if (agent, fault) in NOT_APPLICABLE:
            return Cell(agent=agent, fault=fault, coverage=Coverage.NOT_APPLICABLE, reason=NOT_APPLICABLE[agent, fault])
        builders = {s.builder or s.agent for s in SCENARIOS if s.agent == agent and s.fault is fault}
        expressed = bool(builders)
        if expressed and not any(b in self.agents for b in builders):
            why = f"agent {sorted(builders)[0]!r} is not registered in this process (install stateward-demos)"
            return Cell(agent=agent, fault=fault, coverage=Coverage.SKIPPED, reason=why)
        if self.liveness and self._selected(agent, fault):
            why = "not run: the campaign stopped at its first liveness failure"
            return Cell(agent=agent, fault=fault, coverage=Coverage.NOT_COVERED, reason=why)
        if expressed or (agent == LEDGER and fault in STORM_FAULTS):  # left out by only / agents_only
            return Cell(agent=agent, fault=fault, coverage=Coverage.NOT_COVERED, reason="left out of this campaign")
        why = _WHY_NOT.get((agent, fault), f"nothing injects this fault into {agent!r} yet")
        return Cell(agent=agent, fault=fault, coverage=Coverage.NOT_COVERED, reason=why)
