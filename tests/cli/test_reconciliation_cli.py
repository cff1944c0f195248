"""Reconciliation through real ``stateward`` processes: who may answer, what the listing says, what an answer does.

The agent's credit takes effect (a line in a real file) and then never answers in time; it has no lookup.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

AGENTS_MODULE = '''
import os, time
from pathlib import Path
from stateward import Agent, AgentRegistry, FinishNode, ToolContext, ToolNode, ToolRegistry, WorkflowController, tool

agents = AgentRegistry()
LEDGER = Path(os.environ["TEST_LEDGER"])


@tool(description="Credit an account.", requires_approval=True, approver_role="finance", timeout_s=0.05)
def credit(account: str, cents: int, ctx: ToolContext) -> dict:
    with LEDGER.open("a") as f:
        f.write(f"credit {ctx.idempotency_key}\\n")
    time.sleep(0.3)  # posted, but the answer is lost
    return {"credited": cents}


@tool(description="Tell the customer.")
def notify(text: str) -> str:
    with LEDGER.open("a") as f:
        f.write("notify\\n")
    return "sent"


@agents.agent("creditor", version="1")
def creditor() -> Agent:
    """Credits once (finance approves), then notifies."""
    nodes = [
        ToolNode("credit", "credit", {"account": "acct-7", "cents": 1200}, next="notify"),
        ToolNode("notify", "notify", {"text": "credited"}, next="done"),
        FinishNode("done"),
    ]
    return Agent(name="creditor", controller=WorkflowController(nodes), tools=ToolRegistry([credit, notify]),
                 approver_role="ops")
'''


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    directory = tmp_path / "ops"
    directory.mkdir()
    (directory / "creditor_agents.py").write_text(textwrap.dedent(AGENTS_MODULE))
    environment = {k: v for k, v in os.environ.items() if k not in {"STATEWARD_DB", "STATEWARD_AGENTS"}}
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(directory), os.environ.get("PYTHONPATH")]))
    environment["STATEWARD_AGENTS"] = "creditor_agents:agents"
    environment["TEST_LEDGER"] = str(tmp_path / "ledger.txt")
    return environment


def sw(env: dict[str, str], *args: str, as_json: bool = True) -> tuple[int, Any, str]:
    """(exit code, stdout as JSON (or text), stderr) of one real ``stateward`` process."""
    done = subprocess.run(
        [sys.executable, "-m", "stateward.cli.main", *args, *(["--json"] if as_json else [])],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout) if as_json else done.stdout, done.stderr


def _waiting_on_reconciliation(env: dict[str, str], db: str) -> str:
    code, started, _ = sw(env, "run", "creditor", "--goal", "credit once", "--db", db)
    assert code == 0 and started["pending"]["approver_role"] == "finance", started
    run_id = str(started["run_id"])
    code, asked, _ = sw(env, "approve", run_id, "approval_001", "--by", "fin", "--role", "finance", "--db", db)
    assert code == 0, asked
    assert asked["pending"]["kind"] == "reconciliation" and asked["pending"]["request_id"] == "approval_002"
    return run_id


def test_the_cli_refuses_an_answerer_without_the_tools_role_and_lists_by_role(
    tmp_path: Path, env: dict[str, str]
) -> None:
    db = str(tmp_path / "runs.db")
    run_id = _waiting_on_reconciliation(env, db)
    for roles in ([], ["--role", "comms"], ["--role", "ops"]):
        code, refused, _ = sw(env, "approve", run_id, "approval_002", "--by", "mallory", *roles, "--db", db)
        assert code == 1 and refused["error"]["code"] == "ROLE_NOT_ALLOWED", refused
    code, finance, _ = sw(env, "requests", "list", "--role", "finance", "--db", db)
    assert code == 0 and [(r["request_id"], r["kind"], r["asked_by"]) for r in finance] == [
        ("approval_002", "reconciliation", "runtime")
    ]
    assert finance[0]["reconciles"]["retry_spent"] is False and finance[0]["expires_at"] is None
    code, comms, _ = sw(env, "requests", "list", "--role", "comms", "--db", db)
    assert code == 0 and comms == []
    code, text, _ = sw(env, "requests", "list", "--db", db, as_json=False)
    assert code == 0
    assert "stateward asks:" in text and "model says" not in text  # the Runtime's question, labelled as its own
    assert "this call, once" not in text and "admits:         nothing" in text
    assert "unknown call:   credit" in text and "guarded action" not in text
    assert "approve:        it happened" in text and "reject:         it did not happen" in text
    assert (tmp_path / "ledger.txt").read_text().count("credit") == 1


def test_it_happened_from_another_process_runs_the_next_node_once(tmp_path: Path, env: dict[str, str]) -> None:
    db = str(tmp_path / "runs.db")
    run_id = _waiting_on_reconciliation(env, db)
    code, done, _ = sw(
        env, "approve", run_id, "approval_002", "--by", "fin", "--role", "finance", "--comment", "in the ledger",
        "--db", db,
    )  # fmt: skip
    assert code == 0 and done["status"] == "COMPLETED", done
    lines = (tmp_path / "ledger.txt").read_text().splitlines()
    assert [line.split()[0] for line in lines] == ["credit", "notify"]  # credited once, then the next node
    code, again, _ = sw(
        env, "approve", run_id, "approval_002", "--by", "fin", "--role", "finance", "--comment", "in the ledger",
        "--db", db,
    )  # fmt: skip
    assert code == 0 and again["already_answered"] is True
    assert len((tmp_path / "ledger.txt").read_text().splitlines()) == 2
