"""Parallel batches: ready items start together, up to ``max_parallel`` (4 by default), in work-item id order;
their calls interleave one per step; the same events in the same order on every run; a process killed in the
middle of a batch loses and repeats nothing."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from stateward import EventType, RunStatus, Runtime
from stateward.runtime.leases import LeasePolicy

sys.path.insert(0, str(Path(__file__).parent))
import batch_agents

FAST_LEASE = LeasePolicy(ttl_s=0.3, heartbeat_s=0.1)


@pytest.fixture(autouse=True)
def _log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    log = tmp_path / "stamps.log"
    monkeypatch.setenv("BATCH_LOG", str(log))
    monkeypatch.delenv("BATCH_CRASH_AT", raising=False)
    return log


def shape(runtime: Runtime, run_id: str) -> list[tuple[Any, ...]]:
    """The run's record without what differs between two runs (ids, times, hashes)."""
    out: list[tuple[Any, ...]] = []
    for e in runtime.store.read_events(run_id):
        p = e.payload
        if e.type is EventType.WORK_ITEM_STARTED:
            out.append(("started", p["work_item_id"], p.get("batch")))
        elif e.type is EventType.WORK_ITEM_ENDED:
            out.append(("ended", p["work_item_id"], p["outcome"]))
        elif e.type is EventType.TOOL_ATTEMPTED:
            obs = p["observation"]
            out.append(("call", obs["step"], obs["action"], obs["args"].get("item"), obs["args"].get("n")))
        else:
            out.append((e.type.value,))
    return out


def test_ready_items_start_as_one_batch_in_id_order_and_take_turns(tmp_path: Path, _log: Path) -> None:
    runtime = Runtime.open(str(tmp_path / "b.db"), agents=batch_agents.AGENTS)
    state = runtime.start(batch_agents.build(), batch_agents.GOAL.objective)
    assert state.status is RunStatus.COMPLETED
    record = shape(runtime, state.run_id)
    started = [r[1:] for r in record if r[0] == "started"]
    # Batch 1: the four ready items (up to the default 4), by id although the plan lists them W3, W1, W4, W2.
    assert started == [("W1", 1), ("W2", 1), ("W3", 1), ("W4", 1), ("W5", 2)]
    calls = [(r[3], r[4]) for r in record if r[0] == "call" and r[2] == "stamp"]
    # One call per step, round robin over the batch in id order; W5 only once the whole batch ended.
    first_round = [("W1", 1), ("W2", 1), ("W3", 1), ("W4", 1), ("W1", 2), ("W2", 2), ("W3", 2), ("W4", 2)]
    assert calls == [*first_round, ("W5", 1), ("W5", 2)]
    assert _log.read_text().splitlines() == [f"{w}#{n}" for w, n in calls]  # each ran exactly once
    runtime.close()


def test_a_batch_is_capped_at_max_parallel(tmp_path: Path) -> None:
    runtime = Runtime.open(str(tmp_path / "b.db"), agents=batch_agents.AGENTS)
    state = runtime.start(batch_agents.build(max_parallel=3), batch_agents.GOAL.objective)
    started = [r[1:] for r in shape(runtime, state.run_id) if r[0] == "started"]
    # W4 waits for the next batch, with W5 (ready once W1 and W2 are verified), by id.
    assert started == [("W1", 1), ("W2", 1), ("W3", 1), ("W4", 2), ("W5", 2)]
    runtime.close()


def test_the_same_run_records_the_same_events_in_the_same_order(tmp_path: Path, _log: Path) -> None:
    runtime = Runtime.open(str(tmp_path / "b.db"), agents=batch_agents.AGENTS)
    first = runtime.start(batch_agents.build(), batch_agents.GOAL.objective)
    _log.unlink()
    second = runtime.start(batch_agents.build(), batch_agents.GOAL.objective)
    assert shape(runtime, first.run_id) == shape(runtime, second.run_id)
    runtime.close()


CHILD = textwrap.dedent("""
    import sys
    sys.path.insert(0, {here!r})
    import batch_agents
    from stateward import Runtime
    from stateward.runtime.leases import LeasePolicy

    runtime = Runtime.open({db!r}, agents=batch_agents.AGENTS, lease=LeasePolicy(ttl_s=0.3, heartbeat_s=0.1))
    state = runtime.submit(batch_agents.build(side_effect={side_effect}), batch_agents.GOAL.objective)
    print(state.run_id, flush=True)
    for _ in range({steps}):
        state = runtime.step(state.run_id)
    import os
    os._exit(9)  # killed between two steps of the batch: its last step committed, the next never began
""")


def _killed_run(tmp_path: Path, db: Path, *, steps: int, crash_at: int | None, side_effect: bool) -> str:
    env = {**os.environ}
    if crash_at is not None:
        env["BATCH_CRASH_AT"] = str(crash_at)
    script = CHILD.format(here=str(Path(__file__).parent), db=str(db), steps=steps, side_effect=side_effect)
    child = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert child.returncode == 9, child.stderr
    return child.stdout.split()[0]


def _recovered(db: Path, run_id: str) -> tuple[Runtime, Any]:
    time.sleep(FAST_LEASE.ttl_s + 0.2)  # the dead process's lease runs out; nobody needs to release it
    runtime = Runtime.open(str(db), agents=batch_agents.AGENTS, lease=FAST_LEASE)
    return runtime, runtime.drive(run_id)


@pytest.mark.parametrize(
    ("steps", "crash_at", "side_effect"),
    [
        (3, None, False),  # killed after W2's first call committed, before W3's began
        (3, None, True),  # the same with a journalled side effect: its calls ran once each, none is in doubt
        (20, 6, False),  # dies inside the step of W2's second call, as the call starts: that step never committed
    ],
)
def test_a_process_killed_mid_batch_loses_and_repeats_no_call(
    tmp_path: Path, _log: Path, steps: int, crash_at: int | None, side_effect: bool
) -> None:
    reference_rt = Runtime.open(str(tmp_path / "ref.db"), agents=batch_agents.AGENTS)
    reference = reference_rt.start(batch_agents.build(side_effect=side_effect), batch_agents.GOAL.objective)
    expected_calls = _log.read_text().splitlines()
    expected = shape(reference_rt, reference.run_id)
    reference_rt.close()
    _log.unlink()

    db = tmp_path / "killed.db"
    run_id = _killed_run(tmp_path, db, steps=steps, crash_at=crash_at, side_effect=side_effect)
    before = _log.read_text().splitlines()
    assert 0 < len(before) < len(expected_calls)  # it died mid-batch, with calls of the batch done
    started = [r[1:] for r in shape(Runtime.open(str(db), agents=batch_agents.AGENTS), run_id) if r[0] == "started"]
    assert started == [("W1", 1), ("W2", 1), ("W3", 1), ("W4", 1)]  # the whole batch was in flight

    runtime, final = _recovered(db, run_id)
    assert final.status is RunStatus.COMPLETED
    ran = _log.read_text().splitlines()
    assert ran == expected_calls  # every call ran exactly once, none lost, none repeated, in the same order
    assert shape(runtime, run_id) == expected  # and the record is the uninterrupted run's
    runtime.close()
