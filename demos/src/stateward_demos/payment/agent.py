"""The payment migration agent: the 18-item plan on the real engine, with a scripted planner and worker.

The goal contract and the plan ship inside the package, so any process can rebuild the agent from its
:class:`AgentRef`. The controller decides everything that matters - which item runs, when an item is
complete, whether the report passes, whether delivery may happen - and the scripted models only propose.
Delivery is protected twice: W18 waits for an approval bound to ``deliver_report`` of the exact accepted
report version, and the gateway's action gate admits the call only with that same digest.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Final

from pydantic import ValidationError

from stateward import (
    Agent,
    AgentRef,
    Budget,
    Event,
    EventType,
    GuardedAction,
    Model,
    RunState,
    Runtime,
    ToolRegistry,
    action_digest,
)
from stateward.models import ScriptedModel
from stateward.planning import (
    BudgetLimits,
    Confidence,
    FindingRisk,
    GoalContract,
    Plan,
    PlanRunConfig,
    PlanRunController,
    PlanRunMemo,
    WorkItem,
    load_goal,
    load_plan,
    plan_finish_policy,
    plan_run_tools,
)
from stateward.tools import ResourceScope
from stateward.verify import ArtifactVersion, CheckResult, CheckSuite, CheckVerdict, Report
from stateward_demos.payment import faults, reports
from stateward_demos.payment.checks import payment_checks
from stateward_demos.payment.outcome import FACT_ARTIFACTS, final_summary, make_measure
from stateward_demos.payment.scripts import (
    GOAL_RESOURCE,
    PLAN_RESOURCE,
    PROCEDURES,
    gullible,
    planner_policy,
    repeats_search,
    resource_text,
    worker_policy,
)
from stateward_demos.payment.semantic import OrderCertaintyCheck, scripted_checker
from stateward_demos.payment.tools import RECEIPT_ARTIFACT, REPORT_ARTIFACT, make_tools

NAME: Final = "payment-migration"  # registered by stateward.runtime.agent_registry.builtin_agents
DELIVER_TOOL: Final = "deliver_report"
REPORT_ITEM: Final = "W16"
# The source's budget (sections 4 and 18): 45 minutes, 120 tool calls, 35 model calls, 180,000 tokens, 80 attempts,
# 2 replans, 1 reflection per artifact. Only the MODEL and LOCAL_REACT items ask a model; the plan estimates
# 90 tool and 23 model calls. One replan happens: the case's plan v2, after the inventory shows a repository
# nobody can read.
BUDGET: Final = BudgetLimits(
    max_tool_calls=120,
    max_model_calls=35,
    max_tokens=180_000,
    max_elapsed_seconds=2700,
    max_total_attempts=80,
    max_replans=2,
    max_reflections_per_artifact=1,
)
# Items whose plan entry says 0 steps get this bound; W09 (read 10 files after 11 searches) needs 22.
DEFAULT_REACT_STEPS: Final = 24


def goal() -> GoalContract:
    return load_goal(resource_text(GOAL_RESOURCE))


def plan() -> Plan:
    return load_plan(resource_text(PLAN_RESOURCE))


def verify_report(
    content: str, recorded: frozenset[str] | None = None, checker: Model | None = None
) -> Sequence[CheckResult]:
    """Every deterministic check and the semantic check on every version; content that is not a report fails
    the schema check. ``recorded`` is the run's evidence store (cited evidence must be in it; None: every
    fixture evidence id, for checking a report outside a run); ``checker`` the semantic check's model."""
    try:
        report = Report.model_validate_json(content)
    except ValidationError as exc:
        detail = f"not a report: {exc.error_count()} schema error(s)"
        return [CheckResult(name="schema_valid", verdict=CheckVerdict.FAIL, detail=detail, blocks_partial=True)]
    artifact = ArtifactVersion.create(REPORT_ARTIFACT, report)
    context = reports.check_context()
    if recorded is not None:
        context = context.model_copy(update={"evidence_ids": recorded})
    semantic = OrderCertaintyCheck(checker or ScriptedModel(scripted_checker, name="scripted-checker"))
    return CheckSuite(context=context, model_checks=(semantic,)).run(artifact)


def evidence_verifier(content: str, recorded: frozenset[str], checker: Model | None) -> Sequence[CheckResult]:
    """The run's verifier: the report checked against the evidence this run recorded, judged by ``checker`` (the
    run's checker model, metered: its calls are charged to the run's budget, and not made when it cannot pay)."""
    return verify_report(content, recorded, checker)


def deliver_guard(report_ref: str) -> GuardedAction:
    """The one action an approval of W18 admits: deliver_report of exactly this report version.

    The gateway's action gate digests calls with ``CallContext.plan_version`` = None (the Runtime does not
    bind tool calls to a plan version), so the guard does too; a different digest would never match.
    """
    args = {"report_ref": report_ref}
    return GuardedAction(
        tool=DELIVER_TOOL, args=args, plan_version=None, digest=action_digest(DELIVER_TOOL, args, None)
    )


def approval_action(item: WorkItem, memo: PlanRunMemo) -> GuardedAction:
    """W18's approval is bound to the report version verification accepted, not to "the latest report"."""
    run = memo.items.get(REPORT_ITEM)
    ref = run.output if run is not None and run.output else f"{REPORT_ARTIFACT}:unverified"
    return deliver_guard(ref)


