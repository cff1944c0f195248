"""``stateward worker --processes N``: import once, then fork N worker processes (as gunicorn and Celery do).

Each process of a fleet pays the interpreter's start-up, the imports (pydantic, psycopg, our models) and
the agents' modules before its first step; on a small machine N processes starting at once queue for the
CPUs. A supervisor pays that once and forks: the children share the imported code (the collector's
generations are frozen first, so copy-on-write pages stay shared) and open their own store connections
after the fork, so nothing of a connection crosses it. The supervisor starts no thread and opens no
store: a forked child has only the thread that forked, and nothing the parent holds can be left locked.

What the supervisor does:
- SIGTERM or SIGINT is forwarded to every child, which finishes its steps in flight, releases its leases
  and exits; the supervisor exits when all of them did.
- A child killed by a signal the supervisor did not forward (the kernel's OOM killer, a SIGKILL, a crash)
  is reported and replaced by a new fork: its runs' leases expire and any worker takes them over, as
  after any crashed worker. More than N such deaths within ``CRASH_WINDOW_S`` is a crash loop: the
  supervisor stops the others (as on SIGTERM) and exits 5, as it does when a fork fails (no memory or
  process slots left). Once the workers are stopping, none is forked or replaced.
- A child that exits by itself (``--idle-exit``, ``--max-crashes``, an error at start such as an
  unreachable store) is not replaced: it ended by its own rules, and a broken configuration would fail
  again. The supervisor's exit status is the highest of its children's (0 when all exited 0).
- ``--json`` prints one object: the children's final counts summed, with ``processes`` and ``replaced``.
- ``--metrics-port`` is refused with more than one process: N processes cannot serve one port.
- A supervisor that dies without forwarding (a SIGKILL, the OOM killer) takes its children along, on
  Linux: the kernel sends each of them SIGTERM (``PR_SET_PDEATHSIG``), so they drain and release their
  leases rather than run on unsupervised. A child forked just as the supervisor died exits at once.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import signal
import sys
import time
import traceback
from collections import deque
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from stateward.cli.output import EXIT_RUNS_TROUBLED, emit_json, say
from stateward.core.errors import ErrorCode, UserError

if TYPE_CHECKING:
    from collections.abc import Callable

    from stateward.cli.worker_options import WorkerOptions
    from stateward.runtime.agent_registry import AgentRegistry

    WorkerMain = Callable[[WorkerOptions, AgentRegistry | None], tuple[int, dict[str, int | bool]]]
    """One worker process's main: its exit status and final counts (``worker_cmd.run_worker``)."""

MAX_PROCESSES = 64  # each child holds its own store connections (PostgreSQL's default max_connections: 100)
CRASH_WINDOW_S = 60.0
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def check_processes(opts: WorkerOptions) -> None:
    """INVALID_WORKER_CONFIG for a process count out of range or an option N processes cannot share."""
    if not 1 <= opts.processes <= MAX_PROCESSES:
        raise UserError(
            f"--processes must be 1 to {MAX_PROCESSES} (got {opts.processes})", code=ErrorCode.INVALID_WORKER_CONFIG
        )
    if opts.processes > 1 and not hasattr(os, "fork"):
        raise UserError(
            "--processes needs os.fork (not on this platform): start one `stateward worker` per process",
            code=ErrorCode.INVALID_WORKER_CONFIG,
        )
    if opts.processes > 1 and opts.metrics_port is not None:
        raise UserError(
            "--metrics-port needs one process per port: run one `stateward worker` per metrics port",
            code=ErrorCode.INVALID_WORKER_CONFIG,
        )


def preload(opts: WorkerOptions) -> AgentRegistry | None:
    """Import what every child would import before its first step: the store's implementation and the
    agents this process may build, which the children share (None if they failed to load: each child
    then loads them itself and reports the error on the runs, as one worker process would)."""
    from stateward.runtime.agent_registry import process_agents
    from stateward.store.backends import import_store
    from stateward.temporal.target import is_temporal_url

    if is_temporal_url(opts.db):
        # The SDK, imported only: its native runtime starts in each child, at its own first connection.
        import stateward.temporal.worker
    else:
        import_store(opts.db)
    if opts.use_async:
        import stateward.runtime.async_worker  # noqa: F401
    try:
        return process_agents()
    except Exception:
        return None


