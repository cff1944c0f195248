"""What one step of the loop does, counted, never timed: a value validated at the edge where it entered is
passed on by reference, not copied or serialized again at every hand-off.

A ReAct run over a no-op tool is driven for ``STEPS`` tool steps while pydantic's copy and dump methods,
the models it builds, the JSON encoder's serializations and the store's breaker reads are counted; each
count per step is pinned to what the step needs.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from tests.runtime.noop_loop import noop_agent

from stateward import RunStatus, Runtime
from stateward.core.journal import BreakerState
from stateward.core.state import RunState
from stateward.store.sqlite import SQLiteStore

STEPS = 30


class CountingStore(SQLiteStore):
    """A SQLite store that counts how often the gateway reads a tool's circuit breaker."""

    breaker_reads = 0

    def get_breaker(self, tool: str) -> BreakerState | None:
        self.breaker_reads += 1
        return super().get_breaker(tool)


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """Every pydantic ``model_copy``, ``model_dump`` and ``model_dump_json`` call, as ``method:Class``."""
    counted: Counter[str] = Counter()

    def counting(name: str) -> Any:
        original = getattr(BaseModel, name)

        def method(self: BaseModel, *args: Any, **kwargs: Any) -> Any:
            counted[f"{name}:{type(self).__name__}"] += 1
            return original(self, *args, **kwargs)

        return method

    for name in ("model_copy", "model_dump", "model_dump_json"):
        monkeypatch.setattr(BaseModel, name, counting(name))
    yield counted


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """Every pydantic model built through its constructor (validated), by class name."""
    counted: Counter[str] = Counter()
    original = BaseModel.__init__

    def init(self: BaseModel, /, **data: Any) -> None:
        counted[type(self).__name__] += 1
        original(self, **data)

    monkeypatch.setattr(BaseModel, "__init__", init)
    yield counted


@pytest.fixture
def encoded(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """Every document the stdlib JSON encoder serializes (``json.dumps`` and canonical JSON both come here)."""
    counted: Counter[str] = Counter()
    original = json.JSONEncoder.iterencode

    def iterencode(self: json.JSONEncoder, o: Any, _one_shot: bool = False) -> Any:
        counted[type(o).__name__] += 1
        return original(self, o, _one_shot)

    monkeypatch.setattr(json.JSONEncoder, "iterencode", iterencode)
    yield counted


def run_steps(tmp_path: Path, steps: int) -> tuple[RunState, CountingStore]:
    store = CountingStore(tmp_path / "steps.db")
    runtime = Runtime(store)
    try:
        state = runtime.start(noop_agent(steps)[0], "call noop until done")
    finally:
        runtime.close()
    assert (state.status, state.usage.tool_attempts) == (RunStatus.COMPLETED, steps)
    return state, store


def test_a_tool_step_copies_the_run_state_twice_and_dumps_its_observation_once(
    tmp_path: Path, calls: Counter[str]
) -> None:
    """One new state for the decision and one for the tool's outcome (a copy per changed field was five
    per step); the observation's JSON form is made once and shared by the step's event and the run's log."""
    run_steps(tmp_path, STEPS)
    steps = STEPS + 1  # the finishing decision is a step too
    assert calls["model_copy:RunState"] <= 2 * steps, calls
    assert calls["model_dump:Observation"] + calls["model_dump_json:Observation"] == STEPS, calls
    assert calls["model_copy:ModelRequest"] == 0, calls  # the history is carried by reference, never copied in


def test_a_successful_call_reads_the_circuit_breaker_once(tmp_path: Path) -> None:
    """Admission reads the circuit; a success under a closed, clean circuit has nothing to record."""
    _, store = run_steps(tmp_path, STEPS)
    assert store.breaker_reads == STEPS


# What a tool step builds, by constructor (validated): five events (signal_received, runtime_validated,
# tool_attempted, and the stored, compacted forms of the first and last), the model's request and reply
# (with its usage), the decision, the step's write, the gateway's call, context, arguments, attempt record
# and outcome, and the observation.
MODELS_PER_TOOL_STEP = 16


def test_a_tool_step_builds_sixteen_models_and_no_breaker_state(tmp_path: Path, built: Counter[str]) -> None:
    """Values are validated where they enter, once; a circuit that never tripped is not rebuilt per call."""
    run_steps(tmp_path, STEPS)
    per_run = sum(n for name, n in built.items() if n < STEPS)  # the agent, its policies, the run: once each
    assert sum(built.values()) - per_run <= MODELS_PER_TOOL_STEP * (STEPS + 1), built
    assert built["NewEvent"] <= 5 * (STEPS + 1) + 1, built  # the finishing step's five too, and run_started
    assert built["BreakerState"] <= 1, built  # the default CLOSED state, made once per gateway


def test_a_tool_call_serializes_its_arguments_once(tmp_path: Path, encoded: Counter[str]) -> None:
    """The call's canonical arguments serve both its idempotency key and its attempts' input hash; the other
    stdlib serializations of a step are the result's size and the scripted model's reply."""
    run_steps(tmp_path, STEPS)
    assert encoded["dict"] <= 3 * (STEPS + 1), encoded
