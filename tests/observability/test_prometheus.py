"""``stateward worker --metrics-port``: a running worker's Prometheus text, scraped and parsed."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample
from tests.observability.agents_for_metrics import AGENTS, refunder

from stateward import Runtime

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int) -> dict[str, list[Sample]]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out: dict[str, list[Sample]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append(sample)
    return out


def value(samples: dict[str, list[Sample]], name: str, **labels: str) -> float:
    found = [s.value for s in samples.get(name, []) if all(s.labels.get(k) == v for k, v in labels.items())]
    return sum(found)


def test_a_running_worker_serves_run_metrics(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    runtime = Runtime.open(str(db), agents=AGENTS)
    for _ in range(3):
        runtime.submit(refunder(), "refund c-1")
    runtime.close()
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "stateward.cli.main",
            "worker",
            "--db",
            str(db),
            "--poll",
            "0.05",
            "--metrics-port",
            str(port),
            "--agents",
            "tests.observability.agents_for_metrics:AGENTS",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        samples: dict[str, list[Sample]] = {}
        while time.monotonic() < deadline:
            try:
                samples = scrape(port)
            except OSError:
                samples = {}
            if value(samples, "stateward_runs", status="WAITING_FOR_USER") == 3:
                break
            assert worker.poll() is None, worker.communicate()
            time.sleep(0.2)
        assert value(samples, "stateward_runs", status="WAITING_FOR_USER") == 3, samples.keys()
        assert value(samples, "stateward_runs", status="RUNNING") == 0
        assert value(samples, "stateward_requests_oldest_waiting_age_seconds") >= 0
        assert value(samples, "stateward_tool_calls_total", tool="lookup", status="SUCCESS") == 3
        assert value(samples, "stateward_runs_started_total") == 0  # submitted by another process
        chat = {"gen_ai_operation_name": "chat", "gen_ai_request_model": "scripted:refund-v1"}
        assert value(samples, "gen_ai_client_operation_duration_seconds_count", **chat) == 6
        assert value(samples, "gen_ai_client_token_usage_count", gen_ai_token_type="input", **chat) == 6
        assert value(samples, "gen_ai_client_token_usage_sum", gen_ai_token_type="output", **chat) > 0
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.communicate(timeout=30)


def started_service(db: Path, port: int, *args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    """``stateward serve`` as a process, once its /readyz answers."""
    service = subprocess.Popen(
        [sys.executable, "-m", "stateward.cli.main", "serve", "--db", str(db), "--port", str(port), *args],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while True:
        assert service.poll() is None, service.communicate()
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2).status == 200:
                return service
        except OSError:
            pass
        assert time.monotonic() < deadline, "the service did not become ready in 60 s"
        time.sleep(0.2)


def status_of(url: str, headers: dict[str, str]) -> int:
    try:
        return int(urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5).status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_the_service_serves_the_same_metrics_behind_its_token(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    runtime = Runtime.open(str(db), agents=AGENTS)
    for _ in range(2):  # built by name, so each run records its agent's version
        runtime.drive(runtime.submit(AGENTS.create("refunder"), "refund c-1").run_id)  # waits for the refund's approval
    runtime.submit(AGENTS.create("refunder"), "refund c-2")  # left RUNNING for a worker
    runtime.close()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "STATEWARD_METRICS_TOKEN": "scrape-secret",
    }
    port = free_port()
    service = started_service(db, port, "--metrics", env=env)
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        assert status_of(url, {}) == 401
        assert status_of(url, {"Authorization": "Bearer wrong"}) == 401
        request = urllib.request.Request(url, headers={"Authorization": "Bearer scrape-secret"})
        text = urllib.request.urlopen(request, timeout=5).read().decode()
        samples: dict[str, list[Sample]] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                samples.setdefault(sample.name, []).append(sample)
        assert value(samples, "stateward_runs", status="WAITING_FOR_USER") == 2, samples.keys()
        assert value(samples, "stateward_runs", status="RUNNING") == 1
        assert value(samples, "stateward_runs", status="COMPLETED") == 0
        assert value(samples, "stateward_requests_oldest_waiting_age_seconds") >= 0
        assert "stateward_requests_oldest_waiting_age_seconds" in samples
        version = AGENTS.accepted_versions("refunder")[0]  # the runs' recorded version, as a label
        unfinished = samples["stateward_runs_unfinished"]
        assert [(s.labels["agent_version"], s.value) for s in unfinished] == [(version, 3)]
    finally:
        service.terminate()
        service.communicate(timeout=30)
    port = free_port()
    plain = started_service(db, port, env={k: v for k, v in env.items() if k != "STATEWARD_METRICS_TOKEN"})
    try:  # without --metrics the route does not exist
        assert status_of(f"http://127.0.0.1:{port}/metrics", {"Authorization": "Bearer scrape-secret"}) == 404
    finally:
        plain.terminate()
        plain.communicate(timeout=30)
