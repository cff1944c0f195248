"""The payment migration flagship on the real engine: 18 planned items, one repair, one bound approval.

The scripted models only propose; these tests read what the Runtime recorded - events, artifact
versions, the pending request, the simulated delivery log - and check it says what the scenario claims.
"""

from __future__ import annotations

import json
from collections import Counter
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from stateward import RunStatus, Runtime
from stateward.core.canonical import action_digest
from stateward.core.events import EventType
from stateward.core.state import RunState
from stateward.planning.validator import Verdict, validate_plan
from stateward.store.sqlite import SQLiteStore
from stateward.tools import CallContext, InMemoryGatewayStore, OutcomeStatus, ToolCall, ToolGateway
from stateward.verify import CheckVerdict, Report, failures
from stateward_demos.cli import app as demo_app
from stateward_demos.payment import tools as payment_tools
from stateward_demos.payment.agent import NAME, build_agent, deliver_guard, goal, plan, summary, verify_report
from stateward_demos.payment.reports import report_v1, report_v2

ROOT = Path(__file__).resolve().parents[2]
V1, V2 = "migration-assessment:v1", "migration-assessment:v2"


@pytest.fixture
def delivery_log(monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, str]]:
    """A fresh simulated delivery target, also seen by agents rebuilt from their AgentRef."""
    log: dict[str, dict[str, str]] = {}
    monkeypatch.setattr(payment_tools, "DELIVERY_LOG", log)
    return log


@pytest.fixture
def waiting(runtime: Runtime, delivery_log: dict[str, dict[str, str]]) -> RunState:
    return runtime.start(build_agent(), goal().objective)


def payloads(runtime: Runtime, run_id: str, kind: EventType) -> list[dict[str, Any]]:
    return [e.payload for e in runtime.store.read_events(run_id) if e.type is kind]


def comparable(runtime: Runtime, state: RunState) -> dict[str, Any]:
    """A run's summary without what differs between two runs of the same script (ids, receipt ids)."""
    out = summary(runtime, state)
    out.pop("run_id")
    receipt = out.pop("delivery_receipt")
    out["delivered"] = None if receipt is None else receipt["delivered"]
    return out


def test_the_packaged_plan_and_goal_are_the_examples_and_validate() -> None:
    package = resources.files("stateward_demos.payment")
    for name, example in (("plan.json", "payment_migration.json"), ("goal.json", "payment_migration.goal.json")):
        packaged = json.loads(package.joinpath(name).read_text(encoding="utf-8"))
        assert packaged == json.loads((ROOT / "examples/plans" / example).read_text())
    agent = build_agent()
    report = validate_plan(plan(), capabilities=set(agent.tools.names()), goal=goal())
    assert report.verdict is Verdict.ACCEPT, report.issues
    assert agent.ref is not None and agent.ref.name == NAME and agent.ref.params == {"max_steps": 200}


def test_the_verifier_fails_v1_and_passes_v2() -> None:
    assert {r.name for r in failures(verify_report(report_v1().to_content()))} == {
        "count_consistency",
        "claims_have_evidence",
        "migration_order_not_overcertain",
    }
    assert failures(verify_report(report_v2().to_content())) == ()
    [garbage] = verify_report("{not json")
    assert (garbage.name, garbage.verdict) == ("schema_valid", CheckVerdict.FAIL)