def build_agent(
    max_steps: int = 200,
    delivery_log: dict[str, dict[str, str]] | None = None,
    model_spec: str | None = None,
    budget: dict[str, Any] | None = None,
    clock: Callable[[], datetime] | None = None,
    fault: str | None = None,
) -> Agent:
    """The agent for one run. ``max_steps`` and ``budget`` are JSON, so another process rebuilds it from the
    AgentRef.

    ``fault`` (a :class:`Fault` value) runs the case under one of its faults. ``budget`` overrides limits
    of :data:`BUDGET` (e.g. ``{"max_tokens": 202000}``). ``model_spec`` (``--model``) drives the planner,
    the worker and the report's semantic checker with that model instead of the scripted ones.
    ``delivery_log`` and ``clock`` (tests only, not part of the ref) replace the simulated delivery target
    and the wall clock that charges elapsed time.
    """
    injected = faults.parse(fault)
    domain = make_tools(delivery_log=delivery_log, fault=injected)
    tools = ToolRegistry([*domain, *plan_run_tools()])
    the_goal = goal()
    fault_limits = faults.BUDGET_LIMITS if injected is faults.Fault.BUDGET else {}
    limits = BUDGET.model_copy(update={**fault_limits, **(budget or {})})
    planner: Model = ScriptedModel(planner_policy, name="scripted-planner")
    checker: Model = ScriptedModel(scripted_checker, name="scripted-checker")
    policy = gullible(worker_policy) if injected is faults.Fault.INJECTION else worker_policy
    policy = repeats_search(policy) if injected is faults.Fault.SAME_SEARCH else policy
    worker: Model = ScriptedModel(policy, name="scripted-worker")
    if model_spec is not None:
        from stateward.models import model_from_spec

        planner = worker = checker = model_from_spec(model_spec)
    extra: dict[str, Any] = {} if clock is None else {"clock": clock}
    if injected is faults.Fault.HIGH_RISK_LOW_CONFIDENCE:
        # The code index the call-site counts come from is stale: the findings (money movement) are high risk,
        # and the assessment cannot be more than low confidence.
        extra.update(deliverable_risk=FindingRisk.HIGH, deliverable_confidence=Confidence.LOW)
    config = PlanRunConfig(
        goal=the_goal,
        budget=BudgetLimits.model_validate(limits.model_dump()),
        measure=make_measure(the_goal),
        fact_artifacts=FACT_ARTIFACTS,
        **extra,
        deliverable=REPORT_ARTIFACT,
        evidence_verifier=evidence_verifier,
        checks=payment_checks(authorities=injected is faults.Fault.CONFLICTING_AUTHORITIES),
        procedures=PROCEDURES,
        checker=checker,
        default_react_steps=DEFAULT_REACT_STEPS,
        approval_action=approval_action,
        capabilities=frozenset(tools.names()),
    )
    controller = PlanRunController(planner, worker, config)
    params: dict[str, Any] = {"max_steps": max_steps}
    if budget:
        params["budget"] = budget
    if injected is not None:
        params["fault"] = injected.value
    if model_spec is not None:
        params["model_spec"] = model_spec
    return Agent(
        name="payment-migration",
        controller=controller,
        tools=tools,
        ref=AgentRef(name=NAME, params=params),
        finish_policy=plan_finish_policy,
        budget=Budget(max_steps=max_steps),
        # A refused proposal (e.g. an injected call the item does not show) is named to the model once.
        on_rejected_signal="correct_once",
        # A repository the contract puts out of scope is refused by the gateway (SCOPE_VIOLATION), not searched.
        resource_scope=ResourceScope(denied=frozenset(the_goal.scope.out_of_scope)),
    )


def summary(runtime: Runtime, state: RunState) -> dict[str, Any]:
    """What the demo prints, read back from the store: the record, not what the script meant to do."""
    pending = state.pending
    action = pending.guarded_action if pending is not None else None
    ledger = state.memo.get("ledger", {})
    events = _all_events(runtime, state.run_id)
    receipts = [a for a in runtime.artifacts(state.run_id) if a.name == RECEIPT_ARTIFACT]
    return {
        "run_id": state.run_id,
        **final_summary(runtime, state),
        "pending_request_id": None if pending is None else pending.request_id,
        "pending_action": None if action is None else {"tool": action.tool, "args": action.args},
        "artifacts": [{"name": a.name, "version": a.version} for a in runtime.artifacts(state.run_id)],
        "verifications": [
            {"artifact": e.payload["artifact"], "outcome": e.payload["outcome"]}
            for e in events
            if e.type is EventType.VERIFICATION_RECORDED
        ],
        "budget_used": {
            **{k: ledger.get("used", {}).get(k, 0) for k in ("tool_calls", "model_calls", "tokens", "attempts")},
            "reflections": ledger.get("reflections", {}),
            "steps": state.usage.steps,
        },
        "constraint_deviations": [
            {"constraint_id": e.payload["constraint_id"], "message": e.payload["message"]}
            for e in events
            if e.type is EventType.CONSTRAINT_DEVIATION_RECORDED
        ],
        "delivery_receipt": None if not receipts else json.loads(receipts[-1].content),
    }


def _all_events(runtime: Runtime, run_id: str) -> list[Event]:
    """Every event of the run, page by page."""
    events: list[Event] = []
    while page := runtime.events(run_id, after=events[-1].seq if events else 0):
        events += page
    return events
