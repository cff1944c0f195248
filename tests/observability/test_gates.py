"""The eight gates, audited from records: every gate holds (with opportunities) on runs the Runtime drove,
and each one fails when its protection is switched off (records written around the Runtime, the
gateway, the journal or the lease fencing, as a build without that protection would write them)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from tests.observability.agents_for_metrics import AGENTS, refunder
from typer.testing import CliRunner

from stateward import RunStatus, Runtime
from stateward.cli.app import app
from stateward.core.events import EventType, NewEvent
from stateward.core.journal import SideEffectRecord
from stateward.core.state import RunState
from stateward.observability.gates import COUNT_GATES, RATE_GATE, audit
from stateward.store.records import StepWrite


def driven(db: Path) -> tuple[Runtime, str]:
    """A run the Runtime drove: a tool call, a wait, a pause and resume, an approval, a guarded side effect."""
    runtime = Runtime.open(str(db), agents=AGENTS)
    run = runtime.start(refunder(), "refund c-1")
    assert run.status is RunStatus.WAITING_FOR_USER
    runtime.approve(run.run_id, "approval_001", by="ann", drive=False)
    runtime.pause(run.run_id)
    assert runtime.resume(run.run_id).status is RunStatus.COMPLETED
    return runtime, run.run_id


def forge(runtime: Runtime, run_id: str, events: list[NewEvent], state: RunState | None = None) -> None:
    """Commit records straight to the store, under a fresh lease: nothing of the Runtime checks them."""
    current, seq = runtime.store.load_run_at(run_id)
    lease = runtime.store.acquire_lease(run_id, "forger", 30.0)
    runtime.store.commit_step(run_id, seq, StepWrite(state=state or current, events=events), lease)
    runtime.store.release_lease(lease)


def gate(runtime: Runtime, run_id: str, name: str) -> tuple[float, int]:
    found = next(g for g in audit(runtime.store, [run_id]).gates if g.name == name)
    return found.value, found.opportunities


def test_every_gate_holds_on_runs_the_runtime_drove_and_had_opportunities(tmp_path: Path) -> None:
    runtime, run_id = driven(tmp_path / "runs.db")
    report = audit(runtime.store, [run_id])
    assert report.passed and report.breaches() == [] and report.finished_or_waiting == 1.0
    chances = {g.name: g.opportunities for g in report.gates}
    for name in ("illegal_transitions", "unauthorized_tool_executions", "duplicate_side_effects", RATE_GATE):
        assert chances[name] > 0, name
    runtime.close()


def _illegal(runtime: Runtime, run_id: str) -> None:
    moved = {"state_before": "COMPLETED", "state_after": "RUNNING", "reason": "forged"}
    forge(runtime, run_id, [NewEvent(type=EventType.STATE_TRANSITION, payload=moved)])


def _unauthorized(runtime: Runtime, run_id: str) -> None:
    record = SideEffectRecord(
        idempotency_key="idem_no_admission",
        run_id=run_id,
        tool="refund",
        status="SUCCEEDED",
        updated_at=datetime.now(UTC),
    )
    runtime.store.put_side_effect(record)  # a handler that ran without passing the gateway


def _duplicate(runtime: Runtime, run_id: str) -> None:
    again = next(e for e in runtime.store.read_events(run_id) if e.type is EventType.TOOL_ATTEMPTED)
    forge(runtime, run_id, [NewEvent(type=EventType.TOOL_ATTEMPTED, payload=again.payload)])


def _no_evidence(runtime: Runtime, run_id: str) -> None:
    checks = [{"name": "claims_have_evidence", "verdict": "FAIL", "detail": "a bare claim"}]
    payload = {"artifact": "report:v1", "outcome": "DEGRADED_DELIVERY", "checks": checks}
    forge(runtime, run_id, [NewEvent(type=EventType.VERIFICATION_RECORDED, payload=payload)])


def _reset(runtime: Runtime, run_id: str) -> None:
    payload = {"by": "forger", "from_status": "PAUSED", "usage": {"steps": 0, "model_calls": 0}, "reconciled": []}
    forge(runtime, run_id, [NewEvent(type=EventType.RUN_RESUMED, payload=payload)])


def _unfenced(runtime: Runtime, run_id: str, db: Path) -> None:
    with sqlite3.connect(db) as conn:  # a write of a superseded holder that fencing would have refused
        conn.execute(
            "UPDATE event_batches SET lease_version = 1 WHERE seq = (SELECT MAX(seq) FROM event_batches)"
            " AND run_key = (SELECT run_key FROM runs WHERE run_id = ?)",
            (run_id,),
        )


def _unbounded(runtime: Runtime, run_id: str) -> None:
    state = runtime.get(run_id)
    over = state.model_copy(
        update={"usage": state.usage.model_copy(update={"steps": (state.budget.max_steps or 0) + 5})}
    )
    forge(runtime, run_id, [], state=over)


def _overspent(runtime: Runtime, run_id: str) -> None:
    state = runtime.get(run_id)  # a run that called tools past the bound it had (the gateway not counting)
    over = state.model_copy(update={"budget": state.budget.model_copy(update={"max_tool_calls": 0})})
    forge(runtime, run_id, [], state=over)


SWITCHED_OFF: dict[str, Callable[..., None]] = {
    "illegal_transitions": _illegal,
    "unauthorized_tool_executions": _unauthorized,
    "duplicate_side_effects": _duplicate,
    "high_risk_without_evidence": _no_evidence,
    "budget_resets": _reset,
    "double_executions": _unfenced,
    "unbounded_loops": _unbounded,
    "budget_breaches": _overspent,
    RATE_GATE: _reset,
}


def test_a_resume_of_a_waiting_run_is_an_illegal_transition(tmp_path: Path) -> None:
    """An operator's resume moves a paused run: one recorded from a wait skipped the answer it waited for."""
    runtime, run_id = driven(tmp_path / "runs.db")
    assert gate(runtime, run_id, "illegal_transitions")[0] == 0
    usage = runtime.get(run_id).usage.model_dump()
    payload = {"by": "racer", "from_status": "WAITING_FOR_USER", "usage": usage, "reconciled": []}
    forge(runtime, run_id, [NewEvent(type=EventType.RUN_RESUMED, payload=payload)])
    assert gate(runtime, run_id, "illegal_transitions")[0] == 1
    runtime.close()


