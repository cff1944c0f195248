"""The loop stays flat as a run grows: no step re-serializes the history earlier steps observed.

Counted, never timed: pydantic dump calls over a whole run must grow linearly with its steps, and each
model request must carry the observations recorded before it by reference.
"""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from types import FunctionType, ModuleType
from typing import Any

import pytest
from pydantic import BaseModel
from tests.runtime.noop_loop import noop_agent

from stateward import RunStatus
from stateward.core.contract import DecisionContext, Observation, ObservationLog
from stateward.core.state import AgentRef, RunState
from stateward.models.base import ActionSpec, ModelRequest
from stateward.testing import temporary_runtime

STEPS = 200
DUMPS_PER_STEP = 10  # a step dumps a handful of models; a quadratic loop does STEPS / 2 per step on average


@pytest.fixture
def dumps(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every pydantic ``model_dump``/``model_dump_json`` call, by model class name."""
    calls: list[str] = []
    dump, dump_json = BaseModel.model_dump, BaseModel.model_dump_json

    def counted_dump(self: BaseModel, *args: Any, **kwargs: Any) -> Any:
        calls.append(type(self).__name__)
        return dump(self, *args, **kwargs)

    def counted_dump_json(self: BaseModel, *args: Any, **kwargs: Any) -> str:
        calls.append(type(self).__name__)
        return dump_json(self, *args, **kwargs)

    monkeypatch.setattr(BaseModel, "model_dump", counted_dump)
    monkeypatch.setattr(BaseModel, "model_dump_json", counted_dump_json)
    yield calls


def test_a_runs_serialization_work_grows_linearly_with_its_steps(tmp_path: Path, dumps: list[str]) -> None:
    agent, _ = noop_agent(STEPS)
    runtime = temporary_runtime(tmp_path)
    try:
        state = runtime.start(agent, "call noop until done")
    finally:
        runtime.close()
    assert (state.status, state.usage.tool_attempts) == (RunStatus.COMPLETED, STEPS)
    assert len(dumps) <= DUMPS_PER_STEP * STEPS, f"{len(dumps)} dumps for {STEPS} steps"
    assert dumps.count("Observation") <= 4 * STEPS  # a few times when recorded, never again by a later step


def test_each_request_carries_earlier_observations_by_reference(tmp_path: Path) -> None:
    agent, model = noop_agent(5)
    runtime = temporary_runtime(tmp_path)
    try:
        runtime.start(agent, "call noop until done")
    finally:
        runtime.close()
    requests = model.calls
    assert [len(r.observations) for r in requests] == [0, 1, 2, 3, 4, 5]  # each a snapshot of its step
    first, last = requests[1].observations[0], requests[-1].observations[0]
    assert first is last
    assert first == {
        "step": 1,
        "action": "noop",
        "args": {"i": 0},
        "status": "SUCCESS",
        "result": {"i": 0},
        "error_code": None,
        "artifacts": [],
        "evidence_id": "obs_1",  # its place in the run's log: what an artifact cites
    }


@pytest.mark.parametrize("window", [1, 2, 256])
def test_a_resumed_drive_shows_the_model_the_same_history(window: int) -> None:
    """The log rebuilt from the store at a drive's start matches what the drive that recorded it held,
    for observations still kept as objects and for older ones read back from their bytes."""
    observations = [
        Observation(step=1, action="search", args={"q": "naïve €"}, status="SUCCESS", result=[1.5, {"k": None}]),
        Observation(step=2, action="read", status="FAILED", error_code="TIMEOUT", artifacts=["a:v1"]),
        Observation(step=3, action="look", args={"n": 3}, status="SUCCESS", result={"x": 0.1, "ok": True}),
    ]
    log = ObservationLog(observations, window=window)
    # The log names each observation by its place in it; the rest is what was recorded.
    observations = [o.model_copy(update={"evidence_id": f"obs_{n}"}) for n, o in enumerate(observations, 1)]
    assert list(log.history()) == [o.model_dump(mode="json") for o in observations]
    assert list(log) == observations
    assert list(reversed(log)) == observations[::-1]
    assert log[-1:] == observations[-1:]
    assert log[0] == observations[0]
    assert log[-3] == observations[0]
    assert log.history()[1:] == [o.model_dump(mode="json") for o in observations[1:]]
    with pytest.raises(IndexError):
        log[3]


def _tracked_from(root: object) -> int:
    """How many garbage-collector-tracked objects ``root`` holds (classes, modules and functions not followed)."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, type | ModuleType | FunctionType) or not gc.is_tracked(obj):
            continue
        seen.add(id(obj))
        stack.extend(gc.get_referents(obj))
    return len(seen)


def test_a_long_history_gives_the_garbage_collector_nothing_to_walk() -> None:
    """Full collections walk every tracked object; a history kept as tracked objects made every step of a
    long run pay for all the steps before it. Beyond the recent window an observation is only bytes."""

    def log_of(n: int) -> ObservationLog:
        return ObservationLog(
            (
                Observation(
                    step=i, action="noop", args={"i": i}, status="SUCCESS", result={"i": [i]}, artifacts=["a:v1"]
                )
                for i in range(n)
            ),
            window=8,
        )

    small, large = log_of(100), log_of(3000)
    assert _tracked_from(large) == _tracked_from(small) < 100
    list(small.history())  # reading the whole history keeps the window's JSON dicts, no more
    list(large.history())
    assert _tracked_from(large) == _tracked_from(small) < 200
    assert large[5] == Observation(
        step=5,
        action="noop",
        args={"i": 5},
        status="SUCCESS",
        result={"i": [5]},
        artifacts=["a:v1"],
        evidence_id="obs_6",
    )


def test_a_request_over_a_long_history_copies_none_of_it() -> None:
    """A model request carries a view of the log: making one allocates what a single step needs, not a
    list of the whole history (10,000 pointers are 80 KB)."""
    log = ObservationLog(Observation(step=i, action="noop", status="SUCCESS", result=i) for i in range(10_000))
    ctx = DecisionContext(
        state=RunState(run_id="run_x", goal="g", agent=AgentRef(name="tests:none")),
        observations=log,
        inventory=(),
        actions={},
    )
    ctx.request(purpose="decide", goal="g")  # warm: pydantic's first validation of the model allocates
    tracemalloc.start()
    try:
        request = ctx.request(purpose="decide", goal="g")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 20_000, peak
    assert len(request.observations) == 10_000
    log.record(Observation(step=10_000, action="noop", status="SUCCESS"))
    assert len(request.observations) == 10_000  # the request shows what had been observed when it was made
    assert request.observations[-1] == {
        "step": 9_999,
        "action": "noop",
        "args": {},
        "status": "SUCCESS",
        "result": 9_999,
        "error_code": None,
        "artifacts": [],
        "evidence_id": "obs_10000",
    }
    assert request.model_dump()["observations"][:1] == [log.history()[0]]


@pytest.mark.parametrize("count", [0, 1, 3])
def test_a_requests_size_is_known_without_serializing_its_history(count: int) -> None:
    log = ObservationLog(
        Observation(step=i, action="look", args={"q": "ünïcode ✓", "n": i}, status="SUCCESS", result={"x": 0.1 * i})
        for i in range(count)
    )
    fields: dict[str, Any] = {
        "purpose": "decide",
        "goal": "find it",
        "visible_actions": [ActionSpec(name="look", input_schema={"type": "object"})],
        "facts": {"artifacts": {"brief": "brief:v1"}},
    }
    request = ModelRequest.with_history(log.history(), log.json_chars, **fields)
    assert request.json_chars() == len(request.model_dump_json())
    assert request == ModelRequest(observations=list(log.history()), **fields)
    changed = request.model_copy(update={"observations": [{"other": "list"}]})  # the known size no longer applies
    assert changed.json_chars() == len(changed.model_dump_json())
