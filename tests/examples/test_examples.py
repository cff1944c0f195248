"""The tutorial's agents in examples/expenses/ run as programs and through the CLI, in real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "expenses"
TIMEOUT_S = 120

pytestmark = pytest.mark.slow


def env() -> dict[str, str]:
    """The caller's environment (its PYTHONPATH picks the stateward under test), without agent settings."""
    out = {k: v for k, v in os.environ.items() if k not in {"STATEWARD_AGENTS", "STATEWARD_DB"}}
    return out


def run(args: list[str], cwd: Path, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env={**env(), **(extra_env or {})},
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


def program(name: str, cwd: Path, *flags: str) -> dict[str, Any]:
    done = run([str(EXAMPLES / f"{name}.py"), *flags], cwd)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[0].startswith("started run_") and lines[0].endswith("WAITING_FOR_USER")
    summary: dict[str, Any] = json.loads(lines[-1])
    return summary


def ledger(cwd: Path) -> list[dict[str, Any]]:
    path = cwd / "payments.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.parametrize(
    ("name", "answers"),
    [
        ("react_agent", ["approval_001:approved"]),
        ("workflow_agent", ["approval_001:approved"]),
        # By default the payment item asks to start, then the guarded payment asks by itself.
        ("plan_agent", ["approval_001:approved", "approval_002:approved"]),
    ],
)
def test_each_agent_stops_for_the_payment_and_pays_once_approved_from_a_second_runtime(
    name: str, answers: list[str], tmp_path: Path
) -> None:
    summary = program(name, tmp_path)
    assert summary["status"] == "COMPLETED" and summary["answers"] == answers
    assert [(p["expense_id"], p["amount_cents"]) for p in ledger(tmp_path)] == [("EXP-1", 4200)]


def test_the_plan_agent_can_bind_its_one_approval_to_the_payment(tmp_path: Path) -> None:
    summary = program("plan_agent", tmp_path, "--exact-approval")
    assert summary["status"] == "COMPLETED" and summary["answers"] == ["approval_001:approved"]
    assert len(ledger(tmp_path)) == 1


def test_a_rejected_payment_fails_the_run_and_pays_nothing(tmp_path: Path) -> None:
    summary = program("react_agent", tmp_path, "--reject")
    assert (summary["status"], summary["terminal_reason"]) == ("FAILED", "rejected_by_approver")
    assert ledger(tmp_path) == []


def test_a_refused_policy_exception_ends_the_workflow_over_policy(tmp_path: Path) -> None:
    summary = program("workflow_agent", tmp_path, "--expense", "EXP-2", "--reject")
    assert (summary["status"], summary["terminal_reason"]) == ("FAILED", "over_policy")
    assert ledger(tmp_path) == []


def test_the_registry_runs_an_example_by_name_and_another_process_approves_it(tmp_path: Path) -> None:
    pythonpath = os.pathsep.join([os.environ.get("PYTHONPATH", ""), str(ROOT)]).strip(os.pathsep)
    agents = {"STATEWARD_AGENTS": "examples.expenses.agents:registry", "PYTHONPATH": pythonpath}
    cli = ["-m", "stateward.cli.main"]
    ledger_path = str(tmp_path / "payments.jsonl")
    started = run(
        [
            *cli,
            "run",
            "expenses-react",
            "--goal",
            "reimburse expense EXP-1",
            "--param",
            f"ledger={ledger_path}",
            "--db",
            "runs.db",
            "--json",
        ],
        tmp_path,
        agents,
    )
    assert started.returncode == 0, started.stdout + started.stderr
    out = json.loads(started.stdout)
    assert (out["status"], out["pending_request_id"]) == ("WAITING_FOR_USER", "approval_001")
    assert ledger(tmp_path) == []

    approved = run([*cli, "approve", out["run_id"], "approval_001", "--db", "runs.db", "--json"], tmp_path, agents)
    assert approved.returncode == 0, approved.stdout + approved.stderr
    assert json.loads(approved.stdout)["status"] == "COMPLETED"
    assert len(ledger(tmp_path)) == 1

    listed = run([*cli, "agents", "list", "--json"], tmp_path, agents)
    assert listed.returncode == 0
    for name in ("expenses-react", "expenses-workflow", "expenses-plan"):
        assert name in listed.stdout
