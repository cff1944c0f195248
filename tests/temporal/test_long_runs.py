"""Runs longer or larger than one workflow execution carries: many continue-as-new executions while a caller
waits for the run to settle, and a book that would outgrow Temporal's payload limit ending named, not stuck."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

import pytest
from tests.temporal.conftest import DEADLINE_S
from tests.temporal.temporal_agents import registry

from stateward.core.events import EventType
from stateward.core.status import RunStatus
from stateward.runtime.run_start import new_run
from stateward.temporal.client import TemporalRuntime
from stateward.temporal.messages import DEFAULT_BOOK_BYTES, MAX_BOOK_BYTES, StartRun

pytestmark = [pytest.mark.temporal, pytest.mark.slow]
T = TypeVar("T")


def _within_deadline(call: Callable[[], T]) -> T:
    """``call()``, failing the test if it has not returned by the deadline (a waiter never answered would hang)."""
    returned: list[T] = []
    thread = threading.Thread(target=lambda: returned.append(call()), daemon=True)
    thread.start()
    thread.join(DEADLINE_S)
    assert returned, f"no answer within {DEADLINE_S:g}s"
    return returned[0]


def _executions(runtime: TemporalRuntime, run_id: str) -> int:
    """How many workflow executions the run has had (one, plus one per continue-as-new)."""

    async def count() -> int:
        found = runtime._conn.client.list_workflows(f"WorkflowId = '{run_id}'")
        return len([execution async for execution in found])

    return runtime._conn.run(count())


def test_a_caller_waiting_for_the_run_is_answered_across_continue_as_new(temporal_url: str, worker: None) -> None:
    runtime = TemporalRuntime.open(temporal_url, agents=registry, max_history_events=20)
    try:
        agent = registry.create("reader", {"pages": 12})
        state = _within_deadline(lambda: runtime.start(agent, "read the document"))
        assert state.status is RunStatus.COMPLETED, state
        assert state.usage.steps == 13
        assert _executions(runtime, state.run_id) >= 3  # it went on as new twice or more while start waited
        events = runtime.events(state.run_id)
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        assert [e.type for e in events].count(EventType.TOOL_ATTEMPTED) == 12
    finally:
        runtime.close()


def test_a_book_that_would_outgrow_the_payload_limit_ends_book_full(temporal_url: str, worker: None) -> None:
    limit = 40_000
    runtime = TemporalRuntime.open(temporal_url, agents=registry, max_book_bytes=limit)
    try:
        state = runtime.start(registry.create("reader", {"pages": 40, "page_bytes": 4000}), "read a large document")
        assert (state.status, state.terminal_reason) == (RunStatus.FAILED, "book_full")
        events = runtime.events(state.run_id)  # the ended run's book reads whole, with no step lost
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        pages = [e for e in events if e.type is EventType.TOOL_ATTEMPTED]
        assert 5 <= len(pages) < 40  # stopped well before the 40 pages, each of 4,000 bytes
        held = sum(len(e.model_dump_json()) for e in events[:-2])
        assert held < limit + 2 * 4000  # the step that found it full added only its end
        ended = events[-2] if events[-1].type is EventType.RUN_EXITED else events[-1]
        assert ended.payload["reason"] == "book_full" and "limit 40000" in ended.payload["message"]
    finally:
        runtime.close()


def test_the_book_bound_stays_under_temporals_payload_limit() -> None:
    assert DEFAULT_BOOK_BYTES < MAX_BOOK_BYTES == 2 * 1024 * 1024
    with pytest.raises(ValueError):
        StartRun.model_validate({**_start(), "max_book_bytes": MAX_BOOK_BYTES + 1})


def _start() -> dict[str, object]:
    state, started = new_run(registry.create("reader", {"pages": 1}), "read")
    return {"state": state, "started": started}