def test_the_run_stops_at_w18_for_an_approval_bound_to_the_accepted_report(runtime: Runtime, waiting: RunState) -> None:
    state = waiting
    assert state.status is RunStatus.WAITING_FOR_USER
    assert state.pending is not None and state.pending.kind == "approval"
    assert state.pending.guarded_action == deliver_guard(V2)
    assert "W18" in state.pending.question and "deliver_report" in state.pending.question
    assert "delivery-receipt" not in state.artifacts

    # v1 is kept next to its repair; the verifier ran on both, in order, and nothing else was verified.
    assert state.artifacts["migration-assessment"] == 2
    v1 = runtime.store.get_artifact(state.run_id, "migration-assessment", 1)
    v2 = runtime.store.get_artifact(state.run_id, "migration-assessment", 2)
    assert v1 is not None and v2 is not None and v1.content != v2.content
    verdicts = [(v["artifact"], v["outcome"]) for v in payloads(runtime, state.run_id, EventType.VERIFICATION_RECORDED)]
    assert verdicts == [(V1, "REPAIR_ONCE"), (V2, "ACCEPT")]

    # The delivered numbers are the stored v2's, not constants of this test's making.
    report = Report.model_validate_json(v2.content)
    stated = report.stated
    assert (stated.repositories_expected, stated.repositories_accessible) == (12, 11)
    assert (stated.breaking_changes, len(report.breaking_changes)) == (8, 8)
    assert (stated.call_sites, len(report.call_sites)) == (37, 37)
    by_risk = Counter(m.risk.value for m in report.module_risks)
    assert (by_risk["high"], by_risk["medium"]) == (3, 5)
    assert {k.value: v for k, v in stated.modules_by_risk.items()} == dict(by_risk)
    # The research artifacts agree with the report: W09 found the 37 call sites by reading the code.
    sites = runtime.store.get_artifact(state.run_id, "direct-call-sites")
    assert sites is not None and json.loads(sites.content)["count"] == 37

    ledger = state.memo["ledger"]
    assert ledger["reflections"] == {"migration-assessment": 1} and ledger["reserved"] == {}
    assert ledger["used"]["tool_calls"] == state.usage.tool_attempts  # the repaired draft is counted too

    # Only the MODEL and LOCAL_REACT items ask a model (RULE, TOOL and VERIFICATION items run as code): the run
    # keeps the source's budget and the goal's soft "fewer than 40 model calls", so no deviation is recorded.
    assert payloads(runtime, state.run_id, EventType.CONSTRAINT_DEVIATION_RECORDED) == []
    assert ledger["used"]["model_calls"] == state.usage.model_calls == 22 and ledger["used"]["tokens"] <= 180_000
    assert state.usage.tool_attempts <= 120  # the hard tool budget of the goal held
    sources = {
        e.payload["signal_source"]
        for e in runtime.store.read_events(state.run_id)
        if e.type is EventType.SIGNAL_RECEIVED
    }
    assert sources == {"model", "rule", "plan_step"}


def test_work_items_start_strictly_in_dependency_order(runtime: Runtime, waiting: RunState) -> None:
    ended_at: dict[str, int] = {}
    started: list[str] = []
    deps = {w.work_item_id: set(w.dependencies) for w in plan().work_items}
    for event in runtime.store.read_events(waiting.run_id):
        if event.type is EventType.WORK_ITEM_STARTED:
            wid = event.payload["work_item_id"]
            assert all(d in ended_at for d in deps[wid]), f"{wid} started before {deps[wid] - set(ended_at)}"
            started.append(wid)
        elif event.type is EventType.WORK_ITEM_ENDED:
            assert event.payload["outcome"] == "COMPLETED", event.payload
            ended_at[event.payload["work_item_id"]] = event.seq
    # One attempt each, in batches of ready items (max_parallel 4, by id); W18 waits for its approval.
    batches = [["W01"], ["W02", "W03"], ["W04", "W05"], ["W06", "W08"], ["W07", "W09"]]
    assert started == [*(w for b in batches for w in b), *(f"W{i}" for i in range(10, 18))]
    by_batch: dict[int, list[str]] = {}
    for event in runtime.store.read_events(waiting.run_id):
        if event.type is EventType.WORK_ITEM_STARTED:
            by_batch.setdefault(event.payload["batch"], []).append(event.payload["work_item_id"])
    assert list(by_batch.values())[:5] == batches


