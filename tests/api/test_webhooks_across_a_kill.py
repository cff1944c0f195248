"""Webhook delivery across a killed service: every notification is delivered at least once and every
signature verifies, though the service was SIGKILLed with deliveries outstanding."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from tests.api.receiver import Receiver
from tests.api.test_serve_process import environment, free_port, sw

from stateward.api.webhooks import EVENT_ID_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, DeliveryPolicy, verify

RUNS = 3
# A delivery the killed service had claimed (a POST in flight at the SIGKILL) stays claimed until its lease
# expires: the restarted service may send it only after that, so the last waits must outlast the lease.
AFTER_RESTART_S = DeliveryPolicy().claim_lease_s + 30


def start_service(env: dict[str, str], cwd: Path, db: Path, port: int) -> subprocess.Popen[bytes]:
    server = subprocess.Popen(
        [sys.executable, "-m", "stateward.cli.main", "serve", "--db", str(db), "--port", str(port)],
        cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while True:
        assert server.poll() is None, "the service exited"
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                return server
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "the service did not become ready in 60 s"
        time.sleep(0.2)


def wait_until(condition: object, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline
        time.sleep(0.1)


@pytest.mark.slow
def test_every_notification_arrives_at_least_once_across_a_killed_service(tmp_path: Path) -> None:
    env = environment(tmp_path) | {
        "STATEWARD_WEBHOOK_POLL_S": "0.2",
        "STATEWARD_WEBHOOK_BACKOFF_S": "0.5",
        "STATEWARD_WEBHOOK_ALLOW_HTTP": "1",
        "STATEWARD_WEBHOOK_ALLOW_NETWORKS": "127.0.0.0/8",
    }
    db = tmp_path / "hooks.db"
    code, made = sw(
        env, tmp_path, "keys", "create", "--tenant", "acme", "--role", "admin", "--name", "root", "--db", str(db),
        "--new-store",
    )  # fmt: skip
    assert code == 0, made
    auth = {"Authorization": f"Bearer {made['key']}"}
    receiver = Receiver()
    receiver.status = 503  # down at first: every delivery is outstanding when the service dies
    port = free_port()
    server = start_service(env, tmp_path, db, port)
    try:
        base = f"http://127.0.0.1:{port}"
        hook = httpx.post(f"{base}/v1/webhooks", json={"url": receiver.url}, headers=auth, timeout=10).json()
        runs = []
        for i in range(RUNS):
            started = httpx.post(
                f"{base}/v1/runs", json={"agent": "payer", "goal": f"pay {i}", "drive": True}, headers=auth, timeout=30
            )
            assert started.status_code == 201 and started.json()["status"] == "WAITING_FOR_USER", started.text
            runs.append(started.json()["run_id"])
        wait_until(lambda: len(receiver.received) >= RUNS)  # tried, refused
        server.send_signal(signal.SIGKILL)
        server.wait(timeout=15)
        # With the service dead, the runs are answered and finished by another process (the CLI): the
        # outbox rows of their endings are written by that process's steps.
        for run_id in runs:
            code, _ = sw(env, tmp_path, "approve", run_id, "approval_001", "--by", "ops", "--db", str(db))
            assert code == 0
        receiver.status = 200
        server = start_service(env, tmp_path, db, port)
        expected = {f"{run_id}:{kind}" for run_id in runs for kind in ("run.waiting", "run.ended")}
        wait_until(lambda: {f"{b['run_id']}:{b['type']}" for b in receiver.bodies()} >= expected, AFTER_RESTART_S)
        deliveries = httpx.get(f"{base}/v1/webhooks/deliveries", headers=auth, timeout=10).json()["deliveries"]
        wait_until(
            lambda: all(
                d["status"] == "delivered"
                for d in httpx.get(f"{base}/v1/webhooks/deliveries", headers=auth, timeout=10).json()["deliveries"]
            ),
            AFTER_RESTART_S,
        )
        assert len(deliveries) == 2 * RUNS
    finally:
        server.kill()
        server.wait(timeout=15)
        receiver.close()
    for headers, body in receiver.received:
        assert verify(
            hook["secret"], headers[TIMESTAMP_HEADER.lower()], headers[SIGNATURE_HEADER.lower()], body, now=time.time()
        )
        assert headers[EVENT_ID_HEADER.lower()] in body