@dataclass
class Supervisor:
    """Forks the children and watches them until every one has exited."""

    opts: WorkerOptions
    agents: AgentRegistry | None = None
    main: WorkerMain | None = None  # what each child runs (worker_cmd.run_worker), given by the command
    children: dict[int, int] = field(default_factory=dict)  # pid -> slot
    stop_signal: int | None = None
    replaced: int = 0
    gave_up: bool = False
    deaths: deque[float] = field(default_factory=deque)
    codes: list[int] = field(default_factory=list)
    supervisor_pid: int = field(default_factory=os.getpid)

    def run(self) -> int:
        read_end, self._write_end = os.pipe()
        previous = {sig: signal.signal(sig, self._forward) for sig in STOP_SIGNALS}
        try:
            for slot in range(self.opts.processes):
                self._fork(slot)
            say(f"worker supervisor {os.getpid()}: {self.opts.processes} processes on {self.opts.db}")
            while self.children:
                self._reap(*os.wait())
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            os.close(self._write_end)
        counts = _read_counts(read_end)
        code = max([EXIT_RUNS_TROUBLED if self.gave_up else 0, *self.codes])
        say(f"worker supervisor stopped: processes={self.opts.processes} replaced={self.replaced} exit={code}")
        if self.opts.as_json:
            emit_json({**_summed(counts), "processes": self.opts.processes, "replaced": self.replaced})
        return code

    def _fork(self, slot: int) -> None:
        """Fork one child, unless the workers are stopping. Stop signals are blocked from that check to the
        child's entry in ``children``, so a forward never misses a new child: a signal that came before
        the check means no fork, one that comes after is delivered once the child is listed."""
        old = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            if self.stop_signal is not None:
                return
            try:
                pid = os.fork()
            except OSError as exc:  # no memory or process slots left: stop the rest rather than run short
                say(f"worker supervisor: cannot fork a worker process ({exc}); stopping the others")
                self.gave_up = True
                self._forward(signal.SIGTERM, None)
                return
            if pid == 0:
                self._child(old)
            self.children[pid] = slot
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)

    def _child(self, mask: set[int | signal.Signals]) -> None:
        """Run one worker in this forked process and leave it with the worker's exit status, never returning."""
        code = 1
        try:
            for sig in STOP_SIGNALS:  # until the worker installs its own: dying then loses nothing
                signal.signal(sig, signal.SIG_DFL)
            if not _stop_with_parent(self.supervisor_pid):
                return  # the supervisor is gone already: start nothing it cannot watch
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            code = _child_code(replace(self.opts, processes=1, as_json=False), self.agents, self._write_end, self.main)
        finally:
            os._exit(code)

    def _forward(self, signum: int, _frame: object) -> None:
        self.stop_signal = signum
        for pid in self.children:
            _kill(pid, signum)

    def _reap(self, pid: int, status: int) -> None:
        slot = self.children.pop(pid, None)
        if slot is None:
            return
        if os.WIFEXITED(status):
            self.codes.append(os.WEXITSTATUS(status))
            return
        sig = os.WTERMSIG(status)
        if sig == self.stop_signal:
            return
        name = _signal_name(sig)
        if self.stop_signal is not None or self.gave_up:
            say(f"worker process {pid} was killed by {name} while the workers stopped")
            self.codes.append(EXIT_RUNS_TROUBLED)
            return
        now = time.monotonic()
        while self.deaths and now - self.deaths[0] > CRASH_WINDOW_S:
            self.deaths.popleft()
        self.deaths.append(now)
        if len(self.deaths) > self.opts.processes:
            say(
                f"worker process {pid} was killed by {name}: {len(self.deaths)} processes died within"
                f" {CRASH_WINDOW_S:g} s; stopping the others"
            )
            self.gave_up = True
            self._forward(signal.SIGTERM, None)
            return
        say(f"worker process {pid} was killed by {name}; starting another")
        self.replaced += 1
        self._fork(slot)


def _child_code(opts: WorkerOptions, agents: AgentRegistry | None, counts_out: int, main: WorkerMain | None) -> int:
    """The worker's exit status; its final counts go to the supervisor through ``counts_out``."""
    counts = None
    try:
        if main is None:
            raise RuntimeError("the supervisor was given no worker to run")
        code, counts = main(opts, agents)
    except SystemExit as exc:  # a start-up error, reported by the worker as a one-line reason
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # reported here, as the interpreter would
        traceback.print_exc()
        code = 1
    if counts is not None:
        os.write(counts_out, (json.dumps(counts) + "\n").encode())
    sys.stdout.flush()
    sys.stderr.flush()
    return code


def _stop_with_parent(parent: int) -> bool:
    """Ask the kernel for SIGTERM when ``parent`` dies (Linux; elsewhere nothing is asked); False when it
    is already gone (this process was re-parented before it could ask)."""
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
            say(f"worker process {os.getpid()}: cannot ask to stop with its supervisor (errno {ctypes.get_errno()})")
    return os.getppid() == parent


def _signal_name(signum: int) -> str:
    """SIGKILL, or a number for a signal Python has no name for (a real-time one)."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _kill(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # exited; reaped by the next wait
        os.kill(pid, signum)


def _read_counts(read_end: int) -> list[dict[str, Any]]:
    """Each child's final counts, a JSON line each (read once every child has exited)."""
    with os.fdopen(read_end, "rb") as pipe:
        text = pipe.read().decode()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _summed(counts: list[dict[str, Any]]) -> dict[str, Any]:
    """The children's counts added up (flags: whether any child set them)."""
    out: dict[str, Any] = {}
    for row in counts:
        for key, value in row.items():
            out[key] = (out.get(key, False) or value) if isinstance(value, bool) else out.get(key, 0) + value
    return out


def supervise(opts: WorkerOptions, main: WorkerMain) -> int:
    """Preload, freeze what was built out of the collector's scans, fork ``opts.processes`` workers, each
    running ``main``."""
    gc.disable()
    try:
        if sys.platform.startswith("linux"):
            import ctypes  # noqa: F401  # for each child's _stop_with_parent, imported once here
        agents = preload(opts)
    finally:
        gc.freeze()
        gc.enable()
    return Supervisor(opts, agents, main=main).run()