def test_approving_delivers_exactly_once(
    runtime: Runtime, waiting: RunState, delivery_log: dict[str, dict[str, str]]
) -> None:
    assert waiting.pending is not None
    done = runtime.approve(waiting.run_id, waiting.pending.request_id, by="demo-reviewer")
    assert done.state.status is RunStatus.COMPLETED and not done.already_answered
    assert list(delivery_log.values()) == [
        {"delivered": V2, "space": "payment-platform", "receipt_id": next(iter(delivery_log.values()))["receipt_id"]}
    ]
    receipt = runtime.store.get_artifact(waiting.run_id, "delivery-receipt")
    assert receipt is not None and json.loads(receipt.content)["delivered"] == V2
    delivered = [
        e["observation"]
        for e in payloads(runtime, waiting.run_id, EventType.TOOL_ATTEMPTED)
        if e["observation"]["action"] == "deliver_report"
    ]
    assert [(o["args"], o["status"]) for o in delivered] == [({"report_ref": V2}, "SUCCESS")]

    again = runtime.approve(waiting.run_id, waiting.pending.request_id, by="demo-reviewer")
    assert again.already_answered and again.state.status is RunStatus.COMPLETED
    assert len(delivery_log) == 1 and again.state.artifacts["delivery-receipt"] == 1


def test_an_approval_of_v1_does_not_admit_delivering_v2(delivery_log: dict[str, dict[str, str]]) -> None:
    gateway = ToolGateway(payment_tools.make_tools(), InMemoryGatewayStore(), sleep=lambda s: None)
    call = ToolCall(tool="deliver_report", args={"report_ref": V2})
    # The guard's digest is the one the gateway's action gate computes for that call.
    assert gateway.action_digest(call, None) == deliver_guard(V2).digest
    v1_digest = action_digest("deliver_report", {"report_ref": V1}, None)
    assert v1_digest == deliver_guard(V1).digest != deliver_guard(V2).digest
    ctx = CallContext(run_id="run-approval", step=1, approved_digests=frozenset({v1_digest}))
    refused = gateway.invoke(call, ctx)
    assert (refused.status, refused.handler_calls) == (OutcomeStatus.BLOCKED, 0)
    assert delivery_log == {}


def test_a_run_moved_across_runtimes_completes_just_the_same(
    db_path: Path, tmp_path: Path, delivery_log: dict[str, dict[str, str]]
) -> None:
    reference_rt = Runtime(SQLiteStore(tmp_path / "reference.db"))
    first = reference_rt.start(build_agent(), goal().objective)
    assert first.pending is not None
    reference = comparable(reference_rt, reference_rt.approve(first.run_id, first.pending.request_id, by="r").state)
    reference_rt.close()

    submitter = Runtime(SQLiteStore(db_path))  # only records the run: nothing is driven here
    run_id = submitter.submit(build_agent(), goal().objective).run_id
    submitter.close()

    driver = Runtime(SQLiteStore(db_path))  # knows the run only by its stored AgentRef
    assert driver.agents.build(driver.get(run_id).agent).agent_ref.name == NAME
    waiting = driver.drive(run_id)
    assert waiting.status is RunStatus.WAITING_FOR_USER and waiting.pending is not None
    assert waiting.pending.guarded_action == deliver_guard(V2)
    driver.close()

    approver = Runtime(SQLiteStore(db_path))
    done = approver.approve(run_id, waiting.pending.request_id, by="r").state
    assert done.status is RunStatus.COMPLETED
    assert comparable(approver, done) == reference
    approver.close()
    assert len(delivery_log) == 2  # one delivery per run, under each run's own idempotency key


def test_cli_runs_the_demo_and_approves_in_process(tmp_path: Path, delivery_log: dict[str, dict[str, str]]) -> None:
    cli = CliRunner()
    db = str(tmp_path / "cli.db")
    stopped = cli.invoke(demo_app, ["payment-migration", "--db", db, "--json"])
    assert stopped.exit_code == 0, stopped.output
    out = json.loads(stopped.output)
    assert out["status"] == "WAITING_FOR_USER" and out["pending_request_id"]
    assert out["pending_action"] == {"tool": "deliver_report", "args": {"report_ref": V2}}
    assert {"name": "migration-assessment", "version": 1} in out["artifacts"]
    assert out["verifications"] == [
        {"artifact": V1, "outcome": "REPAIR_ONCE"},
        {"artifact": V2, "outcome": "ACCEPT"},
    ]
    finished = cli.invoke(demo_app, ["payment-migration", "--db", db, "--approve"])
    assert finished.exit_code == 0, finished.output
    assert "COMPLETED" in finished.output and "delivery-receipt" in finished.output and V2 in finished.output
