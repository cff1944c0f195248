"""``stateward runs fork``: real processes fork a refund run at its wait and approve the fork; the payment
system counts one refund (the fork's was answered from the journal)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from stateward.store.backends import open_store
from stateward_demos.refund_agent import RefundBook


def sw(*args: str, cwd: Path) -> tuple[int, Any]:
    env = {k: v for k, v in os.environ.items() if k not in {"STATEWARD_DB", "STATEWARD_AGENTS"}}
    done = subprocess.run(
        [sys.executable, "-m", "stateward.cli.main", *args, "--json"],
        cwd=cwd, capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout)


def test_a_fork_of_a_refund_run_replays_the_refund(tmp_path: Path) -> None:
    db, book = str(tmp_path / "runs.db"), str(tmp_path / "book.db")
    code, started = sw("run", "refund", "--goal", "refund A-1001", "--param", f"book={book}", "--db", db, cwd=tmp_path)
    assert code == 0 and started["status"] == "WAITING_FOR_USER", started
    run_id, request_id = started["run_id"], started["pending_request_id"]
    store = open_store(db, create=False)
    at = store.last_seq(run_id)  # the wait: its checkpoint is a fork point
    store.close()

    code, refused = sw("runs", "fork", run_id, "--at", "2", "--db", db, cwd=tmp_path)
    assert code != 0 and refused["error"]["code"] == "FORK_POINT_UNAVAILABLE"
    code, fork = sw("runs", "fork", run_id, "--at", str(at), "--by", "ops-eve", "--db", db, cwd=tmp_path)
    assert code == 0, fork
    assert fork["lineage"]["forked_from"] == run_id and fork["pending_request_id"] != request_id

    code, done = sw("approve", run_id, request_id, "--by", "alice", "--db", db, cwd=tmp_path)
    assert code == 0 and done["status"] == "COMPLETED", done
    code, done = sw("approve", fork["run_id"], fork["pending_request_id"], "--by", "alice", "--db", db, cwd=tmp_path)
    assert code == 0 and done["status"] == "COMPLETED", done
    ledger = RefundBook(book)
    assert ledger.refunds_of(run_id) == 1 and ledger.refunds_of(fork["run_id"]) == 0 and ledger.duplicates() == {}
    code, source = sw("runs", "show", run_id, "--db", db, cwd=tmp_path)
    assert source["lineage"]["forks"] == [fork["run_id"]]
