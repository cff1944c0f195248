"""A gate that cannot fail is not a gate: each of the eight fails when its protection is switched off.

Each test switches one protection off in this process with a monkeypatch (a test build; nothing a user
can turn on), runs the campaign cells that meet it through ``stateward gates --only FAULT`` (forked
drivers are forked after the patch and inherit it), and expects the gate to report a breach and the
command to exit non-zero. The same cells pass with every protection on.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from stateward.cli.app import app
from stateward.core.budget import Usage
from stateward.core.errors import StatewardError
from stateward.runtime.write import Write
from stateward.store.records import Lease, StepWrite

pytestmark = pytest.mark.usefixtures("demos_installed")


@pytest.fixture
def demos_installed() -> None:
    from stateward.runtime.agent_registry import process_agents

    agents = process_agents(with_test_agents=True)
    missing = {"refund", "payment-migration"} - set(agents.names())
    assert not missing, f"the demos' agents {sorted(missing)} are not registered: ./scripts/dev setup installs demos/"


def gates(tmp_path: Path, faults: tuple[str, ...], agents: tuple[str, ...]) -> tuple[int, dict[str, Any]]:
    """``stateward gates --only ... --agent ...`` on a new SQLite store: exit code and JSON report."""
    args = ["gates", "--store", str(tmp_path / "gates.db"), "--json"]
    for fault in faults:
        args += ["--only", fault]
    for agent in agents:
        args += ["--agent", agent]
    result = CliRunner().invoke(app, args)
    return result.exit_code, json.loads(result.stdout)


def value(report: dict[str, Any], gate: str) -> float:
    return float(next(g["value"] for g in report["gates"] if g["name"] == gate))


# -- the switches: each replaces one protection with what a build without it would do ---------------


def no_resume_recheck(mp: pytest.MonkeyPatch) -> None:
    """A resume checks nothing about the run's status: one racing another resumes a run that waits."""
    mp.setattr("stateward.runtime.runtime.check_resumable", lambda state: None)


def no_permission_stage(mp: pytest.MonkeyPatch) -> None:
    """The gateway admits a call whatever permission its tool needs."""
    mp.setattr("stateward.tools.gateway.permitted", lambda st: None)


def no_journal_replay(mp: pytest.MonkeyPatch) -> None:
    """The executor runs a side effect again instead of replaying what the journal says happened."""
    from stateward.tools.executor import Executor

    mp.setattr(Executor, "run", lambda self, st: self._attempt_loop(st))


def no_lease_fence(mp: pytest.MonkeyPatch) -> None:
    """A superseded holder's step is written anyway, at the end of the log, under its own lease version."""
    from stateward.store.sqlite import SQLiteStore

    original = SQLiteStore.commit_step

    def commit_step(
        self: SQLiteStore, run_id: str, expected_seq: int, write: StepWrite, lease: Lease | None = None
    ) -> int:
        try:
            return original(self, run_id, expected_seq, write, lease)
        except StatewardError:
            if lease is None:
                raise
        with closing(sqlite3.connect(self.path, timeout=30)) as db:
            (seq,) = db.execute("SELECT last_seq FROM runs WHERE run_id=?", (run_id,)).fetchone()
        new_seq = original(self, run_id, int(seq), write, None)
        with closing(sqlite3.connect(self.path, timeout=30)) as db, db:
            db.execute(
                "UPDATE event_batches SET lease_version=? WHERE seq=?"
                " AND run_key=(SELECT run_key FROM runs WHERE run_id=?)",
                (lease.version, new_seq, run_id),
            )
        return new_seq

    mp.setattr(SQLiteStore, "commit_step", commit_step)


def no_evidence_check(mp: pytest.MonkeyPatch) -> None:
    """Verification accepts a deliverable whatever its checks found (a bare high-risk claim included)."""
    from stateward.controllers.plan_run import items
    from stateward.verify.policy import VerificationOutcome

    original = items.verification_decision
    mp.setattr(
        items,
        "verification_decision",
        lambda *a, **k: original(*a, **k).model_copy(update={"outcome": VerificationOutcome.ACCEPT}),
    )