def test_a_resume_with_fewer_steps_than_decisions_so_far_is_not_correct(tmp_path: Path) -> None:
    """Usage that did not go down between two events can still have been lost at the pause: a resume must
    carry at least as many steps as the decisions recorded before it."""
    runtime = Runtime.open(str(tmp_path / "runs.db"), agents=AGENTS)
    run = runtime.start(refunder(), "refund c-1")  # a lookup and a wait: two decisions recorded
    usage = {**runtime.get(run.run_id).usage.model_dump(), "steps": 0, "model_calls": 99, "tool_attempts": 99}
    payload = {"by": "forger", "from_status": "PAUSED", "usage": usage, "reconciled": []}
    forge(runtime, run.run_id, [NewEvent(type=EventType.RUN_RESUMED, payload=payload)])
    value, chances = gate(runtime, run.run_id, RATE_GATE)
    assert chances == 1 and value == 0.0
    runtime.close()


@pytest.mark.parametrize("name", [*COUNT_GATES, RATE_GATE])
def test_each_gate_fails_when_its_protection_is_off(tmp_path: Path, name: str) -> None:
    runtime, run_id = driven(tmp_path / "runs.db")
    if name == "double_executions":
        _unfenced(runtime, run_id, tmp_path / "runs.db")
    else:
        SWITCHED_OFF[name](runtime, run_id)
    report = audit(runtime.store, [run_id])
    broken = next(g for g in report.gates if g.name == name)
    assert not broken.holds and not report.passed and name in report.breaches()
    assert broken.value < 1.0 if name == RATE_GATE else broken.value >= 1
    runtime.close()


