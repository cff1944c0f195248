"""A store row that names code is data, not an instruction: no command imports or runs what it says.

The attack that worked before agents were named: edit a run's snapshot (and its checkpoint) so its agent
is ``{"factory": "os:system", "params": {"command": "touch PWNED"}}``, then let an operator's worker,
answer, expiry sweep or resume pick the run up.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow


def sw(*args: str, db: Path, cwd: Path) -> tuple[int, Any, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "stateward.cli.main", *args, "--db", str(db), "--json"],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={k: v for k, v in os.environ.items() if k != "STATEWARD_AGENTS"},
        timeout=120,
    )
    out = json.loads(proc.stdout) if proc.stdout.strip().startswith(("{", "[")) else None
    return proc.returncode, out, proc.stderr


def poison(db: Path, run_id: str, marker: Path, *, expire: bool = False) -> None:
    """Rewrite the run's agent in its snapshot, its checkpoints and (optionally) make its request overdue."""
    hostile = {"factory": "os:system", "params": {"command": f"touch {marker}"}}
    conn = sqlite3.connect(db)
    with conn:
        for table, key in (("runs", "snapshot"), ("checkpoints", "snapshot")):
            rows = conn.execute(f"SELECT rowid, {key} FROM {table} WHERE run_id=?", (run_id,)).fetchall()
            for rowid, text in rows:
                snap = json.loads(text)
                snap["agent"] = hostile
                if expire and snap.get("pending"):
                    snap["pending"]["expires_at"] = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
                conn.execute(f"UPDATE {table} SET {key}=? WHERE rowid=?", (json.dumps(snap), rowid))
        conn.execute("UPDATE runs SET agent='os:system' WHERE run_id=?", (run_id,))
        if expire:
            for rowid, text in conn.execute("SELECT rowid, body FROM pending_requests WHERE run_id=?", (run_id,)):
                body = json.loads(text)
                body["expires_at"] = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
                conn.execute("UPDATE pending_requests SET body=? WHERE rowid=?", (json.dumps(body), rowid))
    conn.close()


def waiting_run(db: Path, cwd: Path) -> str:
    rc, out, err = sw("demo", "blog", "--controller", "workflow", db=db, cwd=cwd)
    assert rc == 0, err
    assert out["status"] == "WAITING_FOR_USER"
    return str(out["run_id"])


def test_no_command_runs_what_a_store_row_names(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    marker = tmp_path / "PWNED"

    answered = waiting_run(db, tmp_path)
    poison(db, answered, marker)
    rc, out, _ = sw("approve", answered, "approval_001", "--by", "ops", db=db, cwd=tmp_path)
    assert rc == 4 and out["not_driven"]["code"] == "AGENT_NOT_REGISTERED"

    rc, out, _ = sw("resume", answered, db=db, cwd=tmp_path)
    assert rc != 0 and out["error"]["code"] == "AGENT_NOT_REGISTERED"

    rc, counts, err = sw("worker", "--idle-exit", "1", db=db, cwd=tmp_path)
    assert "AGENT_NOT_REGISTERED" in err and counts["agent_unavailable"] == 1 and counts["crashed_steps"] == 0

    overdue = waiting_run(db, tmp_path)
    poison(db, overdue, marker, expire=True)
    rc, out, _ = sw("requests", "expire", db=db, cwd=tmp_path)
    assert rc == 0 and overdue not in json.dumps(out)

    assert not marker.exists()
    rc, shown, _ = sw("runs", "show", answered, db=db, cwd=tmp_path)
    assert rc == 0 and shown["agent"] == "os:system"  # shown as the label it is, never imported
    assert shown["status"] == "RUNNING" and shown["setback"]["kind"] == "agent_unavailable"
