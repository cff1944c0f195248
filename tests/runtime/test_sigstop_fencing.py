"""A worker paused past its lease TTL (SIGSTOP) finds itself fenced when it wakes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from stateward import RunStatus, Runtime
from stateward.runtime.leases import LeasePolicy
from stateward.store.sqlite import SQLiteStore
from stateward_demos import blog_fixtures as fx
from stateward_demos.blog import build_agent

pytestmark = pytest.mark.slow

CHILD = textwrap.dedent("""
    import os, signal, sys
    from stateward import Runtime, StaleLeaseError
    from stateward.runtime.leases import LeasePolicy
    from stateward.store.sqlite import SQLiteStore

    class StopAfterFirstCommit:
        done = False
        def point(self, name):
            if name == "after_commit" and not self.done:
                self.done = True
                os.kill(os.getpid(), signal.SIGSTOP)  # frozen here, lease still "held"

    rt = Runtime(SQLiteStore(sys.argv[1]), lease=LeasePolicy(ttl_s=0.6, heartbeat_s=0.2),
                 owner="sleepy", faults=StopAfterFirstCommit())
    try:
        rt.drive(sys.argv[2])
    except StaleLeaseError as exc:
        print(exc.code, flush=True)
        sys.exit(3)
    print("NOT FENCED", flush=True)
""")


def _stopped(pid: int) -> bool:
    return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("T")


def test_worker_woken_after_takeover_is_fenced(db_path: Path) -> None:
    runtime = Runtime(SQLiteStore(db_path), lease=LeasePolicy(ttl_s=3, heartbeat_s=1), owner="rescuer")
    run_id = runtime.submit(build_agent("react"), fx.GOAL).run_id
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(db_path), run_id], stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not _stopped(child.pid):
            assert time.monotonic() < deadline and child.poll() is None, "child never reached its first commit"
            time.sleep(0.02)
        time.sleep(1.0)  # past the 0.6 s TTL: the lease is up for grabs
        state = runtime.drive(run_id)  # takeover, and drive to the wait
        assert state.status is RunStatus.WAITING_FOR_USER
        os.kill(child.pid, signal.SIGCONT)
        out, _ = child.communicate(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 3 and out.strip() == "STALE_LEASE"
    events = runtime.store.read_events(run_id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    versions = [e.lease_version for e in events if e.lease_version]
    assert versions == sorted(versions) and len(set(versions)) == 2  # the sleeper's, then the rescuer's
    assert runtime.get(run_id).status is RunStatus.WAITING_FOR_USER
    runtime.close()
