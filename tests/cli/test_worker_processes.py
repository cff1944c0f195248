"""``stateward worker --processes N``: one supervisor imports once and forks N workers (cli/prefork.py).

Real processes on a real store: the children claim the runs, SIGTERM is forwarded and drained, a child
killed by another signal is replaced, too many deaths in a row stop the fleet (exit 5), and a child that
exits by itself is not replaced. Each wait has a deadline, so a hang fails instead of hanging.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import pytest

from stateward import Runtime
from stateward.cli import prefork, worker_cmd
from stateward.cli.worker_cmd import WorkerOptions

AGENTS = textwrap.dedent("""
    import os, time
    from pathlib import Path
    from stateward import Agent, AgentRegistry, Budget, FinishNode, ToolNode, ToolRegistry, WorkflowController, tool

    @tool(description="Wait like a remote call; no side effect.", timeout_s=30)
    def nap(node: int, seconds: float, mark: str) -> dict[str, int]:
        if mark:  # the test sees the call in flight
            Path(mark, f"{os.getpid()}-{node}").touch()
        time.sleep(seconds)
        return {"node": node}

    registry = AgentRegistry()

    @registry.agent("naps")
    def build(naps: int = 2, seconds: float = 0.05, mark: str = "") -> Agent:
        names = [f"nap_{i}" for i in range(naps)]
        after = [*names[1:], "done"]
        nodes = [ToolNode(n, "nap", {"node": i, "seconds": seconds, "mark": mark}, next=after[i])
                 for i, n in enumerate(names)]
        nodes.append(FinishNode("done", "napped"))
        return Agent(name="naps", controller=WorkflowController(nodes), tools=ToolRegistry([nap]),
                     budget=Budget(max_steps=naps + 3))
""")
DEADLINE_S = 60.0
READY = re.compile(r"^worker \S+:(\d+):\w+: 1 slot\(s\) on ", re.M)
STOPPED = re.compile(r"^worker stopped: claimed=(\d+) ", re.M)


@dataclass
class Fleet:
    proc: subprocess.Popen[str]
    err: Path

    def log(self) -> str:
        return self.err.read_text()

    def child_pids(self) -> list[int]:
        """Every worker child that announced itself, in order of start."""
        return [int(pid) for pid in READY.findall(self.log())]

    def wait_until(self, probe: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + DEADLINE_S
        while not probe():
            if self.proc.poll() is not None and not probe():
                raise AssertionError(f"the supervisor exited ({self.proc.returncode}) before {what}:\n{self.log()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}:\n{self.log()}")
            time.sleep(0.02)

    def wait_for_workers(self, n: int) -> None:
        """Until ``n`` worker children (replacements included) have announced themselves."""
        self.wait_until(lambda: len(self.child_pids()) == n, f"{n} workers started")

    def finish(self) -> tuple[int, dict[str, object]]:
        """(exit status, the --json counts) once the supervisor exited."""
        out, _ = self.proc.communicate(timeout=DEADLINE_S)
        return self.proc.returncode, json.loads(out) if out.strip() else {}


@contextmanager
def fleet(tmp_path: Path, db: Path | str, *args: str) -> Iterator[Fleet]:
    """``stateward worker --db DB ARGS --json`` in a new process; killed (with its children) if still running."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])])
    env["STATEWARD_AGENTS"] = "nap_agents:registry"
    err = tmp_path / f"supervisor-{time.monotonic_ns()}.log"
    with err.open("w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "stateward.cli.main", "worker", "--db", str(db), *args, "--json"],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env=env,
            start_new_session=True,  # its own process group: the cleanup reaches the children too
        )
    try:
        yield Fleet(proc, err)
    finally:
        with suppress(ProcessLookupError):  # the group outlives its leader: children the test left running
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def submit(tmp_path: Path, db: Path | str, runs: int, **params: float | str) -> list[str]:
    (tmp_path / "nap_agents.py").write_text(AGENTS)
    sys.path.insert(0, str(tmp_path))
    try:
        import nap_agents  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(tmp_path))
    runtime = Runtime.open(str(db))
    agent = nap_agents.registry.create("naps", params)
    ids = [runtime.submit(agent, "Nap, then finish.").run_id for _ in range(runs)]
    runtime.close()
    sys.modules.pop("nap_agents", None)
    return ids


