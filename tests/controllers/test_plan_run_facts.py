"""A work item succeeds only on checked facts: evidence as data, output schemas and checks before success, and
partial deliveries / handoff packages that say what was verified, what ran out and what stopping leaves undone.

Small plans of our own on the real engine (Runtime, gateway, SQLite); everything is read back from what the
Runtime recorded (events, the memo, artifacts), and the gates through the ``stateward gates`` command.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from tests.controllers.test_plan_run import GOAL, events, item, plan_doc
from typer.testing import CliRunner

from stateward import Agent, Budget, ModelRequest, RunStatus, Runtime, ToolRegistry, tool
from stateward.cli.app import app as cli_app
from stateward.controllers.plan_run import PlanRunConfig, PlanRunController
from stateward.core.errors import UserError
from stateward.core.events import EventType
from stateward.core.state import AgentRef
from stateward.models import ScriptedModel
from stateward.planning import (
    BudgetLimits,
    IssueCode,
    PartialDelivery,
    Verdict,
    cite_evidence,
    load_plan,
    plan_finish_policy,
    plan_run_tools,
    validate_plan,
)
from stateward.store.sqlite import SQLiteStore
from stateward.tools.errors import ServiceUnavailable
from stateward.verify import ArtifactCheck, ArtifactCheckInput, CheckResult, CheckVerdict, verdict_of

Worker = Callable[[ModelRequest], Any]


def search_then_record(content: Any, evidence: Callable[[ModelRequest], list[str]] = cite_evidence) -> Worker:
    """Each item searches once (items with a search capability), then records ``content`` citing ``evidence``."""

    def step(req: ModelRequest) -> Any:
        work = req.facts["work_item"]
        if "search" in work["required_capabilities"] and not any(o["action"] == "search" for o in req.observations):
            return {"type": "EXECUTE_TOOL", "action": "search", "args": {"query": work["work_item_id"]}}
        value = content(req) if callable(content) else content
        args = {
            "artifact_type": work["output_spec"]["artifact_type"],
            "content": json.dumps(value),
            "evidence": evidence(req),
        }
        return {"type": "EXECUTE_TOOL", "action": "record_output", "args": args}

    return step


def agent_for(
    plan: dict[str, Any],
    worker: Worker,
    *,
    checks: Mapping[str, Sequence[ArtifactCheck]] | None = None,
    budget: BudgetLimits | None = None,
    down: bool = False,
    **config: Any,
) -> Agent:
    seen: list[ModelRequest] = []

    def recording(req: ModelRequest) -> Any:
        seen.append(req)
        return worker(req)

    @tool(description="Search the notes.")
    def search(query: str) -> dict[str, Any]:
        if down:
            raise ServiceUnavailable("the notes service is down")
        return {"hits": [{"evidence_id": f"ev:{query}", "text": f"notes on {query}"}], "count": 1}

    controller = PlanRunController(
        ScriptedModel(lambda req: plan),
        ScriptedModel(recording),
        PlanRunConfig(
            goal=GOAL,
            budget=budget or BudgetLimits(max_reflections_per_artifact=1),
            checks=checks or {},
            capabilities=frozenset({"search"}),
            **config,
        ),
    )
    agent = Agent(
        name="facts",
        controller=controller,
        tools=ToolRegistry([search, *plan_run_tools()]),
        ref=AgentRef(name="tests:facts"),
        finish_policy=plan_finish_policy,
        budget=Budget(max_steps=40),
    )
    agent.seen = seen  # type: ignore[attr-defined]
    return agent


def drive(runtime: Runtime, agent: Agent) -> Any:
    """Start the run and approve every high-risk item it asks about, as a reviewer would; a handoff (the
    plan stalled) is answered ``accept_partial``."""
    state = runtime.start(agent, GOAL.objective)
    while state.pending is not None and state.pending.kind.value == "approval":
        state = runtime.approve(state.run_id, state.pending.request_id, by="reviewer").state
    return accept_partial(runtime, state)


def accept_partial(runtime: Runtime, state: Any) -> Any:
    """A handoff answered as a person who takes what was verified (the run then ends PARTIALLY_COMPLETED)."""
    if state.pending is not None and state.pending.kind.value == "handoff":
        state = runtime.reply(state.run_id, state.pending.request_id, by="lead", text="accept_partial").state
    return state


def ended(runtime: Runtime, run_id: str, wid: str) -> list[dict[str, Any]]:
    return [e for e in events(runtime, run_id, EventType.WORK_ITEM_ENDED) if e["work_item_id"] == wid]


def verdicts(runtime: Runtime, run_id: str) -> list[tuple[str, str, dict[str, list[str]]]]:
    return [
        (v["artifact"], v["outcome"], {c["name"]: c.get("findings", []) for c in v["checks"] if c["verdict"] != "PASS"})
        for v in events(runtime, run_id, EventType.VERIFICATION_RECORDED)
    ]


ONE = plan_doc([item("W1", [], ["search"], "findings")])
TWO = plan_doc([item("W1", [], ["search"], "findings"), item("W2", ["W1"], [], "summary")])
SIBLINGS = plan_doc([item("W1", [], ["search"], "findings"), item("W2", [], [], "summary")])  # W2 needs not W1


# --------------------------------------------------------------------------- 1. evidence as data


def test_every_observation_has_a_run_unique_evidence_id_the_model_sees(runtime: Runtime) -> None:
    three = plan_doc([item(f"W{i}", [], ["search"], f"out{i}") for i in (1, 2, 3)])
    agent = agent_for(three, search_then_record({"ok": True}))
    state = runtime.start(agent, GOAL.objective)
    assert state.status is RunStatus.COMPLETED
    shown = [o["evidence_id"] for req in agent.seen for o in req.observations]  # type: ignore[attr-defined]
    assert shown and all(isinstance(e, str) and e.startswith("obs_") for e in shown)
    ids = [o["evidence_id"] for req in agent.seen for o in req.observations if o["action"] == "search"]  # type: ignore[attr-defined]
    assert len(ids) == len(set(ids)) == 3  # one per search, none shared across items
    # The same ids in another process: the log rebuilt from the store names each observation the same way.
    calls = [a.tool_calls for w in ("W1", "W2", "W3") for a in [_attempt(state, w)]]
    assert sorted(c[0] for c in calls) == sorted(ids)


def _attempt(state: Any, wid: str) -> Any:
    from stateward.planning import AttemptFact

    return AttemptFact.model_validate(state.memo["items"][wid]["attempts"][-1])


def test_a_ref_the_run_never_recorded_is_refused_by_name(runtime: Runtime) -> None:
    invented = search_then_record({"ok": True}, evidence=lambda req: ["obs_999", "ev:nowhere"])
    state = runtime.start(agent_for(ONE, invented, budget=BudgetLimits(max_reflections_per_artifact=0)), "g")
    state = accept_partial(runtime, state)
    [(ref, outcome, failed)] = verdicts(runtime, state.run_id)
    assert (ref, outcome) == ("findings:v1", "DEGRADED_DELIVERY")
    assert [f.split(":")[0] for f in failed["cites_evidence"]] == ["EVIDENCE_UNRESOLVED", "EVIDENCE_UNRESOLVED"]
    assert "'obs_999'" in failed["cites_evidence"][0] and "'ev:nowhere'" in failed["cites_evidence"][1]
    assert [e["error"] for e in ended(runtime, state.run_id, "W1")] == ["EVIDENCE_UNRESOLVED"]
    assert state.memo["verified"] == [] and state.status is RunStatus.PARTIALLY_COMPLETED


def test_an_artifact_citing_nothing_is_refused_unless_its_item_needs_no_evidence(runtime: Runtime) -> None:
    silent = search_then_record({"ok": True}, evidence=lambda req: [])
    state = runtime.start(agent_for(ONE, silent, budget=BudgetLimits(max_reflections_per_artifact=0)), "g")
    assert [e["error"] for e in ended(runtime, state.run_id, "W1")] == ["EVIDENCE_MISSING"]
    assert state.memo["verified"] == []
    relaxed = plan_doc(
        [item("W1", [], [], "findings", output_spec={"artifact_type": "findings", "evidence_required": False})]
    )
    state = runtime.start(agent_for(relaxed, silent), "g")
    assert state.status is RunStatus.COMPLETED and state.memo["items"]["W1"]["artifact"]["evidence_refs"] == []


def test_a_verified_dependency_is_evidence_but_an_unrelated_items_output_is_not(runtime: Runtime) -> None:
    def cites_findings(req: ModelRequest) -> list[str]:
        return cite_evidence(req) if req.facts["work_item"]["work_item_id"] == "W1" else ["findings:v1"]

    ok = runtime.start(agent_for(TWO, search_then_record({"ok": True}, cites_findings)), "g")
    assert ok.status is RunStatus.COMPLETED and ok.memo["items"]["W2"]["artifact"]["evidence_refs"] == ["findings:v1"]
    budget = BudgetLimits(max_reflections_per_artifact=0)
    refused = runtime.start(agent_for(SIBLINGS, search_then_record({"ok": True}, cites_findings), budget=budget), "g")
    assert "W2" not in refused.memo["verified"]  # W1's output exists and is verified, but W2 does not rest on it
    assert [e["error"] for e in ended(runtime, refused.run_id, "W2")] == ["EVIDENCE_UNRESOLVED"]


def test_attempts_carry_an_id_an_input_hash_and_their_tool_calls(runtime: Runtime) -> None:
    retried = plan_doc(
        [item("W1", [], ["search"], "findings", retry_policy={"max_attempts": 2, "retryable_errors": ["CHECK_FAILED"]})]
    )
    tries: list[str | None] = []

    def must_be_told(given: ArtifactCheckInput) -> CheckResult:
        tries.append(given.ref)
        return verdict_of("second_try", [] if len(tries) > 1 else ["first versions never pass"])

    agent = agent_for(
        retried,
        search_then_record({"ok": True}),
        checks={"findings": [must_be_told]},
        budget=BudgetLimits(max_reflections_per_artifact=0),
    )
    state = runtime.start(agent, GOAL.objective)
    first, second = (_a for _a in (_attempt_n(state, 0), _attempt_n(state, 1)))
    assert (first.attempt_id, second.attempt_id) == ("W1#1", "W1#2")
    assert first.error_class == "CHECK_FAILED" and second.outcome.value == "COMPLETED"
    # The second attempt was given the first one's findings: a different input, a different hash.
    assert first.input_hash and second.input_hash and first.input_hash != second.input_hash
    assert len(first.tool_calls) == 2 and set(first.tool_calls).isdisjoint(second.tool_calls)
    artifact = state.memo["items"]["W1"]["artifact"]
    assert artifact["source_attempt"] == "W1#2" and artifact["ref"] == "findings:v2"
    assert artifact["evidence_refs"] == [second.tool_calls[0]]
    seen = agent.seen  # type: ignore[attr-defined]
    second_try = [r for r in seen if r.facts.get("correction")]
    assert second_try and "first versions never pass" in second_try[0].facts["correction"]


def _attempt_n(state: Any, n: int) -> Any:
    from stateward.planning import AttemptFact

    return AttemptFact.model_validate(state.memo["items"]["W1"]["attempts"][n])


# --------------------------------------------------------------------------- 2. schemas and checks


SCHEMA = {
    "type": "object",
    "required": ["sections"],
    "properties": {"sections": {"type": "array", "minItems": 2, "items": {"type": "string"}}},
}


def test_an_artifact_must_meet_its_schema_and_the_findings_reach_the_repair(runtime: Runtime) -> None:
    schemed = plan_doc(
        [
            item(
                "W1",
                [],
                ["search"],
                "findings",
                output_spec={"artifact_type": "findings", "schema": SCHEMA, "schema_version": "2.1"},
            )
        ]
    )

    def sections(req: ModelRequest) -> dict[str, Any]:
        return {"sections": ["a", "b"] if req.facts.get("correction") else ["a"]}

    state = runtime.start(agent_for(schemed, search_then_record(sections)), GOAL.objective)
    [(ref, outcome, failed), (ref2, outcome2, _)] = verdicts(runtime, state.run_id)
    assert (ref, outcome, ref2, outcome2) == ("findings:v1", "REPAIR_ONCE", "findings:v2", "ACCEPT")
    assert failed["output_schema"] == ["sections: ['a'] is too short"]
    assert state.status is RunStatus.COMPLETED
    assert state.memo["items"]["W1"]["artifact"]["schema_version"] == "2.1"


def test_the_validator_refuses_a_malformed_output_schema() -> None:
    bad = plan_doc(
        [item("W1", [], ["search"], "findings", output_spec={"artifact_type": "findings", "schema": {"type": "nope"}})]
    )
    report = validate_plan(load_plan(json.dumps(bad)), capabilities={"search"})
    assert report.verdict is Verdict.REVISE and IssueCode.INVALID_OUTPUT_SCHEMA in report.codes
    good = plan_doc(
        [item("W1", [], ["search"], "findings", output_spec={"artifact_type": "findings", "schema": SCHEMA})]
    )
    assert validate_plan(load_plan(json.dumps(good)), capabilities={"search"}).verdict is Verdict.ACCEPT


def counts_hits(given: ArtifactCheckInput) -> CheckResult:
    """The stated count equals the hits the cited searches returned."""
    hits = sum(len(o.result["hits"]) for o in given.cited("search"))
    return verdict_of(
        "count_matches_search", [] if given.data.get("count") == hits else [f"{given.data.get('count')} != {hits}"]
    )


def test_a_program_check_fail_is_a_failed_attempt_and_unknown_never_passes(runtime: Runtime) -> None:
    budget = BudgetLimits(max_reflections_per_artifact=0)
    lying = runtime.start(
        agent_for(ONE, search_then_record({"count": 99}), checks={"findings": [counts_hits]}, budget=budget), "g"
    )
    assert [e["error"] for e in ended(runtime, lying.run_id, "W1")] == ["CHECK_FAILED"]
    assert verdicts(runtime, lying.run_id)[0][2] == {"count_matches_search": ["99 != 1"]}
    honest = runtime.start(agent_for(ONE, search_then_record({"count": 1}), checks={"findings": [counts_hits]}), "g")
    assert honest.status is RunStatus.COMPLETED

    def broken(given: ArtifactCheckInput) -> CheckResult:
        raise RuntimeError("the checker crashed")

    def undecided(given: ArtifactCheckInput) -> CheckResult:
        return CheckResult(name="undecided", verdict=CheckVerdict.UNKNOWN, detail="cannot tell")

    for check in (broken, undecided):
        state = runtime.start(agent_for(ONE, search_then_record({"count": 1}), checks={"findings": [check]}), "g")
        assert "W1" not in state.memo["verified"], check.__name__  # UNKNOWN is never PASS
        outcome = verdicts(runtime, state.run_id)[-1][1]
        assert outcome != "ACCEPT"


def test_a_configured_model_check_judges_the_artifact_and_is_metered(runtime: Runtime) -> None:
    asked: list[ModelRequest] = []

    def judge(req: ModelRequest) -> dict[str, str]:
        asked.append(req)
        ok = req.facts["artifact"].get("count") == 1
        return {"verdict": "PASS" if ok else "FAIL", "detail": "count agrees" if ok else "count unsupported"}

    config = {"model_checked": frozenset({"findings"}), "checker": ScriptedModel(judge)}
    state = runtime.start(agent_for(ONE, search_then_record({"count": 1}), **config), "g")
    assert state.status is RunStatus.COMPLETED and len(asked) == 1
    assert asked[0].facts["evidence"][0]["result"]["hits"][0]["evidence_id"] == "ev:W1"  # it sees what is cited
    plain = runtime.start(agent_for(ONE, search_then_record({"count": 1})), "g")
    assert state.memo["ledger"]["used"]["model_calls"] == plain.memo["ledger"]["used"]["model_calls"] + 1
    assert state.usage.model_calls == plain.usage.model_calls + 1
    refused = runtime.start(
        agent_for(ONE, search_then_record({"count": 2}), budget=BudgetLimits(max_reflections_per_artifact=0), **config),
        "g",
    )
    assert refused.memo["verified"] == [] and verdicts(runtime, refused.run_id)[0][2] == {"model_check": []}
    # No budget left for the check: it is not made, and an unchecked artifact does not pass.
    asked.clear()
    starved = runtime.start(
        agent_for(ONE, search_then_record({"count": 1}), budget=BudgetLimits(max_model_calls=3), **config), "g"
    )
    assert asked == [] and starved.memo["verified"] == []


# --------------------------------------------------------------------------- 8. partial deliveries and handoffs


def test_a_partial_delivery_lists_verified_conclusions_and_every_exhausted_dimension(runtime: Runtime) -> None:
    # W1 passes; W2 runs out of tool calls mid-way: the delivery names what was verified and what ran out.
    wide = plan_doc(
        [
            item("W1", [], ["search"], "findings", risk_level="medium"),
            item("W2", ["W1"], ["search"], "summary", estimated_cost={"tool_calls": 1, "model_calls": 1, "tokens": 0}),
        ]
    )

    def endless(req: ModelRequest) -> Any:
        if req.facts["work_item"]["work_item_id"] == "W1":
            return search_then_record({"ok": True})(req)
        return {"type": "EXECUTE_TOOL", "action": "search", "args": {"query": f"more {len(req.observations)}"}}

    state = runtime.start(
        agent_for(wide, endless, budget=BudgetLimits(max_tool_calls=4, max_reflections_per_artifact=1)), "g"
    )
    assert state.status is RunStatus.PARTIALLY_COMPLETED
    delivered = runtime.store.get_artifact(state.run_id, "partial-delivery", 1)
    assert delivered is not None
    partial = PartialDelivery.model_validate_json(delivered.content)
    [conclusion] = partial.verified_conclusions
    assert conclusion.text.startswith("W1 ") and conclusion.risk.value == "medium"
    assert conclusion.evidence_refs == tuple(state.memo["items"]["W1"]["artifact"]["evidence_refs"]) != ()
    exhausted = [n for n in partial.needed_to_continue if n.startswith("budget tool_calls exhausted")]
    assert exhausted and "4 of 4 used" in exhausted[0]
    assert "complete W2" in partial.needed_to_continue


def test_a_high_risk_artifact_accepted_without_evidence_is_not_a_verified_conclusion(runtime: Runtime) -> None:
    bare = plan_doc(
        [
            item(
                "W1",
                [],
                [],
                "findings",
                risk_level="high",
                approval_required=True,
                output_spec={"artifact_type": "findings", "evidence_required": False},
            ),
            item("W2", ["W1"], ["search"], "summary"),
        ]
    )

    def stops(req: ModelRequest) -> Any:
        if req.facts["work_item"]["work_item_id"] == "W1":
            return search_then_record({"ok": True}, evidence=lambda r: [])(req)
        return {"type": "FAIL", "reason": "cannot"}

    state = drive(runtime, agent_for(bare, stops))
    delivered = runtime.store.get_artifact(state.run_id, "partial-delivery", 1)
    assert delivered is not None
    partial = PartialDelivery.model_validate_json(delivered.content)
    assert partial.verified_conclusions == ()
    assert any("accepted without evidence" in u for u in partial.undecidable)


def test_a_handoff_package_states_its_impact(runtime: Runtime) -> None:
    # The search tool is down; the run hands off to a person: the package says what stopping leaves undone.
    plan = plan_doc(
        [
            item("W1", [], ["search"], "findings"),
            item("W2", ["W1"], [], "summary", risk_level="high", approval_required=True),
        ]
    )

    def keeps_searching(req: ModelRequest) -> Any:
        return {"type": "EXECUTE_TOOL", "action": "search", "args": {"query": f"try {len(req.observations)}"}}

    state = runtime.start(agent_for(plan, keeps_searching, down=True), GOAL.objective)
    [package] = events(runtime, state.run_id, EventType.HANDOFF_RECORDED)
    assert "2 of 2 work items not verified (W1, W2)" in package["impact"]
    assert "high-risk items not done: W2" in package["impact"]
    assert state.pending is not None and "Impact: 2 of 2" in state.pending.question


# --------------------------------------------------------------------------- the gates


def test_stateward_gates_counts_a_bare_artifact_backing_a_high_risk_conclusion(tmp_path: Path) -> None:
    # W1 rests on nothing; W3, high risk, is built on it through W2: W1's artifact backs a high-risk conclusion.
    plan = plan_doc(
        [
            item("W1", [], [], "findings", output_spec={"artifact_type": "findings", "evidence_required": False}),
            item("W2", ["W1"], ["search"], "summary"),
            item("W3", ["W2"], ["search"], "decision", risk_level="high", approval_required=True),
        ]
    )
    low = plan_doc([*plan["work_items"][:2], item("W3", ["W2"], ["search"], "decision")])

    def gates(db: Path, document: dict[str, Any], evidence: Callable[[ModelRequest], list[str]]) -> dict[str, Any]:
        runtime = Runtime(SQLiteStore(db))
        try:
            state = drive(runtime, agent_for(document, search_then_record({"ok": True}, evidence)))
            assert state.status is RunStatus.COMPLETED
        finally:
            runtime.close()
        result = CliRunner().invoke(cli_app, ["gates", "--db", str(db), "--json"])
        report = json.loads(result.stdout)
        found = next(g for g in report["gates"] if g["name"] == "high_risk_without_evidence")
        return {"exit": result.exit_code, **found}

    def nothing(req: ModelRequest) -> list[str]:
        return [] if req.facts["work_item"]["work_item_id"] == "W1" else cite_evidence(req)

    bare = gates(tmp_path / "bare.db", plan, nothing)
    assert (bare["value"], bare["exit"]) == (1, 1) and bare["opportunities"] >= 2
    cited = gates(tmp_path / "cited.db", plan, cite_evidence)  # W1 cites the goal it rests on
    assert (cited["value"], cited["exit"]) == (0, 0) and cited["opportunities"] >= 2
    harmless = gates(tmp_path / "low.db", low, nothing)  # nothing high-risk is built on it
    assert (harmless["value"], harmless["exit"]) == (0, 0)


def test_bad_evidence_arguments_and_configurations_are_refused_by_name(runtime: Runtime) -> None:
    # Evidence is a list of refs: a bare string is an invalid argument at the gateway, nothing is written.
    stringly = search_then_record({"ok": True}, evidence=lambda req: "obs_1")  # type: ignore[arg-type,return-value]
    state = runtime.start(agent_for(ONE, stringly), "g")
    refused = [e["observation"] for e in events(runtime, state.run_id, EventType.TOOL_ATTEMPTED)]
    assert {o["error_code"] for o in refused if o["action"] == "record_output"} == {"INVALID_ARGUMENT"}
    assert "findings" not in state.artifacts and state.memo["verified"] == []
    with pytest.raises(UserError) as err:
        agent_for(ONE, stringly, model_checked=frozenset({"findings"}))  # a model check with no checker model
    assert err.value.code == "INVALID_AGENT"
