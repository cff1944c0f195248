"""The conflicting-rules task (source 001): naive loops lose the wait; under the Runtime, models that obey
"never stop" still stop before the draft, and the step-plan validator answers REVISE to a plan out of
approval order."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stateward import PlanAndExecuteController, SignalFailure, parse_step_plan
from stateward_demos.cli import app as demo_app
from stateward_demos.conflicting_rules import run_conflicting_rules


def rows_of(tmp_path: Path) -> dict[tuple[str, str], dict[str, object]]:
    return {(r["mode"], r["variant"]): r for r in run_conflicting_rules(tmp_path)}


def test_under_every_controller_the_run_waits_before_any_draft(tmp_path: Path) -> None:
    rows = rows_of(tmp_path)
    corrected = {m: rows[(m, "corrected")] for m in ("react", "plan_and_execute", "workflow")}
    for row in corrected.values():
        assert row["status"] == "WAITING_FOR_USER" and row["briefs"] == 1
        assert (row["write_draft_calls"], row["draft_written"]) == (0, False)
        assert row["waits_for"] == "write_draft brief:v1"  # the approval is bound to that exact brief
    # ReAct never asked: the Runtime's gate stopped the draft; the revised plan and the workflow ask by design.
    assert [corrected[m]["asked_by"] for m in ("react", "plan_and_execute", "workflow")] == [
        "runtime",
        "controller",
        "controller",
    ]
    # The rule-two plan had no approval step before write_draft: the validator answered REVISE, not ACCEPT.
    assert corrected["plan_and_execute"]["validator"] == "REVISE -> ACCEPT"


def test_the_naive_rows_are_the_sources(tmp_path: Path) -> None:
    rows = rows_of(tmp_path)
    react, plan, flow = (rows[(m, "naive")] for m in ("react", "plan_and_execute", "workflow"))
    # ReAct loops on create_brief: three briefs, never a wait, still RUNNING at its step limit.
    assert (react["status"], react["briefs"], react["waiting_marker"], react["write_draft_calls"]) == (
        "RUNNING",
        3,
        False,
        0,
    )
    # The naive executor records the plan's wait, tries write_draft anyway (the gateway blocks it) and finishes.
    assert (plan["status"], plan["waiting_marker"], plan["write_draft_calls"], plan["draft_written"]) == (
        "COMPLETED",
        True,
        1,
        False,
    )
    # The naive workflow suspends with no write_draft in its trace, and calls itself done.
    assert (flow["status"], flow["waiting_marker"], flow["write_draft_calls"]) == ("COMPLETED", True, 0)


def test_the_cli_prints_naive_and_corrected_rows_side_by_side() -> None:
    out = CliRunner().invoke(demo_app, ["conflicting-rules", "--json"])
    assert out.exit_code == 0, out.output
    rows = json.loads(out.output)
    assert [(r["mode"], r["variant"]) for r in rows] == [
        (m, v) for m in ("react", "plan_and_execute", "workflow") for v in ("naive", "corrected")
    ]
    assert [r["status"] for r in rows if r["variant"] == "corrected"] == ["WAITING_FOR_USER"] * 3
    table = CliRunner().invoke(demo_app, ["conflicting-rules"])
    assert "write_draft brief:v1" in table.output and "naive" in table.output


GUARDED = frozenset({"write_draft"})
KNOWN = {"create_brief", "write_draft"}


def plan_text(*steps: dict[str, object]) -> str:
    return json.dumps({"steps": list(steps)})


BRIEF = {"kind": "tool", "action": "create_brief"}
WAIT = {"kind": "await_approval", "question": "ok?"}
DRAFT = {"kind": "tool", "action": "write_draft"}


@pytest.mark.parametrize(
    ("steps", "ok"),
    [
        ((BRIEF, WAIT, DRAFT), True),
        ((BRIEF, DRAFT), False),
        ((BRIEF, DRAFT, WAIT), False),  # the wait after the draft is too late
        ((WAIT, DRAFT, DRAFT), False),  # one approval does not cover a second guarded step
        ((WAIT, DRAFT, WAIT, DRAFT), True),
        ((BRIEF, WAIT, BRIEF), True),  # no guarded step: nothing to order
    ],
)
def test_the_validator_checks_approval_order(steps: tuple[dict[str, object], ...], ok: bool) -> None:
    parsed = parse_step_plan(plan_text(*steps), KNOWN, GUARDED)
    if ok:
        assert not isinstance(parsed, SignalFailure)
    else:
        assert isinstance(parsed, SignalFailure) and parsed.code == "PLAN_APPROVAL_ORDER"
    assert not isinstance(parse_step_plan(plan_text(*steps), KNOWN), SignalFailure)  # unguarded: order free


def test_a_planner_that_ignores_revise_is_refused_after_the_bounded_revisions(tmp_path: Path) -> None:
    from stateward import Agent, EventType, RunStatus, Runtime, ToolRegistry, tool
    from stateward.testing import ScriptedModel

    asked: list[str | None] = []

    def stubborn(req: object) -> dict[str, object]:
        asked.append(getattr(req, "correction", None))
        return {"steps": [{"kind": "tool", "action": "pay", "args": {}}, {"kind": "finish", "reason": "paid"}]}

    @tool(requires_approval=True)
    def pay() -> str:
        """Pay."""
        return "paid"

    agent = Agent(
        name="stubborn",
        controller=PlanAndExecuteController(ScriptedModel(stubborn), approval_before=frozenset({"pay"})),
        tools=ToolRegistry([pay]),
    )
    runtime = Runtime.open(str(tmp_path / "r.db"))
    run = runtime.start(agent, "pay")
    assert run.status is RunStatus.FAILED and len(asked) == 2  # one plan, one revision, then refused
    assert asked[0] is None and asked[1] is not None and "REVISE" in asked[1]
    events = runtime.store.read_events(run.run_id)
    assert not [e for e in events if e.type is EventType.PLAN_RECORDED]  # no plan was ever accepted
    refused = [e.payload for e in events if e.payload.get("code") == "PLAN_APPROVAL_ORDER"]
    assert len(refused) == 1 and refused[0]["message"].startswith("after 1 REVISE: step 0 'pay'")
    runtime.close()