def statuses(db: Path | str, ids: list[str]) -> list[str]:
    runtime = Runtime.open(str(db), create=False)
    try:
        return [runtime.get(run_id).status.value for run_id in ids]
    finally:
        runtime.close()


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_the_children_claim_the_runs_and_exit_with_their_counts_summed(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    db = tmp_path / "runs.db" if backend == "sqlite" else request.getfixturevalue("pg_url")
    ids = submit(tmp_path, db, 12, naps=2, seconds=0.1)
    with fleet(tmp_path, db, "--processes", "3", "--idle-exit", "0.5") as f:
        code, counts = f.finish()
        log = f.log()
    assert code == 0, log
    assert statuses(db, ids) == ["COMPLETED"] * 12
    assert (counts["claimed"], counts["processes"], counts["replaced"], counts["errors"]) == (12, 3, 0, 0)
    pids = [int(p) for p in READY.findall(log)]
    assert len(set(pids)) == 3 and f.proc.pid not in pids  # three forked workers, none of them the supervisor
    per_child = [int(c) for c in STOPPED.findall(log)]
    assert sum(per_child) == 12 and sum(c > 0 for c in per_child) >= 2, log  # the work was shared


def test_async_workers_fork_too(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    ids = submit(tmp_path, db, 6, naps=1, seconds=0.05)
    with fleet(tmp_path, db, "--processes", "2", "--async", "--concurrency", "3", "--idle-exit", "0.5") as f:
        code, counts = f.finish()
    assert code == 0, f.log()
    assert statuses(db, ids) == ["COMPLETED"] * 6
    assert (counts["claimed"], counts["processes"]) == (6, 2)
    assert f.log().count("3 slot(s) (async, one event loop) on") == 2


@contextmanager
def two_calls_in_flight(tmp_path: Path) -> Iterator[tuple[Fleet, Path, list[str]]]:
    """A fleet of 2 with one run each, both runs' first (1 s) call in flight: (fleet, db, run ids)."""
    db = tmp_path / "runs.db"
    marks = tmp_path / "in-flight"
    marks.mkdir()
    ids = submit(tmp_path, db, 2, naps=3, seconds=1.0, mark=str(marks))
    with fleet(tmp_path, db, "--processes", "2") as f:
        f.wait_until(lambda: len(list(marks.iterdir())) == 2, "both runs' first call in flight")
        assert len({m.name.split("-")[0] for m in marks.iterdir()}) == 2  # one call in each child
        yield f, db, ids


def assert_drained(f: Fleet, db: Path, ids: list[str]) -> None:
    """Each child stopped by itself after its step: the call in flight finished and recorded, the lease
    released (not left to expire), the run waiting for the next worker."""
    assert len(STOPPED.findall(f.log())) == 2, f.log()
    runtime = Runtime.open(str(db), create=False)
    try:
        assert [runtime.store.lease_of(r) for r in ids] == [None, None]
        states = [runtime.get(r) for r in ids]
    finally:
        runtime.close()
    for state in states:
        assert (state.status.value, state.usage.tool_attempts) == ("RUNNING", 1)


def test_sigterm_is_forwarded_and_every_child_drains_its_step(tmp_path: Path) -> None:
    with two_calls_in_flight(tmp_path) as (f, db, ids):
        f.proc.send_signal(signal.SIGTERM)
        code, counts = f.finish()
    assert code == 0, f.log()
    assert (counts["claimed"], counts["stale_leases"], counts["errors"]) == (2, 0, 0)
    assert_drained(f, db, ids)


def test_a_killed_child_is_replaced_and_the_fleet_goes_on(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    submit(tmp_path, db, 0)
    with fleet(tmp_path, db, "--processes", "2") as f:
        f.wait_for_workers(2)
        victim = f.child_pids()[0]
        os.kill(victim, signal.SIGKILL)
        f.wait_for_workers(3)
        ids = submit(tmp_path, db, 4)
        f.wait_until(lambda: statuses(db, ids) == ["COMPLETED"] * 4, "the runs completed")
        f.proc.send_signal(signal.SIGTERM)
        code, counts = f.finish()
    assert code == 0, f.log()
    assert f"worker process {victim} was killed by SIGKILL; starting another" in f.log()
    assert (counts["claimed"], counts["replaced"]) == (4, 1)


def test_more_deaths_than_processes_within_a_minute_stop_the_fleet_with_5(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    submit(tmp_path, db, 0)
    with fleet(tmp_path, db, "--processes", "2") as f:
        for started in (2, 3, 4):  # two deaths are replaced; the third is one too many
            f.wait_for_workers(started)
            os.kill(f.child_pids()[-1], signal.SIGKILL)
        code, counts = f.finish()
    assert code == 5, f.log()
    assert "3 processes died within 60 s; stopping the others" in f.log()
    assert len(f.child_pids()) == 4 and counts["replaced"] == 2
    assert len(STOPPED.findall(f.log())) == 1  # the one left alive drained and stopped


def test_a_child_that_exits_by_itself_is_not_replaced_and_its_status_is_the_fleets(tmp_path: Path) -> None:
    db = tmp_path / "missing-dir" / "runs.db"  # every child fails to open the store, alike
    single = subprocess.run(
        [sys.executable, "-m", "stateward.cli.main", "worker", "--db", str(db), "--idle-exit", "0.1"],
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )
    with fleet(tmp_path, db, "--processes", "2", "--idle-exit", "0.1") as f:
        code, counts = f.finish()
    assert single.returncode != 0
    assert code == single.returncode, f.log()
    assert counts == {"processes": 2, "replaced": 0}  # no child got as far as counting
    assert f.log().count("error: ") == 2


@pytest.fixture
def nothing_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """A refusal that regressed fails here instead of forking the test process or running a worker."""

    def started(opts: WorkerOptions) -> None:
        raise AssertionError(f"a worker started with {opts}")

    monkeypatch.setattr(worker_cmd, "supervise", started)
    monkeypatch.setattr(worker_cmd, "run_worker", started)


@pytest.mark.usefixtures("nothing_starts")
@pytest.mark.parametrize("processes", [0, 65])
def test_a_process_count_out_of_range_is_refused(processes: int) -> None:
    with pytest.raises(SystemExit) as exc:
        worker_cmd.start_worker(WorkerOptions(db="unused.db", processes=processes))
    assert exc.value.code == 3


@pytest.mark.usefixtures("nothing_starts")
def test_one_metrics_port_for_several_processes_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        worker_cmd.start_worker(WorkerOptions(db="unused.db", processes=2, metrics_port=0, as_json=True))
    assert exc.value.code == 3
    assert json.loads(capsys.readouterr().out)["error"]["code"] == "INVALID_WORKER_CONFIG"


@pytest.mark.usefixtures("nothing_starts")
def test_several_processes_where_there_is_no_fork_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(os, "fork")
    with pytest.raises(SystemExit) as exc:
        worker_cmd.start_worker(WorkerOptions(db="unused.db", processes=2))
    assert exc.value.code == 3


def _gone(pid: int) -> bool:
    """Whether ``pid`` exited (a zombie left for an init that does not reap counts as exited)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return fields[0] in ("Z", "X")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the kernel's parent-death signal is Linux's")
def test_a_killed_supervisor_takes_its_children_along_and_they_drain(tmp_path: Path) -> None:
    with two_calls_in_flight(tmp_path) as (f, db, ids):
        children = f.child_pids()
        f.proc.send_signal(signal.SIGKILL)  # nothing is forwarded: the kernel has to tell the children
        f.proc.wait()
        deadline = time.monotonic() + DEADLINE_S
        while not all(_gone(pid) for pid in children) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert all(_gone(pid) for pid in children), f.log()
    assert_drained(f, db, ids)


# -- the supervisor's own decisions, with os.fork and os.kill replaced: nothing is forked here ---------------
@pytest.fixture
def no_fork(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """os.fork refuses (as with no memory left) and os.kill records what it was asked: (pid, signal)."""
    killed: list[tuple[int, int]] = []

    def refuse() -> int:
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(os, "fork", refuse)
    monkeypatch.setattr(os, "kill", lambda pid, sig: killed.append((pid, sig)))
    return killed


def test_no_worker_is_forked_once_the_workers_are_stopping(no_fork: list[tuple[int, int]]) -> None:
    supervisor = prefork.Supervisor(WorkerOptions(db="unused.db", processes=2), stop_signal=signal.SIGTERM)
    supervisor._fork(0)  # a stop that came between two forks, or before a replacement: no new worker
    assert (supervisor.children, supervisor.gave_up, no_fork) == ({}, False, [])


def test_a_fork_that_fails_stops_the_others(no_fork: list[tuple[int, int]], capsys: pytest.CaptureFixture[str]) -> None:
    supervisor = prefork.Supervisor(WorkerOptions(db="unused.db", processes=2), children={4242: 0})
    supervisor._fork(1)
    assert supervisor.gave_up and supervisor.stop_signal == signal.SIGTERM
    assert no_fork == [(4242, signal.SIGTERM)] and supervisor.children == {4242: 0}
    assert "cannot fork a worker process" in capsys.readouterr().err


def test_a_child_killed_by_a_signal_without_a_name_is_reported_by_number(
    no_fork: list[tuple[int, int]], capsys: pytest.CaptureFixture[str]
) -> None:
    realtime = signal.SIGRTMIN + 6
    supervisor = prefork.Supervisor(WorkerOptions(db="unused.db", processes=2), children={4242: 0}, gave_up=True)
    supervisor._reap(4242, realtime)  # a wait status of a process killed by that signal
    assert supervisor.codes == [5]
    assert f"worker process 4242 was killed by signal {realtime} while the workers stopped" in capsys.readouterr().err
