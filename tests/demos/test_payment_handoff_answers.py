"""A fault run's handoff reaches a person in another process and each answer does what its consequence says:
the run is kept in ``--db``; ``continue_authorized`` (answered by ``stateward reply`` in a subprocess) makes a
new attempt from the resume point, recorded as that person's grant; ``accept_partial`` ends
PARTIALLY_COMPLETED; ``cancel`` ends the run delivering nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from stateward import EventType, RunStatus, Runtime


def cli(*args: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run(
        [sys.executable, "-m", "stateward.cli.main", *args, "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    out: dict[str, Any] = json.loads(done.stdout)
    return out


def handed_off(db: Path, fault: str = "doc-search-timeout") -> tuple[str, str]:
    """A fault run, kept in ``db`` by the demo in its own process."""
    row = cli("demo", "payment-migration", "--fault", fault, "--db", str(db))
    assert row["rung"] == "HANDOFF_PACKAGE" and row["status"] == "WAITING_FOR_USER"
    runtime = Runtime.open(str(db), create=False)
    state = runtime.get(row["run_id"])
    runtime.close()
    assert state.pending is not None and state.pending.kind == "handoff"
    return state.run_id, state.pending.request_id


def events(db: Path, run_id: str) -> list[Any]:
    runtime = Runtime.open(str(db), create=False)
    try:
        return runtime.store.read_events(run_id)
    finally:
        runtime.close()


@pytest.mark.slow
def test_continue_authorized_from_another_process_makes_a_new_attempt_from_the_resume_point(tmp_path: Path) -> None:
    db = tmp_path / "fault.db"
    run_id, request = handed_off(db)
    before = events(db, run_id)
    package = [e.payload for e in before if e.type is EventType.HANDOFF_RECORDED][-1]
    resume_item = package["resume_point"]["work_item_id"] or package["blocked_items"][0]
    started_before = [e.payload for e in before if e.type is EventType.WORK_ITEM_STARTED]
    runtime = Runtime.open(str(db), create=False)
    used_before = runtime.get(run_id).usage
    runtime.close()
    cli("reply", run_id, request, "--text", "continue_authorized", "--by", "ops-lead", "--db", str(db))
    after = events(db, run_id)[len(before) :]
    answered = next(e.payload for e in after if e.type is EventType.HANDOFF_ANSWERED)
    assert answered["option"] == "continue_authorized" and answered["grant"]["by"] == "ops-lead"
    assert answered["grant"]["at"] and answered["grant"]["reattempt"]
    restarted = [e.payload for e in after if e.type is EventType.WORK_ITEM_STARTED]
    assert restarted, "continue_authorized made no new attempt"
    item = restarted[0]["work_item_id"]
    assert item == resume_item and item in answered["grant"]["reattempt"]
    earlier = [p for p in started_before if p["work_item_id"] == item]
    assert restarted[0]["attempt"] == len(earlier) + 1  # attempts are counted on, never reset
    assert any(e.type is EventType.TOOL_ATTEMPTED for e in after)  # the re-attempt really called tools
    runtime = Runtime.open(str(db), create=False)
    state = runtime.get(run_id)
    runtime.close()
    # The fault's world is unchanged (search still down): the re-attempt fails and hands off again.
    assert state.status is RunStatus.WAITING_FOR_USER and state.pending is not None
    assert state.pending.request_id != request
    # What was spent stays counted (a grant, not a reset): the new attempt's calls add to it.
    assert state.usage.tool_attempts > used_before.tool_attempts and state.usage.steps > used_before.steps


@pytest.mark.slow
@pytest.mark.parametrize(
    ("option", "status", "reason"),
    [
        ("accept_partial", RunStatus.PARTIALLY_COMPLETED, "partially_completed"),
        ("cancel", RunStatus.FAILED, "cancelled_at_handoff"),
    ],
)
def test_ending_options_end_as_their_consequence_says(
    tmp_path: Path, option: str, status: RunStatus, reason: str
) -> None:
    db = tmp_path / "fault.db"
    run_id, request = handed_off(db)
    before = len(events(db, run_id))
    cli("reply", run_id, request, "--text", option, "--by", "ops-lead", "--db", str(db))
    after = events(db, run_id)[before:]
    runtime = Runtime.open(str(db), create=False)
    state = runtime.get(run_id)
    runtime.close()
    assert (state.status, state.terminal_reason) == (status, reason)
    assert not [e for e in after if e.type is EventType.WORK_ITEM_STARTED]  # no new attempt
    tools = [e.payload["observation"]["action"] for e in after if e.type is EventType.TOOL_ATTEMPTED]
    assert tools == (["record_partial_delivery"] if option == "accept_partial" else [])


@pytest.mark.slow
def test_high_risk_at_low_confidence_reaches_a_person_who_accepts_the_partial_result(tmp_path: Path) -> None:
    db = tmp_path / "fault.db"
    run_id, request = handed_off(db, "high-risk-low-confidence")
    package = [e.payload for e in events(db, run_id) if e.type is EventType.HANDOFF_RECORDED][-1]
    assert package["reason_code"] == "HIGH_RISK_LOW_CONFIDENCE" and package["resume_point"]["work_item_id"]
    assert package["attempt_history"] and package["evidence_refs"] and package["options"]
    cli("reply", run_id, request, "--text", "accept_partial", "--by", "risk-owner", "--db", str(db))
    runtime = Runtime.open(str(db), create=False)
    state = runtime.get(run_id)
    delivered = [e for e in runtime.store.read_events(run_id) if e.type is EventType.TOOL_ATTEMPTED]
    runtime.close()
    assert state.status is RunStatus.PARTIALLY_COMPLETED
    assert not [e for e in delivered if e.payload["observation"]["action"] == "deliver_report"]


def test_conflicting_authorities_reach_a_person_whose_choice_in_another_process_re_attempts(tmp_path: Path) -> None:
    db = tmp_path / "fault.db"
    run_id, request = handed_off(db, "conflicting-authorities")
    before = events(db, run_id)
    package = [e.payload for e in before if e.type is EventType.HANDOFF_RECORDED][-1]
    assert package["reason_code"] == "CONFLICTING_AUTHORITIES" and package["resume_point"]["work_item_id"] == "W05"
    assert "capture_retry_limit = 3" in package["reason"] and "capture_retry_limit = 5" in package["reason"]
    assert "ev:doc:paysdk-v2-migration-guide#retries" in package["reason"]
    assert "ev:doc:paysdk-v2-release-notes#retries" in package["reason"]
    assert [o["option_id"] for o in package["options"]] == ["choose_a", "choose_b", "accept_partial", "cancel"]
    cli("reply", run_id, request, "--text", "choose_b", "--by", "rules-owner", "--db", str(db))
    after = events(db, run_id)[len(before) :]
    answered = next(e.payload for e in after if e.type is EventType.HANDOFF_ANSWERED)
    assert answered["source_choice"]["source"] == "paysdk-v2-release-notes"
    assert answered["source_choice"]["by"] == "rules-owner"
    restarted = [e.payload for e in after if e.type is EventType.WORK_ITEM_STARTED]
    assert restarted[0]["work_item_id"] == "W05" and restarted[0]["attempt"] == 2
    [settled] = [
        c
        for e in after
        if e.type is EventType.VERIFICATION_RECORDED and e.payload["work_item_id"] == "W05"
        for c in e.payload["checks"]
        if c["name"] == "official_rules_agree"
    ]
    assert settled["verdict"] == "PASS" and "paysdk-v2-release-notes" in settled["detail"]
    runtime = Runtime.open(str(db), create=False)
    state = runtime.get(run_id)
    runtime.close()
    assert "W05" in state.memo["verified"]
    # The run went on past the conflict: it now waits for the report's delivery approval, not a handoff.
    assert state.pending is not None and state.pending.kind == "approval"
