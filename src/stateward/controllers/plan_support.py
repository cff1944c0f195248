"""What plan runs share with the Runtime and the tool registry: the tools every plan agent registers,
the finish policy over recorded facts, and how observations are read as progress and outputs."""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from stateward.core.canonical import sha256_hex
from stateward.core.contract import FinishCheck, Observation, OutcomeStatus
from stateward.core.decision import ControlDecision
from stateward.core.errors import RunError
from stateward.core.model_io import ModelRequest
from stateward.core.state import RunState
from stateward.planning.delivery import PartialDelivery
from stateward.planning.plan import Plan
from stateward.planning.progress import StepRecord
from stateward.planning.readiness import parse_evidence
from stateward.tools.errors import ToolInvalidArgument
from stateward.tools.spec import ToolContext, ToolSpec, tool

OUTPUT_TOOL = "record_output"
READINESS_TOOL = "submit_readiness"
PARTIAL_TOOL = "record_partial_delivery"
PARTIAL_ARTIFACT = "partial-delivery"
MAX_EVIDENCE_REFS = 500  # refs one artifact may cite


def plan_run_tools() -> list[ToolSpec]:
    """The two tools every plan agent registers: writing an item's output and a partial delivery.

    Both only emit artifacts, which the Runtime commits with the step: nothing outside the store changes.
    """

    @tool(
        description=(
            "Write this work item's output artifact (JSON text) under its declared artifact type, citing the "
            "evidence it rests on: evidence_id values of this run's observations (or ids their results name), "
            "refs of verified input artifacts, or the goal_ref. The item succeeds only once its checks pass."
        )
    )
    def record_output(
        artifact_type: str,
        content: str,
        ctx: ToolContext,
        evidence: Annotated[list[Annotated[str, Field(max_length=200)]], Field(max_length=MAX_EVIDENCE_REFS)] = [],  # noqa: B006
    ) -> dict[str, Any]:
        try:
            json.loads(content)
        except ValueError as exc:
            raise ToolInvalidArgument(f"content must be JSON: {exc}") from None
        ctx.emit_artifact(artifact_type, content, "application/json")
        return {"recorded": artifact_type}

    @tool(description="Record the partial delivery of a degraded run.")
    def record_partial_delivery(content: str, ctx: ToolContext) -> dict[str, Any]:
        PartialDelivery.model_validate_json(content)
        ctx.emit_artifact(PARTIAL_ARTIFACT, content, "application/json")
        return {"recorded": PARTIAL_ARTIFACT}

    @tool(description="Submit what research covered, on which evidence, and what remains (JSON).")
    def submit_readiness(evidence: str) -> dict[str, Any]:
        try:
            parsed = parse_evidence(evidence)
        except RunError as exc:
            raise ToolInvalidArgument(exc.message) from None
        return {"covered": len(parsed.covered), "remaining": len(parsed.remaining)}

    return [record_output, record_partial_delivery, submit_readiness]


class PlannedMemo(BaseModel):
    """The one entry of a plan run's memo (``PlanRunMemo``) its finish policy reads, typed; the rest is
    the plan run's own and not read here."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    plan: Plan | None = None


def plan_finish_policy(decision: ControlDecision, state: RunState) -> FinishCheck:
    """A plan run finishes on recorded facts only: a partial delivery, or every item's output written."""
    if PARTIAL_ARTIFACT in state.artifacts:
        return FinishCheck(partial=True)
    plan = PlannedMemo.model_validate(state.memo).plan
    if plan is None:
        return FinishCheck(rejected="finish_without_plan")
    missing = sorted({w.output_spec.artifact_type for w in plan.work_items} - set(state.artifacts))
    if missing:
        return FinishCheck(rejected="finish_without_outputs")
    return FinishCheck()


def cite_evidence(request: ModelRequest) -> list[str]:
    """What an honest worker cites for the running item's output: the evidence ids of its attempt's successful
    observations and the refs of its dependencies' verified outputs; an item resting on neither (a restatement
    of the goal) cites the goal. For scripted workers and tests; a model is told the same in its instructions."""
    own = [
        o["evidence_id"]
        for o in request.observations
        if o.get("status") == OutcomeStatus.SUCCESS and o.get("evidence_id")
    ]
    outputs = request.facts.get("outputs") or {}
    deps = (request.facts.get("work_item") or {}).get("dependencies") or ()
    inputs = [outputs[d] for d in deps if d in outputs]
    goal_ref = request.facts.get("goal_ref")
    return [*own, *inputs] or ([str(goal_ref)] if goal_ref else [])


def content_of(obs: Observation) -> str:
    content = obs.args.get("content")
    if isinstance(content, str):
        return content
    texts = [v for v in obs.args.values() if isinstance(v, str)]
    return max(texts, key=len) if texts else ""


def step_record(obs: Observation) -> StepRecord:
    return StepRecord(
        action=obs.action,
        args=obs.args,
        result_hash=sha256_hex(json.dumps(obs.result, sort_keys=True, default=str)),
        new_evidence_ids=tuple(evidence_ids(obs.result)),
        succeeded=obs.status == OutcomeStatus.SUCCESS,
        error_code=obs.error_code,
        confidence=measured_confidence(obs.result),
    )


def measured_confidence(result: Any) -> float | None:
    """A tool result's top-level ``confidence`` (a number in 0..1), or None: anything else is not a measurement."""
    value = result.get("confidence") if isinstance(result, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if 0.0 <= value <= 1.0 else None


def evidence_ids(value: Any) -> list[str]:
    """Evidence ids a tool result names (any ``evidence_id`` / ``evidence_ids`` field, at any depth)."""
    found: list[str] = []
    if isinstance(value, dict):
        for key, inner in value.items():
            if key == "evidence_id" and isinstance(inner, str):
                found.append(inner)
            elif key == "evidence_ids" and isinstance(inner, list):
                found.extend(str(v) for v in inner)
            else:
                found.extend(evidence_ids(inner))
    elif isinstance(value, list):
        for inner in value:
            found.extend(evidence_ids(inner))
    return found


def output_ref(obs: Observation, artifact_type: str) -> str | None:
    if obs.status != OutcomeStatus.SUCCESS:
        return None
    return next((ref for ref in obs.artifacts if ref.rsplit(":v", 1)[0] == artifact_type), None)