def resume_resets_budget(mp: pytest.MonkeyPatch) -> None:
    """A resumed run starts counting its usage from zero."""
    from stateward.runtime import transition

    original = transition.resume

    def resume(*a: Any, **k: Any) -> Write:
        moved = original(*a, **k)
        return dataclasses.replace(moved, state=moved.state.model_copy(update={"usage": Usage()}))

    mp.setattr(transition, "resume", resume)


def pause_checkpoint_loses_usage(mp: pytest.MonkeyPatch) -> None:
    """The pause checkpoint keeps the status but not how far the run had got."""
    from stateward.runtime import driver

    original = driver.pause

    def pause(*a: Any, **k: Any) -> Any:
        moved = original(*a, **k)
        return dataclasses.replace(moved, state=moved.state.model_copy(update={"usage": Usage()}))

    mp.setattr(driver, "pause", pause)


def no_loop_bounds(mp: pytest.MonkeyPatch) -> None:
    """Neither the ReAct no-progress rule nor the step budget stops a run."""
    from stateward.core.budget import Budget

    mp.setattr("stateward.controllers.react.repeating", lambda observations, times: False)
    mp.setattr(Budget, "exhausted_by", lambda self, usage: None)


Switch = Callable[[pytest.MonkeyPatch], None]
REFUND = ("refund",)
# gate -> (the switch, the faults whose cells meet it, the agents that run them)
CASES: dict[str, tuple[Switch, tuple[str, ...], tuple[str, ...]]] = {
    "illegal_transitions": (no_resume_recheck, ("two-workers-resume-one-run",), ("blog",)),
    "unauthorized_tool_executions": (no_permission_stage, ("permission-denied",), ("refund", "chaos-ledger")),
    "duplicate_side_effects": (no_journal_replay, ("crash-after-tool-before-checkpoint",), REFUND),
    "double_executions": (no_lease_fence, ("two-workers-resume-one-run",), REFUND),
    "high_risk_without_evidence": (no_evidence_check, ("report-missing-evidence",), ("payment-migration",)),
    "budget_resets": (resume_resets_budget, ("pause-resume-at-random-point",), ("blog",)),
    "unbounded_loops": (no_loop_bounds, ("same-search-repeated",), REFUND),
    "budget_breaches": (no_loop_bounds, ("same-search-repeated",), REFUND),
    "pause_resume_correctness": (pause_checkpoint_loses_usage, ("pause-resume-at-random-point",), ("blog",)),
}


@pytest.mark.slow
@pytest.mark.parametrize("gate", sorted(CASES))
def test_the_gate_fails_when_its_protection_is_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gate: str) -> None:
    switch, faults, agents = CASES[gate]
    switch(monkeypatch)
    code, report = gates(tmp_path, faults, agents)
    assert code == 1, report
    assert gate in report["breaches"], report["breaches"]
    broken = value(report, gate)
    assert broken < 1.0 if gate == "pause_resume_correctness" else broken > 0


@pytest.mark.slow
def test_the_same_cells_pass_with_every_protection_on(tmp_path: Path) -> None:
    """The switches' cells (on the quick agents; the payment run's are in the CI campaign) hold every gate."""
    faults = tuple(sorted({f for _, fs, _ in CASES.values() for f in fs}))
    code, report = gates(tmp_path, faults, ("blog", "refund"))
    assert code == 0 and report["breaches"] == [], report["breaches"]
    ran = {c["fault"] for c in report["campaign"]["cells"] if c["coverage"] == "ran"}
    assert set(faults) - {"report-missing-evidence"} <= ran


@pytest.mark.slow
def test_the_ledgers_table_cells_pass_on_a_store_they_open_first(tmp_path: Path) -> None:
    """The ledger's own rows (no storm) on a new store: the store is created before the ledger's tables,
    every cell ran with its fault observed, and every gate holds."""
    faults = ("permission-denied", "timeout-once-then-recovery", "three-consecutive-failures")
    code, report = gates(tmp_path, faults, ("chaos-ledger",))
    assert code == 0 and report["breaches"] == [], report
    cells = {c["fault"]: c for c in report["campaign"]["cells"] if c["agent"] == "chaos-ledger"}
    assert all(cells[f]["coverage"] == "ran" and cells[f]["unobserved"] == 0 for f in faults), cells
