"""``stateward chaos``: run many agents while killing, pausing and restarting their workers.

Worker processes are forked from this one (a kill is a real SIGKILL of a real process; a fork
restarts in milliseconds, so thousands of kills fit in minutes). They die at random moments and,
through a fault injector, at every persistence boundary; some are SIGSTOPped past their lease TTL.
Answers to the agents' approval requests come from forked approver processes that may die too.
At the end every run is compared with a fault-free run of the same seed.

Every child has a deadline, as the campaign's forked drivers do (chaos/forked.py): a worker stops itself
after ``worker_lifetime_s`` (and is replaced), an approver makes one pass; one still running
``child_deadline_s`` after it was forked (time it spent SIGSTOPped by the storm not counted) is hung - it
inherited a held lock, or an object believing a thread of the parent is alive - and is SIGKILLed, replaced
and reported in ``hung_children`` (a liveness failure, never counted as a kill); the storm then stops
rather than wait on what the hung child left. A storm still unfinished at ``max_seconds`` says so in
``timed_out``; either breaks the storm.
"""

from __future__ import annotations

import os
import random
import signal
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from stateward.chaos.agent import build_agent
from stateward.chaos.config import ChaosConfig
from stateward.chaos.faults import RandomKill
from stateward.chaos.forked import HungChild
from stateward.chaos.ledger import ledger_for
from stateward.chaos.verify import Reference, verify
from stateward.core.errors import ErrorCode, UserError
from stateward.core.status import RunStatus
from stateward.runtime.agent_registry import process_agents
from stateward.runtime.leases import LeasePolicy
from stateward.runtime.runtime import Runtime
from stateward.store.backends import open_store
from stateward.store.base import Store

STOPPED = {RunStatus.COMPLETED.value, RunStatus.FAILED.value, RunStatus.CANCELLED.value}


@dataclass
class _Fleet:
    workers: dict[int, int] = field(default_factory=dict)  # pid -> slot
    approver: int | None = None
    stopped: dict[int, float] = field(default_factory=dict)  # pid -> when to SIGCONT
    kills: Counter[str] = field(default_factory=Counter)  # "worker" / "approver" processes SIGKILLed
    sigstops: int = 0
    deadlines: dict[int, tuple[float, float]] = field(default_factory=dict)  # pid -> (forked at, deadline)
    hung: list[HungChild] = field(default_factory=list)
    hung_pids: set[int] = field(default_factory=set)  # killed for missing their deadline: not storm kills


def _child(target: Any, *args: Any) -> int:
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 0
        try:
            target(*args)
        except BaseException:
            code = 1
        os._exit(code)
    return pid


def _worker_main(cfg: ChaosConfig, slot: int, generation: int, kill_log: str) -> None:
    faults = RandomKill(f"{cfg.seed}:w{slot}:{generation}", cfg.boundary_kill_probability, log_path=kill_log)
    runtime = Runtime(
        open_store(cfg.db),
        agents=process_agents(with_test_agents=True),
        lease=LeasePolicy(ttl_s=cfg.lease_ttl_s, heartbeat_s=cfg.heartbeat_s),
        owner=f"chaos-w{slot}-g{generation}-{os.getpid()}",
        faults=faults,
    )
    from stateward.runtime.worker import Worker

    ledger = ledger_for(cfg.db)
    worker = Worker(
        runtime, concurrency=1, poll_s=0.02, expire_every_s=3600, observer=lambda kind, run_id: ledger.log(kind, run_id)
    )
    signal.signal(signal.SIGTERM, lambda *_: worker.stop.set())
    # Its lifetime: then it stops between steps and the storm forks a fresh one (its deadline is later).
    signal.signal(signal.SIGALRM, lambda *_: worker.stop.set())
    signal.setitimer(signal.ITIMER_REAL, cfg.worker_lifetime_s)
    worker.run()


def _approver_main(cfg: ChaosConfig, generation: int, kill_log: str) -> None:
    faults = RandomKill(f"{cfg.seed}:a:{generation}", cfg.boundary_kill_probability * 3, log_path=kill_log)
    runtime = Runtime(
        open_store(cfg.db),
        agents=process_agents(with_test_agents=True),
        owner=f"chaos-approver-{generation}",
        faults=faults,
    )
    for record in runtime.store.list_requests(None, open_only=True):
        try:
            runtime.approve(record.run_id, record.request.request_id, by="chaos-approver", drive=False)
        except Exception:  # a refused or raced answer is fine: the next approver looks again
            continue


