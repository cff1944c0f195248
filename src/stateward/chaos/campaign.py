"""The fault-injection campaign behind ``stateward gates``: one table of agent x fault, run on one store.

Agents are named by their registered name and built through the process's :class:`AgentRegistry`
(the library never imports the demos: their agents arrive through the ``stateward.agents`` entry
point). A scenario whose agent this process cannot build is reported ``skipped``; a source fault no
agent can express yet is reported ``not_covered`` with the reason. Neither is ever counted as passed.

The ledger agent runs under the chaos storm (forked workers SIGKILLed at random and at every persistence
boundary, SIGSTOPped past the lease TTL so two workers meet one run, approvers dying). Every other
scenario runs in this process, except a crash: a forked child drives the run and SIGKILLs itself at the
named persistence boundary; this process then takes the run over once the child's lease has expired.
"""

from __future__ import annotations

import os
import random
import signal
import time
from enum import StrEnum
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field

from stateward.core.errors import StatewardError
from stateward.core.state import RunState
from stateward.core.status import RunStatus
from stateward.runtime.agent_registry import AgentRegistry
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
    """What became of one agent x fault cell: it ran, its agent is not installed, or nothing expresses it."""

    RAN = "ran"
    SKIPPED = "skipped"
    NOT_COVERED = "not_covered"


LEDGER: Final = "chaos-ledger"
CHILD_TIMEOUT_S: Final = 30.0
BOUNDARIES: Final = ("after_tool_before_record", "before_commit", "after_commit", "approval_before_commit")
CAMPAIGN_AGENTS: Final = (LEDGER, "blog", "refund", "payment-migration")


class Scenario(BaseModel):
    """One row of the table: a registered agent, its JSON params, the fault, and how the run is disturbed."""

    model_config = ConfigDict(frozen=True)

    agent: str
    fault: SourceFault
    params: dict[str, Any] = Field(default_factory=dict)
    goal: str = "campaign run"
    kill_at: str | None = None  # a persistence boundary where a forked driver SIGKILLs itself
    pause: bool = False  # pause after a random number of steps, then resume


def _boundary_rows(agent: str, goal: str) -> list[Scenario]:
    rows = [
        Scenario(agent=agent, fault=SourceFault.SIGKILL_AT_BOUNDARY, goal=goal, kill_at=point) for point in BOUNDARIES
    ]
    rows.append(Scenario(agent=agent, fault=SourceFault.CRASH_AFTER_TOOL, goal=goal, kill_at=BOUNDARIES[0]))
    rows.append(Scenario(agent=agent, fault=SourceFault.PAUSE_RESUME, goal=goal, pause=True))
    return rows


_PAY_GOAL: Final = "assess the Payment SDK v2 migration"
SCENARIOS: Final[tuple[Scenario, ...]] = (
    *_boundary_rows("blog", "write a blog brief"),
    *_boundary_rows("payment-migration", _PAY_GOAL),
    Scenario(agent="payment-migration", fault=SourceFault.THREE_FAILURES, goal=_PAY_GOAL,
             params={"fault": "doc-search-timeout"}),
    Scenario(agent="payment-migration", fault=SourceFault.CONFLICTING_SOURCES, goal=_PAY_GOAL,
             params={"fault": "authority-conflict"}),
    Scenario(agent="payment-migration", fault=SourceFault.BUDGET_EXHAUSTED, goal=_PAY_GOAL, params={"fault": "budget"}),
    Scenario(agent="payment-migration", fault=SourceFault.PROMPT_INJECTION, goal=_PAY_GOAL,
             params={"fault": "injection"}),
    # The baseline's first draft has a high-risk claim citing nothing; verification must catch it.
    Scenario(agent="payment-migration", fault=SourceFault.MISSING_EVIDENCE, goal=_PAY_GOAL),
)  # fmt: skip

# What the storm covers for the ledger agent (it runs under the storm, not as table rows).
STORM_FAULTS: Final = (
    SourceFault.SIGKILL_AT_BOUNDARY,
    SourceFault.CRASH_AFTER_TOOL,
    SourceFault.TWO_WORKERS,
)

# Why a cell has no scenario: said in the report, never counted as passed.
_WHY_NOT: Final[dict[SourceFault, str]] = {
    SourceFault.TIMEOUT_ONCE: "no registered agent has a tool that times out once and then recovers",
    SourceFault.PERMISSION_DENIED: "no registered agent proposes a tool outside its permissions",
    SourceFault.PLAN_CYCLE: "no registered agent's planner can be made to emit a cyclic plan",
    SourceFault.SAME_SEARCH: "no registered agent's scripted model repeats a search",
    SourceFault.HIGH_RISK_LOW_CONFIDENCE: "no registered agent has a low-confidence high-risk variant",
    SourceFault.TWO_WORKERS: "only the ledger storm runs two workers against one run",
}
# The storm races and kills workers but never pauses: crediting it with pause/resume would overstate it.
_LEDGER_WHY: Final[dict[SourceFault, str]] = {
    SourceFault.PAUSE_RESUME: "the ledger storm never pauses a run (blog and payment-migration are paused at random)",
}
_REFUND_WHY: Final = "the refund demo is a gateway scenario table, not a registered agent"


class Cell(BaseModel):
    """One agent x fault cell of the campaign and what became of it."""

    model_config = ConfigDict(frozen=True)

    agent: str
    fault: SourceFault
    coverage: Coverage
    runs: int = 0
    kills: int = 0
    reason: str = ""


