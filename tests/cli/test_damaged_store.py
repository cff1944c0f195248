"""#31 item 6: a SQLite file with corrupted pages is not ready, and nothing writes into it."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from stateward import Agent, AgentRegistry, ReActController, ToolRegistry, tool
from stateward.api import ApiSettings, create_app
from stateward.runtime.runtime import Runtime
from stateward.store.sqlite import SQLiteStore
from stateward.testing import ScriptedModel


@tool(requires_approval=True)
def pay(invoice: str) -> dict[str, str]:
    """Pay."""
    return {"paid": invoice}


def _payer() -> Agent:
    def decide(request: Any) -> dict[str, Any]:
        if any(o["action"] == "pay" and o["status"] == "SUCCESS" for o in request.observations):
            return {"type": "FINISH", "reason": "paid"}
        return {"type": "EXECUTE_TOOL", "action": "pay", "args": {"invoice": "INV-" + "x" * 2000}}

    return Agent(name="payer", controller=ReActController(ScriptedModel(decide)), tools=ToolRegistry([pay]))


def _damaged(tmp_path: Path) -> tuple[Path, str, str]:
    """A store with 40 waiting runs whose data pages (not the schema page) are overwritten."""
    path = tmp_path / "damaged.db"
    registry = AgentRegistry()
    registry.register("payer", _payer)
    runtime = Runtime(SQLiteStore(path), agents=registry)
    states = [runtime.start(registry.create("payer"), "pay") for _ in range(40)]
    runtime.close()
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page_size = db.execute("PRAGMA page_size").fetchone()[0]
        pages = db.execute("PRAGMA page_count").fetchone()[0]
        # Leave the schema's pages readable: the file opens, only quick_check finds the damage.
        roots = {r[0] for r in db.execute("SELECT rootpage FROM sqlite_master WHERE rootpage > 0")}
    assert pages > 20
    with open(path, "r+b") as handle:
        for page in range(pages // 2, pages + 1):  # the schema's pages come first; runs' data fills the rest
            if page in roots:
                continue
            handle.seek((page - 1) * page_size + 8)
            handle.write(os.urandom(64))
    first = states[0]
    assert first.pending is not None
    return path, first.run_id, first.pending.request_id


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def sw(cwd: Path, *args: str) -> tuple[int, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STATEWARD_")}
    done = subprocess.run(
        [sys.executable, "-m", "stateward.cli.main", *args, "--json"],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout) if done.stdout.strip() else done.stderr


def test_readyz_says_not_ready_on_a_damaged_store(tmp_path: Path) -> None:
    path, _, _ = _damaged(tmp_path)
    runtime = Runtime(SQLiteStore(path))
    with TestClient(create_app(runtime, ApiSettings())) as client:
        response = client.get("/readyz")
        assert response.status_code == 503
        error = response.json()["error"]
        assert error["code"] == "STORE_CORRUPT"
        assert str(tmp_path) not in error["message"]  # no store location in a response
        assert client.get("/healthz").status_code == 200
    runtime.close()


def test_readyz_is_ready_on_a_sound_store(tmp_path: Path) -> None:
    runtime = Runtime(SQLiteStore(tmp_path / "sound.db"))
    with TestClient(create_app(runtime, ApiSettings())) as client:
        assert client.get("/readyz").json() == {"status": "ready"}
    runtime.close()


@pytest.mark.parametrize(
    "command",
    [
        ("keys", "create", "--tenant", "acme", "--name", "root", "--role", "admin"),
        ("approve", "{run}", "{request}", "--by", "op"),
        ("reject", "{run}", "{request}", "--by", "op"),
        ("cancel", "{run}"),
        ("requests", "expire"),
    ],
)
def test_writing_commands_refuse_a_damaged_store_and_leave_it_as_it_was(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    path, run_id, request_id = _damaged(tmp_path)
    before = _digest(path)
    args = [part.format(run=run_id, request=request_id) for part in command]
    code, out = sw(tmp_path, *args, "--db", str(path))
    assert code == 1, out
    assert out["error"]["code"] == "STORE_CORRUPT"
    assert _digest(path) == before


def test_the_worker_refuses_a_damaged_store_at_start(tmp_path: Path) -> None:
    path, _, _ = _damaged(tmp_path)
    before = _digest(path)
    code, out = sw(tmp_path, "worker", "--db", str(path), "--idle-exit", "0.5")
    assert code == 1, out
    assert out["error"]["code"] == "STORE_CORRUPT"
    assert _digest(path) == before