def _refuse_used_store(db: str) -> None:
    """The storm approves every open request and drives every runnable run in its store, and resets its
    ledger: pointed at a store that holds anything, it would act on runs that are not its own."""
    store = open_store(db)
    try:
        if store.list_runs(limit=1):
            raise UserError(
                f"{db} already holds runs; stateward chaos approves and drives every run in its store,"
                " so it needs a new database (pass --db with a path that does not exist yet)",
                code=ErrorCode.CHAOS_STORE_IN_USE,
            )
    finally:
        store.close()


def _pid_of(owner: str) -> int:
    """A chaos worker's lease owner is ``chaos-w<slot>-g<generation>-<pid>`` (a heartbeat may add ``/...``)."""
    return int(owner.split("-")[-1].split("/")[0])


class Harness:
    def __init__(self, cfg: ChaosConfig):
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        self.fleet = _Fleet()
        self.generation = 0
        self._poller: Store | None = None
        self.kill_log = ""

    def run(self) -> dict[str, Any]:
        _refuse_used_store(self.cfg.db)
        fd, self.kill_log = tempfile.mkstemp(prefix="stateward-chaos-", suffix=".kills")
        os.close(fd)
        try:
            return self._storm()
        finally:
            os.unlink(self.kill_log)

    def _storm(self) -> dict[str, Any]:
        cfg = self.cfg
        started = time.monotonic()
        run_ids = self._submit()
        reference = Reference.build(cfg, run_ids)
        deadline = started + cfg.max_seconds
        next_kill = time.monotonic()
        timed_out = False
        try:
            for slot in range(cfg.workers):
                self._spawn_worker(slot)
            while True:
                if time.monotonic() >= deadline:
                    timed_out = True
                    break
                self._overdue()
                if self.fleet.hung:
                    break  # a breach already: the runs a hung child held are not worth waiting for
                self._reap()
                self._wake_stopped()
                total_kills = sum(self.fleet.kills.values())
                statuses, busy = self._statuses(run_ids)
                if total_kills < cfg.kills and time.monotonic() >= next_kill:
                    self._strike(busy)
                    next_kill = time.monotonic() + self.rng.uniform(0.02, 0.25)
                if self.fleet.approver is None and RunStatus.WAITING_FOR_USER.value in statuses.values():
                    self.generation += 1
                    self._close_poller()
                    self.fleet.approver = _child(_approver_main, cfg, self.generation, self.kill_log)
                    self._watch(self.fleet.approver)
                if total_kills >= cfg.kills and all(s in STOPPED for s in statuses.values()):
                    break
                time.sleep(0.02)
        finally:
            # Whatever happens here, no worker is left running, or stopped, behind us.
            self._shutdown()
        report = verify(cfg, run_ids, reference)
        boundary = Counter(Path(self.kill_log).read_text().split())
        report["kills"] = sum(self.fleet.kills.values())
        report["kills_by_process"] = dict(sorted(self.fleet.kills.items()))
        report["kills_at_boundaries"] = dict(sorted(boundary.items()))
        report["sigstops_past_ttl"] = self.fleet.sigstops
        report["hung_children"] = [asdict(h) for h in self.fleet.hung]
        report["timed_out"] = timed_out
        report["seconds"] = round(time.monotonic() - started, 1)
        report["workers"] = cfg.workers
        report["seed"] = cfg.seed
        return report

    def _submit(self) -> list[str]:
        ledger = ledger_for(self.cfg.db)
        ledger.setup(reset=True)
        ledger.close()
        runtime = Runtime(open_store(self.cfg.db), agents=process_agents(with_test_agents=True))
        ids = []
        for i in range(self.cfg.runs):
            run_id = f"chaos-{self.cfg.seed}-{i:04d}-{self.rng.randrange(16**6):06x}"
            runtime.submit(build_agent(self.cfg.db, self.cfg.seed, i), "post three entries", run_id=run_id)
            ids.append(run_id)
        runtime.close()
        ledger_for(self.cfg.db).close()
        return ids

    def _spawn_worker(self, slot: int) -> None:
        self.generation += 1
        self._close_poller()
        pid = _child(_worker_main, self.cfg, slot, self.generation, self.kill_log)
        self.fleet.workers[pid] = slot
        self._watch(pid)

    def _watch(self, pid: int) -> None:
        now = time.monotonic()
        self.fleet.deadlines[pid] = (now, now + self.cfg.child_deadline_s)

    def _overdue(self) -> None:
        """SIGKILL every child past its deadline and record it as hung; ``_reap`` then replaces it."""
        now = time.monotonic()
        for pid, (forked, deadline) in list(self.fleet.deadlines.items()):
            if now < deadline or pid in self.fleet.stopped:
                continue
            role = "approver" if pid == self.fleet.approver else "worker"
            del self.fleet.deadlines[pid]
            self.fleet.hung_pids.add(pid)
            self.fleet.hung.append(HungChild(role, pid, round(now - forked, 2)))
            os.kill(pid, signal.SIGKILL)

    def _strike(self, busy: set[int]) -> None:
        """SIGKILL a worker, preferring one that is driving a run — or SIGSTOP one past its lease TTL."""
        live = [pid for pid in self.fleet.workers if pid not in self.fleet.stopped]
        if not live:
            return
        driving = [pid for pid in live if pid in busy]
        pid = self.rng.choice(driving if driving and self.rng.random() < 0.85 else live)
        if self.rng.random() < self.cfg.stop_probability:
            os.kill(pid, signal.SIGSTOP)
            frozen_s = self.cfg.lease_ttl_s * 1.6
            self.fleet.stopped[pid] = time.monotonic() + frozen_s
            forked, deadline = self.fleet.deadlines.get(pid, (0.0, float("inf")))
            self.fleet.deadlines[pid] = (forked, deadline + frozen_s)  # frozen by us: not its own delay
            self.fleet.sigstops += 1
            return
        os.kill(pid, signal.SIGKILL)

    def _wake_stopped(self) -> None:
        now = time.monotonic()
        for pid, when in list(self.fleet.stopped.items()):
            if now >= when:
                os.kill(pid, signal.SIGCONT)
                del self.fleet.stopped[pid]

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.fleet.deadlines.pop(pid, None)
            hung = pid in self.fleet.hung_pids
            self.fleet.hung_pids.discard(pid)
            killed = not hung and os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
            if pid == self.fleet.approver:
                self.fleet.approver = None
                if killed:
                    self.fleet.kills["approver"] += 1
                continue
            slot = self.fleet.workers.pop(pid, None)
            self.fleet.stopped.pop(pid, None)
            if slot is None:
                continue
            if killed:
                self.fleet.kills["worker"] += 1
            self._spawn_worker(slot)

    def _statuses(self, run_ids: list[str]) -> tuple[dict[str, str], set[int]]:
        """Each run's status, and the pids of workers holding a live lease right now."""
        if self._poller is None:
            # Read-only, and closed before every fork: a child must not inherit a store whose thread (a WAL
            # checkpointer's connect, a pool's worker) held a lock at the fork.
            self._poller = open_store(self.cfg.db)
        rows = self._poller.list_runs(limit=len(run_ids) + 1000)
        by_id = {r.run_id: r.status for r in rows}
        busy = {_pid_of(r.lease_owner) for r in rows if r.lease_owner and r.lease_owner.startswith("chaos-w")}
        return {r: by_id.get(r, "MISSING") for r in run_ids}, busy

    def _close_poller(self) -> None:
        if self._poller is not None:
            self._poller.close()
            self._poller = None

    def _shutdown(self) -> None:
        self._close_poller()
        for pid in list(self.fleet.stopped):
            os.kill(pid, signal.SIGCONT)
        for pid in list(self.fleet.workers):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + min(10.0, self.cfg.child_deadline_s)
        while self.fleet.workers or self.fleet.approver is not None:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                if time.monotonic() > deadline:
                    for p in [*self.fleet.workers, *([self.fleet.approver] if self.fleet.approver else [])]:
                        os.kill(p, signal.SIGKILL)
                time.sleep(0.02)
                continue
            self.fleet.workers.pop(pid, None)
            if pid == self.fleet.approver:
                self.fleet.approver = None
