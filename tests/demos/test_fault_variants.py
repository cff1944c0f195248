"""The blog and refund agents under the source's faults (``fault=...``): each meets its runtime protection,
read back from the run's own records (the observers the gates campaign counts cells by)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from stateward import ErrorCode, RunStatus, Runtime, UserError
from stateward.chaos import observe
from stateward.chaos.forked import finish_with
from stateward.core.events import Event, EventType
from stateward.core.state import RunState
from stateward_demos import blog, refund_agent


def drive(tmp_path: Path, agent: Any) -> tuple[RunState, list[Event]]:
    """Drive the run to a stop in a new store, approving what it asks approval for."""
    runtime = Runtime.open(str(tmp_path / "runs.db"))
    run_id = runtime.submit(agent, "goal").run_id
    state = finish_with(runtime, run_id, time.monotonic() + 30)
    events = runtime.store.read_events(run_id)
    runtime.close()
    return state, events


def attempts(events: list[Event]) -> list[dict[str, Any]]:
    return [e.payload["observation"] for e in events if e.type is EventType.TOOL_ATTEMPTED]


def test_blog_a_read_that_times_out_once_is_retried_and_the_draft_is_written(tmp_path: Path) -> None:
    state, events = drive(tmp_path, blog.build_agent(fault="timeout-once"))
    assert state.status is RunStatus.COMPLETED and observe.timeout_then_recovery(state, events)


def test_blog_materials_down_ask_a_person_after_three_failed_reads(tmp_path: Path) -> None:
    state, events = drive(tmp_path, blog.build_agent(fault="materials-down"))
    assert state.status is RunStatus.WAITING_FOR_USER and observe.three_failures(state, events)
    assert state.pending is not None and "cannot be read" in state.pending.question


def test_blog_the_same_read_repeated_ends_as_no_progress(tmp_path: Path) -> None:
    state, events = drive(tmp_path, blog.build_agent(fault="same-search"))
    assert state.terminal_reason == "no_progress" and state.usage.steps <= 8
    assert observe.same_search(state, events)


def test_blog_a_planted_instruction_is_refused_and_the_run_goes_on(tmp_path: Path) -> None:
    state, events = drive(tmp_path, blog.build_agent(fault="injection"))
    assert observe.prompt_injection(state, events)
    assert "publish_post" not in {o["action"] for o in attempts(events)}
    assert state.status is RunStatus.COMPLETED and "draft" in state.artifacts


def test_blog_faults_are_named_and_run_only_the_scripted_react_agent() -> None:
    with pytest.raises(UserError) as unknown:
        blog.build_agent(fault="gremlins")
    assert unknown.value.code == ErrorCode.UNKNOWN_FIXTURE
    with pytest.raises(UserError):
        blog.build_agent(controller="workflow", fault="injection")
    assert blog.build_agent(fault="injection").ref.params["fault"] == "injection"


def test_refund_payment_system_down_asks_a_person_after_three_attempts_and_refunds_nothing(tmp_path: Path) -> None:
    book = str(tmp_path / "book.db")
    state, events = drive(tmp_path, refund_agent.build_agent(fault="payments-down", book=book))
    assert state.status is RunStatus.WAITING_FOR_USER and observe.three_failures(state, events)
    assert refund_agent.RefundBook(book).refunds_of(state.run_id) == 0


def test_refund_a_planted_instruction_moves_no_money_and_the_refund_completes(tmp_path: Path) -> None:
    book = str(tmp_path / "book.db")
    state, events = drive(tmp_path, refund_agent.build_agent(fault="injection", book=book))
    assert observe.prompt_injection(state, events)
    assert refund_agent.PLANTED_ACTION not in {o["action"] for o in attempts(events)}
    assert state.status is RunStatus.COMPLETED and refund_agent.RefundBook(book).refunds_of(state.run_id) == 1


@pytest.mark.parametrize("name", ["blog", "refund"])
def test_a_fault_free_run_shows_none_of_the_faults(tmp_path: Path, name: str) -> None:
    """The observers that decide whether a campaign cell ran must not see a fault in a run that met none."""
    from stateward.chaos.campaign import OBSERVERS, SourceFault

    agent = blog.build_agent() if name == "blog" else refund_agent.build_agent(book=str(tmp_path / "book.db"))
    state, events = drive(tmp_path, agent)
    assert state.status is RunStatus.COMPLETED
    seen = [f.value for f, saw in OBSERVERS.items() if f is not SourceFault.TWO_WORKERS and saw(state, events)]
    assert seen == []