class CampaignReport(BaseModel):
    """The campaign's cells, the ids of every run it made (the audit reads them) and the storm's figures."""

    model_config = ConfigDict(frozen=True)

    store: str
    cells: list[Cell]
    run_ids: list[str]
    storm: dict[str, Any]

    def covered(self) -> list[tuple[str, str]]:
        """The agent x fault cells that ran."""
        return [(c.agent, c.fault.value) for c in self.cells if c.coverage is Coverage.RAN]


def _finish(runtime: Runtime, run_id: str, deadline: float, answers: int = 6) -> RunState:
    """Drive the run to a stop, approving what it asks for (at most ``answers`` times)."""
    state = runtime.drive(run_id)
    while time.monotonic() < deadline:
        if state.status in (RunStatus.RUNNING, RunStatus.PAUSING):
            time.sleep(0.05)  # a dead driver's lease has yet to expire
            state = runtime.drive(run_id)
            continue
        open_requests = list(runtime.store.list_requests(run_id, open_only=True))
        if state.status is not RunStatus.WAITING_FOR_USER or not open_requests or answers == 0:
            return state
        answers -= 1
        try:
            state = runtime.approve(run_id, open_requests[0].request.request_id, by="campaign").state
        except StatewardError:  # a handoff takes a reply, not an approval: the run waits for a person
            return state
    return state


def _kill_child(db: str, agents: AgentRegistry, run_id: str, point: str, nth: int, lease: LeasePolicy) -> bool:
    """Fork a driver that SIGKILLs itself at the ``nth`` ``point``; True when it died that way."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 0
        try:
            from stateward.chaos.faults import KillAt

            killer = KillAt(point, nth)
            child = Runtime(open_store(db), lease=lease, agents=agents, faults=killer, owner=f"camp-{os.getpid()}")
            _finish(child, run_id, time.monotonic() + 60)
        except BaseException:
            code = 1
        os._exit(code)
    # A forked child can inherit a lock some thread of this process held: it is given a bounded time,
    # then killed by us, which is not counted as a kill at the boundary (this process takes over either way).
    deadline = time.monotonic() + CHILD_TIMEOUT_S
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return False
        time.sleep(0.02)


class Campaign:
    """Runs the table on one new store: the ledger storm first, then every scenario ``size`` times."""

    def __init__(self, db: str, agents: AgentRegistry, *, size: int = 1, seed: int = 1, storm_kills: int = 15):
        self.db = db
        self.agents = agents
        self.size = size
        self.rng = random.Random(seed)
        self.seed = seed
        self.storm_kills = storm_kills
        self.lease = LeasePolicy(ttl_s=0.6, heartbeat_s=0.2)

    def run(self) -> CampaignReport:
        """Storm, scenarios, then the cells: ran, skipped (agent not registered here) or not covered."""
        from stateward.chaos.harness import ChaosConfig, Harness

        storm_runs = 4 + 4 * self.size
        storm = Harness(
            ChaosConfig(db=self.db, runs=storm_runs, kills=self.storm_kills * self.size, seed=self.seed)
        ).run()
        runtime = Runtime(open_store(self.db), lease=self.lease, agents=self.agents, owner="campaign")
        ids = [r.run_id for r in runtime.store.list_runs(limit=storm_runs + 10)]
        tally: dict[tuple[str, SourceFault], list[int]] = {
            (LEDGER, f): [storm_runs, storm["kills"]] for f in STORM_FAULTS
        }
        try:
            for scenario in SCENARIOS:
                if scenario.agent not in self.agents:
                    continue
                for _ in range(self.size):
                    run_id, killed = self._one(runtime, scenario)
                    ids.append(run_id)
                    cell = tally.setdefault((scenario.agent, scenario.fault), [0, 0])
                    cell[0] += 1
                    cell[1] += killed
        finally:
            runtime.close()
        return CampaignReport(store=self.db, cells=self._cells(tally), run_ids=ids, storm=storm)

    def _one(self, runtime: Runtime, scenario: Scenario) -> tuple[str, bool]:
        agent = self.agents.create(scenario.agent, scenario.params)
        run_id = runtime.submit(agent, scenario.goal).run_id
        killed = False
        if scenario.kill_at is not None:
            nth = self.rng.randint(1, 2)
            killed = _kill_child(self.db, self.agents, run_id, scenario.kill_at, nth, self.lease)
        elif scenario.pause:
            for _ in range(self.rng.randint(1, 6)):
                if runtime.step(run_id).status is not RunStatus.RUNNING:
                    break
            if runtime.get(run_id).status is RunStatus.RUNNING:
                runtime.pause(run_id)
                runtime.resume(run_id)
        _finish(runtime, run_id, time.monotonic() + 120)
        return run_id, killed

    def _cells(self, tally: dict[tuple[str, SourceFault], list[int]]) -> list[Cell]:
        cells = []
        for agent in CAMPAIGN_AGENTS:
            for fault in SourceFault:
                ran = tally.get((agent, fault))
                if ran is not None:
                    cells.append(Cell(agent=agent, fault=fault, coverage=Coverage.RAN, runs=ran[0], kills=ran[1]))
                elif agent == "refund":
                    cells.append(Cell(agent=agent, fault=fault, coverage=Coverage.NOT_COVERED, reason=_REFUND_WHY))
                elif any(s.agent == agent and s.fault is fault for s in SCENARIOS):
                    why = f"agent {agent!r} is not registered in this process (install stateward-demos)"
                    cells.append(Cell(agent=agent, fault=fault, coverage=Coverage.SKIPPED, reason=why))
                else:
                    why = (_LEDGER_WHY if agent == LEDGER else _WHY_NOT).get(
                        fault, f"agent {agent!r} cannot express this fault"
                    )
                    cells.append(Cell(agent=agent, fault=fault, coverage=Coverage.NOT_COVERED, reason=why))
        return cells