def test_the_cli_prints_every_gate_and_exits_non_zero_on_a_breach(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    runtime, run_id = driven(db)
    runtime.close()
    ok = CliRunner().invoke(app, ["gates", "--db", str(db), "--json"])
    assert ok.exit_code == 0, ok.output
    data = json.loads(ok.output)
    assert [g["name"] for g in data["gates"]] == [*COUNT_GATES, RATE_GATE] and data["passed"] is True
    runtime = Runtime.open(str(db), agents=AGENTS)
    _unauthorized(runtime, run_id)
    runtime.close()
    bad = CliRunner().invoke(app, ["gates", "--db", str(db), "--json"])
    assert bad.exit_code == 1 and json.loads(bad.output)["breaches"] == ["unauthorized_tool_executions"]


def test_every_agent_x_fault_cell_is_a_scenario_or_says_why_not() -> None:
    """The campaign's table answers for every fault on every agent: a scenario, the storm, or a reason
    (not applicable, or not covered yet); every scenario's fault has an observer that proves it happened."""
    from stateward.chaos.campaign import (
        _WHY_NOT,
        CAMPAIGN_AGENTS,
        LEDGER,
        NOT_APPLICABLE,
        OBSERVERS,
        SCENARIOS,
        STORM_FAULTS,
        SourceFault,
    )

    expressed = {(s.agent, s.fault) for s in SCENARIOS} | {(LEDGER, f) for f in STORM_FAULTS}
    for agent in CAMPAIGN_AGENTS:
        for fault in SourceFault:
            said = (agent, fault) in expressed or (agent, fault) in NOT_APPLICABLE or (agent, fault) in _WHY_NOT
            assert said, (agent, fault)
    assert not set(NOT_APPLICABLE) & expressed
    assert all(s.fault in OBSERVERS or s.kill_at for s in SCENARIOS)
    assert {s.agent for s in SCENARIOS} == set(CAMPAIGN_AGENTS)
    # Every cell that can apply is filled: none is left "not covered yet".
    assert not _WHY_NOT and {(a, f) for a in CAMPAIGN_AGENTS for f in SourceFault} == expressed | set(NOT_APPLICABLE)


def test_a_quick_campaign_keeps_every_cell_and_meets_every_boundary() -> None:
    """--quick samples rows, never cells: the same agent x fault cells, and across the agents every
    persistence boundary still gets a SIGKILL."""
    from stateward.chaos.campaign import Campaign, SourceFault
    from stateward.runtime.agent_registry import process_agents
    from stateward.runtime.faults import BOUNDARIES

    agents = process_agents(with_test_agents=True)
    assert "payment-migration" in agents, "the demos' agents are not registered: ./scripts/dev setup installs demos/"
    for seed in (1, 2, 5):
        full = Campaign("unused.db", agents, seed=seed, size=3).scenarios()
        quick = Campaign("unused.db", agents, seed=seed, quick=True).scenarios()
        assert {(s.agent, s.fault) for s in quick} == {(s.agent, s.fault) for s in full}
        assert len(quick) < len(full)
        kills = [s for s in quick if s.fault is SourceFault.SIGKILL_AT_BOUNDARY]
        assert {s.kill_at for s in kills} == set(BOUNDARIES), seed
        assert all(sum(k.agent == a for k in kills) == 2 for a in {k.agent for k in kills})
        # Both two-worker races (one frozen mid-step; two resuming one paused run) run on some agent.
        races = [s for s in quick if s.fault is SourceFault.TWO_WORKERS]
        assert {s.resume_race for s in races} == {True, False}, seed


@pytest.mark.slow
def test_the_campaign_meets_every_gate() -> None:
    """CI's gate run: the fault-injection campaign (the ledger storm, then blog, refund and payment-migration
    with SIGKILLs at each persistence boundary, two workers on one run, pauses at random steps and each
    agent's faults) and the audit; every gate had chances and holds, and cells say what ran (observed in
    the run's records), what does not apply and what is not covered."""
    import os
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "stateward.cli.main", "gates", "--size", "1", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    assert data["passed"] is True and data["finished_or_waiting"] >= 0.95
    chances = {g["name"]: g["opportunities"] for g in data["gates"]}
    for name in chances:
        if name != "unbounded_loops" or chances[name]:
            assert chances[name] > 0, name
    cells = {(c["agent"], c["fault"]): c for c in data["campaign"]["cells"]}
    assert cells[("payment-migration", "report-missing-evidence")]["coverage"] == "ran"
    assert cells[("blog", "sigkill-at-persistence-boundary")]["kills"] >= 1
    assert cells[("chaos-ledger", "two-workers-resume-one-run")]["coverage"] == "ran"
    refund_faults = ("permission-denied", "timeout-once-then-recovery", "same-search-repeated")
    refund_faults += ("high-risk-low-confidence",)
    for fault in refund_faults:
        assert cells[("refund", fault)]["coverage"] == "ran" and cells[("refund", fault)]["runs"] >= 1, fault
    for agent in ("blog", "refund", "payment-migration"):
        assert cells[(agent, "two-workers-resume-one-run")]["coverage"] == "ran", agent
    assert cells[("refund", "plan-with-a-cycle")]["coverage"] == "not_applicable"
    # Every cell ran (its fault observed in a run's records) or says why it cannot apply.
    left = {k: c["coverage"] for k, c in cells.items() if c["coverage"] not in ("ran", "not_applicable")}
    assert left == {}
    assert all(c["reason"] for c in cells.values() if c["coverage"] == "not_applicable")
    assert data["campaign"]["liveness_failures"] == [] and data["campaign"]["errors"] == []


@pytest.mark.slow
def test_agents_not_installed_are_skipped_not_passed(tmp_path: Path) -> None:
    """Without the demos' agents, their cells are ``skipped``; only the ledger storm runs."""
    from stateward.chaos.campaign import Campaign, Coverage
    from stateward.runtime.agent_registry import AgentRegistry, campaign_agents

    registry = AgentRegistry()
    registry.merge(campaign_agents())
    ran = Campaign(str(tmp_path / "c.db"), registry, storm_kills=2).run()
    by = {(c.agent, c.fault.value): c.coverage for c in ran.cells}
    assert by[("blog", "sigkill-at-persistence-boundary")] is Coverage.SKIPPED
    assert by[("payment-migration", "prompt-injection-in-document")] is Coverage.SKIPPED
    assert by[("refund", "permission-denied")] is Coverage.SKIPPED
    assert {a for a, _ in ran.covered()} == {"chaos-ledger"}


@pytest.mark.slow
@pytest.mark.postgres
def test_the_campaign_on_postgres_meets_every_gate(pg_url: str) -> None:
    """The whole fault catalogue on PostgreSQL, quick: every agent x fault cell the SQLite campaign runs
    (storm workers claiming with SKIP LOCKED, forked drivers killed at persistence boundaries - together
    every boundary -, two workers racing on one run, pauses, and each agent's faults), one row per cell."""
    from stateward.chaos.campaign import Campaign, Coverage
    from stateward.chaos.permissions import agent_permissions
    from stateward.runtime.agent_registry import process_agents
    from stateward.store.backends import open_store

    agents = process_agents(with_test_agents=True)
    ran = Campaign(pg_url, agents, seed=5, quick=True).run()
    store = open_store(pg_url)
    try:
        report = audit(
            store, ran.run_ids, permissions=agent_permissions(agents), witnessed_duplicates=ran.witnessed_duplicates
        )
    finally:
        store.close()
    assert report.passed, report.breaches()
    assert ran.errors == [] and ran.liveness_failures == []
    chances = {g.name: g.opportunities for g in report.gates}
    for name in chances:
        if name != "unbounded_loops" or chances[name]:
            assert chances[name] > 0, name
    left = {(c.agent, c.fault.value): c.coverage for c in ran.cells}
    assert {k: v for k, v in left.items() if v not in (Coverage.RAN, Coverage.NOT_APPLICABLE)} == {}
