"""The payment case's intermediate artifacts are checked against what the run recorded before their items
succeed: a worker that fabricates ``breaking-changes`` without reading the guide, or a coverage check
claiming 12 of 12 repositories accessible, is refused; the honest run still delivers.

The fabricating worker is the scripted worker with W06 (a MODEL item) replaced, and W12 (a VERIFICATION item,
run as code) gets a faulty procedure; everything else is the real demo agent on the real engine, read back from
the events and the memo it recorded.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

import pytest

from stateward import EventType, ModelRequest, RunStatus, Runtime
from stateward.controllers.plan_run import PlanRunController
from stateward.core.state import RunState
from stateward.models import ScriptedModel
from stateward.planning import cite_evidence
from stateward_demos.payment import tools as payment_tools
from stateward_demos.payment.agent import build_agent, goal
from stateward_demos.payment.scripts import PROCEDURES, worker_policy

INVENTED = {
    "change_id": "BC-99",
    "old_api": "paysdk.invented()",
    "new_api": "paysdk.v2.invented()",
    "behaviour": "made up",
    "search_pattern": "invented(",
    "evidence_id": "ev:doc:invented",
}
FALSE_COVERAGE = {"analysed": 12, "accessible": 12, "ratio": 1.0, "not_accessible": []}


def record(req: ModelRequest, artifact_type: str, content: Any) -> dict[str, Any]:
    args = {"artifact_type": artifact_type, "content": json.dumps(content), "evidence": cite_evidence(req)}
    return {"type": "EXECUTE_TOOL", "action": "record_output", "args": args}


def fabricating(always: bool) -> Callable[[ModelRequest], Any]:
    """The scripted worker, except that W06 records 99 changes (one invented) at once, without reading the
    guide, and W12 claims all 12 repositories accessible. Unless ``always``, told what failed, it works
    honestly."""

    def step(req: ModelRequest) -> Any:
        wid = req.facts["work_item"]["work_item_id"]
        if always or req.facts.get("correction") is None:
            if wid == "W06":
                return record(req, "breaking-changes", {"count": 99, "changes": [INVENTED]})
            if wid == "W12":
                return record(req, "coverage-check", FALSE_COVERAGE)
        return PROCEDURES["coverage-check"](req) if wid == "W12" else worker_policy(req)

    return step


def run(runtime: Runtime, worker: Callable[[ModelRequest], Any] | None) -> RunState:
    agent = build_agent()
    if worker is not None:
        assert isinstance(agent.controller, PlanRunController)
        agent.controller.worker = ScriptedModel(worker, name="fabricating-worker")
        # The same fabrication as W12's procedure: code run as a RULE is checked like a model's output.
        procedures = {**PROCEDURES, "coverage-check": worker}
        agent.controller.config = dataclasses.replace(agent.controller.config, procedures=procedures)
    state = runtime.start(agent, goal().objective)
    if state.pending is not None and state.pending.kind.value == "approval":
        state = runtime.approve(state.run_id, state.pending.request_id, by="reviewer").state
    if state.pending is not None and state.pending.kind.value == "handoff":  # stalled: take what was verified
        state = runtime.reply(state.run_id, state.pending.request_id, by="lead", text="accept_partial").state
    return state


def verifications(runtime: Runtime, run_id: str, artifact_type: str) -> list[dict[str, Any]]:
    return [
        e.payload
        for e in runtime.store.read_events(run_id)
        if e.type is EventType.VERIFICATION_RECORDED and e.payload["artifact"].startswith(f"{artifact_type}:")
    ]


def failed(verification: dict[str, Any]) -> dict[str, str]:
    """What each check that did not pass found (its findings: a long detail is stored by reference)."""
    return {c["name"]: "; ".join(c.get("findings", ())) for c in verification["checks"] if c["verdict"] != "PASS"}


@pytest.fixture(autouse=True)
def _delivery_log(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(payment_tools, "DELIVERY_LOG", {})


def test_the_fabricated_artifacts_are_refused_and_the_run_delivers_after_the_repair(runtime: Runtime) -> None:
    state = run(runtime, fabricating(always=False))
    [first, repaired] = [
        (v["artifact"], v["outcome"]) for v in verifications(runtime, state.run_id, "breaking-changes")
    ]
    assert first == ("breaking-changes:v1", "REPAIR_ONCE") and repaired == ("breaking-changes:v2", "ACCEPT")
    [v1, _] = verifications(runtime, state.run_id, "breaking-changes")
    why = failed(v1)
    assert set(why) == {"evidence_ids_recorded", "stated_count_matches_entries", "changes_match_cited_documents"}
    assert "ev:doc:invented" in why["evidence_ids_recorded"]
    assert "99" in why["stated_count_matches_entries"] and "1 changes listed" in why["stated_count_matches_entries"]
    assert "cites no document read" in why["changes_match_cited_documents"]

    [c1, c2] = verifications(runtime, state.run_id, "coverage-check")
    assert (c1["outcome"], c2["outcome"]) == ("REPAIR_ONCE", "ACCEPT")
    assert "found 11" in failed(c1)["coverage_matches_access_checks"]
    assert "billing-worker" in failed(c1)["coverage_matches_access_checks"]

    # The refused versions are kept (never overwritten) but never count: the accepted ones are v2.
    memo = state.memo
    assert memo["items"]["W06"]["output"] == "breaking-changes:v2"
    assert memo["items"]["W12"]["output"] == "coverage-check:v2"
    assert json.loads(runtime.store.get_artifact(state.run_id, "breaking-changes", 2).content)["count"] == 8
    assert state.status is RunStatus.COMPLETED and memo["outcome"]["final_artifact"] == "migration-assessment:v2"


def test_a_worker_that_keeps_fabricating_never_gets_its_items_accepted(runtime: Runtime) -> None:
    state = run(runtime, fabricating(always=True))
    assert "W06" not in state.memo["verified"] and "W12" not in state.memo["verified"]
    [v1, v2] = verifications(runtime, state.run_id, "breaking-changes")
    assert (v1["outcome"], v2["outcome"]) == ("REPAIR_ONCE", "DEGRADED_DELIVERY")  # one repair, then no more
    ended = [
        e.payload
        for e in runtime.store.read_events(state.run_id)
        if e.type is EventType.WORK_ITEM_ENDED and e.payload["work_item_id"] == "W06"
    ]
    assert [(e["outcome"], e["error"]) for e in ended] == [("FAILED", "CHECK_FAILED")]
    assert state.status is RunStatus.PARTIALLY_COMPLETED  # never a completed migration report on fabrications
    assert state.memo["outcome"]["final_artifact"] != "migration-assessment:v2"


def test_the_honest_run_passes_every_check_and_records_what_each_artifact_rests_on(runtime: Runtime) -> None:
    state = run(runtime, None)
    assert state.status is RunStatus.COMPLETED
    ended = {
        e.payload["work_item_id"]: e.payload
        for e in runtime.store.read_events(state.run_id)
        if e.type is EventType.WORK_ITEM_ENDED and e.payload["outcome"] == "COMPLETED"
    }
    assert len(ended) == 18
    items = state.memo["items"]
    w06 = items["W06"]
    artifact = w06["artifact"]
    assert artifact["ref"] == "breaking-changes:v1" and artifact["schema_version"] == "1.0"
    assert artifact["source_attempt"] == "W06#1" == w06["attempts"][-1]["attempt_id"]
    # W06 read the guide and built on W05's verified sources: both are cited. Its tool calls are the read and
    # the write of the output itself.
    read, wrote = w06["attempts"][-1]["tool_calls"]
    assert artifact["evidence_refs"] == [read, items["W05"]["output"]] and read != wrote
    assert len(w06["attempts"][-1]["input_hash"]) == 64
    assert ended["W06"]["evidence"] == 2
    assert items["W01"]["artifact"]["evidence_refs"] == [f"goal:{goal().goal_id}"]  # it restates the goal
    # The deliverable's verification is its own event; every other item says on its end what it cites.
    assert [v["artifact"] for v in verifications(runtime, state.run_id, "migration-assessment")] == [
        "migration-assessment:v1",
        "migration-assessment:v2",
    ]
    assert all(ended[w]["evidence"] >= 1 for w in ended if w != "W16")
