"""The real thing: `stateward keys create`, `stateward serve` and `stateward worker` as processes on one store."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

AGENTS_MODULE = '''
from stateward import Agent, AgentRegistry, ReActController, ToolRegistry, tool
from stateward.testing import ScriptedModel


@tool(requires_approval=True)
def pay(invoice: str, amount_cents: int) -> dict[str, str]:
    """Pay an invoice (a real effect)."""
    return {"paid": invoice}


agents = AgentRegistry()


@agents.agent("payer")
def make_payer(invoice: str = "INV-1", amount_cents: int = 100) -> Agent:
    """Pays one invoice once a person approves that exact payment."""

    def decide(request):
        if any(o["action"] == "pay" and o["status"] == "SUCCESS" for o in request.observations):
            return {"type": "FINISH", "reason": "paid"}
        return {"type": "EXECUTE_TOOL", "action": "pay", "args": {"invoice": invoice, "amount_cents": amount_cents}}

    return Agent(name="payer", controller=ReActController(ScriptedModel(decide)), tools=ToolRegistry([pay]))
'''


def environment(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "ops").mkdir(exist_ok=True)
    (tmp_path / "ops" / "payer_agents.py").write_text(AGENTS_MODULE)
    env = {k: v for k, v in os.environ.items() if k not in {"STATEWARD_DB", "STATEWARD_AGENTS"}}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path / "ops"), os.environ.get("PYTHONPATH")]))
    env["STATEWARD_AGENTS"] = "payer_agents:agents"
    return env


def sw(env: dict[str, str], cwd: Path, *args: str) -> tuple[int, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "stateward.cli.main", *args, "--json"],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, dict[str, str], Path]]:
    env, db = environment(tmp_path), tmp_path / "svc.db"
    code, made = sw(env, tmp_path, "keys", "create", "--tenant", "acme", "--role", "submitter", "--role", "approver",
                    "--name", "alice", "--db", str(db), "--new-store")  # fmt: skip
    assert code == 0, made
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "stateward.cli.main", "serve", "--db", str(db), "--port", str(port)],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, server.stderr.read().decode() if server.stderr else ""
            try:
                if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the service did not become ready in 60 s"
            time.sleep(0.2)
        yield base, {"Authorization": f"Bearer {made['key']}"} | {"_key_id": made["key_id"]}, db
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=15)
        if server.stderr is not None:
            server.stderr.close()


def wait_for(base: str, headers: dict[str, str], run_id: str, status: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        shown = httpx.get(f"{base}/v1/runs/{run_id}", headers=headers, timeout=10).json()
        if shown["status"] == status:
            return dict(shown)
        assert time.monotonic() < deadline, shown
        time.sleep(0.1)


@pytest.mark.slow
def test_a_run_started_and_approved_over_http_is_completed_by_a_worker(
    tmp_path: Path, served: tuple[str, dict[str, str], Path]
) -> None:
    base, auth, db = served
    key_id = auth.pop("_key_id")
    env = environment(tmp_path)
    started = httpx.post(
        f"{base}/v1/runs", json={"agent": "payer", "goal": "pay INV-9", "params": {"invoice": "INV-9"}},
        headers=auth, timeout=30,
    )  # fmt: skip
    assert started.status_code == 201, started.text
    run_id = started.json()["run_id"]
    assert started.json()["status"] == "RUNNING"  # left for a worker

    code, _ = sw(env, tmp_path, "worker", "--idle-exit", "1", "--db", str(db))
    assert code == 0
    waiting = wait_for(base, auth, run_id, "WAITING_FOR_USER")
    [item] = httpx.get(f"{base}/v1/inbox", headers=auth, timeout=10).json()["items"]
    assert item["request"]["guarded_action"]["args"] == {"invoice": "INV-9", "amount_cents": 100}
    approved = httpx.post(
        f"{base}/v1/runs/{run_id}/requests/approval_001/approve",
        json={"digest": waiting["pending"]["guarded_action"]["digest"]}, headers=auth | {"Idempotency-Key": "a1"},
        timeout=30,
    )  # fmt: skip
    assert approved.status_code == 200, approved.text
    assert (approved.json()["status"], approved.json()["by"]) == ("RUNNING", f"alice [{key_id}]")

    code, _ = sw(env, tmp_path, "worker", "--idle-exit", "1", "--db", str(db))
    assert code == 0
    done = wait_for(base, auth, run_id, "COMPLETED")
    assert done["counters"]["approvals_consumed"] == 1
    events = httpx.get(f"{base}/v1/runs/{run_id}/events", params={"limit": 1000}, headers=auth, timeout=10).json()
    [answer] = [e["payload"] for e in events["events"] if e["type"] == "request_answered"]
    assert (answer["by"], answer["roles"]) == (f"alice [{key_id}]", ["approver", "submitter"])

    # Keys are listed without secrets; a revoked key is refused by the running service at once.
    code, listed = sw(env, tmp_path, "keys", "list", "--db", str(db))
    assert code == 0 and [k["key_id"] for k in listed["keys"]] == [key_id]
    assert "key" not in listed["keys"][0] and "secret_sha256" not in listed["keys"][0]
    secret = auth["Authorization"].split(".", 1)[1]
    with sqlite3.connect(db) as raw:
        dumped = "\n".join(raw.iterdump())
    assert secret not in dumped
    code, revoked = sw(env, tmp_path, "keys", "revoke", key_id, "--db", str(db))
    assert code == 0 and revoked["revoked_at"] is not None
    assert httpx.get(f"{base}/v1/runs", headers=auth, timeout=10).status_code == 401
    code, missing = sw(env, tmp_path, "keys", "revoke", "ffffffffffffffff", "--db", str(db))
    assert code == 1 and missing["error"]["code"] == "KEY_NOT_FOUND"
