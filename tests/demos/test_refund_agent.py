"""The registered refund agent under each of its faults: the protection that meets the fault decides the
outcome, and the payment system's own rows (the book) show what was really performed."""

from __future__ import annotations

from pathlib import Path

import pytest

from stateward import RunStatus, Runtime
from stateward.core.errors import UserError
from stateward.runtime.agent_registry import process_agents
from stateward_demos.refund_agent import RefundBook


@pytest.fixture
def runtime(tmp_path: Path) -> Runtime:
    agents = process_agents()
    assert "refund" in agents  # registered through the stateward.agents entry point
    return Runtime.open(str(tmp_path / "runs.db"), agents=agents)


def run(runtime: Runtime, book: Path, fault: str | None = None) -> tuple[str, RunStatus, str | None]:
    params = {"book": str(book), **({"fault": fault} if fault else {})}
    state = runtime.start(runtime.agents.create("refund", params), "refund customer c-42")
    if state.status is RunStatus.WAITING_FOR_USER and state.pending and state.pending.guarded_action:
        state = runtime.approve(state.run_id, state.pending.request_id, by="ann").state
    return state.run_id, state.status, state.terminal_reason


def tools_called(runtime: Runtime, run_id: str) -> list[tuple[str, str, str | None]]:
    return [
        (
            e.payload["observation"]["action"],
            e.payload["observation"]["status"],
            e.payload["observation"].get("error_code"),
        )
        for e in runtime.store.read_events(run_id)
        if e.type.value == "tool_attempted"
    ]


def test_a_refund_waits_for_approval_then_is_performed_once(runtime: Runtime, tmp_path: Path) -> None:
    run_id, status, _ = run(runtime, tmp_path / "book.db")
    assert status is RunStatus.COMPLETED
    assert [t[0] for t in tools_called(runtime, run_id)] == ["search_orders", "refund_order", "notify_customer"]
    assert RefundBook(str(tmp_path / "book.db")).refunds_of(run_id) == 1


def test_a_lost_answer_is_reconciled_never_refunded_twice(runtime: Runtime, tmp_path: Path) -> None:
    run_id, status, _ = run(runtime, tmp_path / "book.db", "timeout-once")
    assert status is RunStatus.COMPLETED
    assert ("refund_order", "SUCCESS", "TIMEOUT") in tools_called(runtime, run_id)
    book = RefundBook(str(tmp_path / "book.db"))
    assert book.refunds_of(run_id) == 1 and book.duplicates() == {}


def test_a_missing_permission_is_refused_and_handed_to_a_person(runtime: Runtime, tmp_path: Path) -> None:
    run_id, status, _ = run(runtime, tmp_path / "book.db", "permission-denied")
    assert status is RunStatus.WAITING_FOR_USER
    assert ("notify_customer", "REJECTED", "PERMISSION_DENIED") in tools_called(runtime, run_id)
    assert runtime.store.side_effects_of(run_id, ("SUCCEEDED",))  # the refund itself was allowed
    assert all(r.tool != "notify_customer" for r in runtime.store.side_effects_of(run_id, ("STARTED", "SUCCEEDED")))


def test_the_same_search_repeated_ends_as_no_progress(runtime: Runtime, tmp_path: Path) -> None:
    run_id, status, reason = run(runtime, tmp_path / "book.db", "same-search")
    assert (status, reason) == (RunStatus.FAILED, "no_progress")
    assert len(tools_called(runtime, run_id)) == 3  # the controller's bound, far below the model's twelve


def test_a_high_risk_conclusion_at_low_confidence_goes_to_a_person(runtime: Runtime, tmp_path: Path) -> None:
    run_id, status, _ = run(runtime, tmp_path / "book.db", "high-risk-low-confidence")
    assert status is RunStatus.WAITING_FOR_USER
    refused = [
        e.payload["code"]
        for e in runtime.store.read_events(run_id)
        if e.type.value == "runtime_validated" and e.payload["runtime_decision"] == "rejected"
    ]
    assert refused == ["high_risk_low_confidence"]
    assert RefundBook(str(tmp_path / "book.db")).refunds_of(run_id) == 0


def test_an_unknown_fault_is_a_named_error(runtime: Runtime) -> None:
    with pytest.raises(UserError) as err:
        runtime.agents.create("refund", {"fault": "meteor"})
    assert "known: timeout-once" in str(err.value)
