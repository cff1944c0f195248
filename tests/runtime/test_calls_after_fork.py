"""Calls still run in a process forked after calls ran in its parent (as chaos/forked.py forks drivers).

The call runner keeps idle threads for the next calls, and one watcher thread per process notices a pause
asked while a step is in flight. A forked child has none of its parent's threads, while the objects it
inherits still list them: a child that handed its first call to an inherited idle thread, or armed a step
with the inherited watcher, would wait forever. Both must see the new process id and start afresh. The
child gets a deadline: a hang fails this test instead of hanging it.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from stateward import Agent, Budget, RunStatus, Runtime, ToolRegistry, tool
from stateward.controllers.react import ReActController
from stateward.core.calls import default_runner
from stateward.core.state import AgentRef
from stateward.models.base import ModelRequest
from stateward.models.scripted import ScriptedModel

CHILD_DEADLINE_S = 60.0
WAIT_S = 20.0


def _agent(release: threading.Event | None = None, in_flight: threading.Event | None = None) -> Agent:
    @tool(description="Read a page (slowly when told to).", timeout_s=60)
    def read(page: int) -> dict[str, Any]:
        if in_flight is not None and release is not None:
            in_flight.set()
            release.wait(WAIT_S)
        return {"text": f"page {page}"}

    def policy(req: ModelRequest) -> dict[str, Any]:
        if req.observations:
            return {"type": "FINISH", "reason": "read"}
        return {"type": "EXECUTE_TOOL", "action": "read", "args": {"page": 1}}

    return Agent(
        name="reader",
        controller=ReActController(ScriptedModel(policy)),
        tools=ToolRegistry([read]),
        ref=AgentRef(name="tests:reader"),
        budget=Budget(max_steps=4),
    )


def _in_child(db: str, out: Path) -> dict[str, Any]:
    """What the child checks: a whole run completes (its model and tool calls on the runner), and a pause
    asked while its read is in flight lands (the watcher serves this process)."""
    found: dict[str, Any] = {"pid": os.getpid()}
    runtime = Runtime.open(db)
    found["run"] = runtime.start(_agent(), "read a page").status.value
    release, in_flight = threading.Event(), threading.Event()
    result: dict[str, RunStatus] = {}
    run_id = runtime.submit(_agent(release, in_flight), "read slowly").run_id
    slow = threading.Thread(target=lambda: result.setdefault("s", runtime.drive(run_id).status))
    slow.start()
    try:
        found["in_flight"] = in_flight.wait(WAIT_S)
        Runtime.open(db).pause(run_id, by="child")
        slow.join(WAIT_S)
        found["paused"] = result.get("s", RunStatus.RUNNING).value
    finally:
        release.set()
    out.write_text(json.dumps(found))
    return found


def test_a_child_forked_after_calls_ran_in_its_parent_runs_calls_and_notices_a_pause(tmp_path: Path) -> None:
    db = str(tmp_path / "fork.db")
    parent = Runtime.open(db)
    assert parent.start(_agent(), "read a page").status is RunStatus.COMPLETED
    assert default_runner().threads >= 1  # an idle runner thread, which the child will not have
    out = tmp_path / "child.json"
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 1
        try:
            found = _in_child(db, out)
            code = 0 if (found["run"], found["paused"]) == ("COMPLETED", "PAUSED") else 2
        except BaseException:
            out.write_text(json.dumps({"error": traceback.format_exc()}))
        finally:
            os._exit(code)
    deadline = time.monotonic() + CHILD_DEADLINE_S
    status = None
    while status is None and time.monotonic() < deadline:
        done, wait_status = os.waitpid(pid, os.WNOHANG)
        status = wait_status if done else None
        time.sleep(0.02)
    if status is None:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert status is not None, "the forked child hung: it waited on a thread its parent had"
    found = json.loads(out.read_text())
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, found
    assert found["pid"] == pid and found["run"] == "COMPLETED" and found["paused"] == "PAUSED"
    # the parent's own runner and watcher are untouched by the child
    assert parent.start(_agent(), "read a page").status is RunStatus.COMPLETED
    parent.close()
