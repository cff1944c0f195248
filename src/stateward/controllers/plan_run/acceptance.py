"""When a work item's artifact may count: it meets its output schema, every evidence ref it cites resolves to
what this run recorded (an observation, a verified input, the goal), and it passes the program checks
registered for its artifact type and, if configured, a metered model check. The results go to the item's
verification policy; nothing here decides an item's state.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from stateward.controllers.plan_run import facts as view
from stateward.controllers.plan_run.memo import ArtifactFact, PlanRunMemo
from stateward.controllers.plan_run.metering import charge_checks, metered_checker
from stateward.controllers.plan_run.services import Services
from stateward.controllers.plan_support import OUTPUT_TOOL, content_of
from stateward.controllers.replies import document_request
from stateward.core.canonical import sha256_hex
from stateward.core.contract import DecisionContext, Observation, OutcomeStatus
from stateward.core.model_io import ReplyContract
from stateward.models.base import Model, Usage, complete
from stateward.planning.plan import RiskLevel, WorkItem
from stateward.verify.checks import (
    CheckContext,
    CheckResult,
    CheckVerdict,
    ModelJudgement,
    run_model_check,
)
from stateward.verify.item_checks import (
    ArtifactCheckInput,
    EvidenceIndex,
    check_evidence,
    check_output_schema,
    parse_content,
    reply_judgement,
    run_checks,
)
from stateward.verify.report import ArtifactVersion

MODEL_CHECK_INSTRUCTIONS = (
    "You check one work item's artifact against the evidence it cites. Reply with one JSON object: "
    '{"verdict": "PASS" | "FAIL" | "UNKNOWN", "detail": "why"}. FAIL when a statement is not supported by the '
    "cited evidence; UNKNOWN when the evidence cannot decide."
)
MAX_CHECK_EVIDENCE_CHARS = 20_000  # cited results shown to the model check, in all
_RISK_ORDER = (RiskLevel.LOW, RiskLevel.MEDIUM, RiskLevel.HIGH)


def evidence_index(svc: Services, ctx: DecisionContext, memo: PlanRunMemo, item: WorkItem) -> EvidenceIndex:
    """What ``item``'s artifact may cite: this run's observations, its verified upstream artifacts, the goal."""
    upstream = view.upstream(memo, item)
    refs = {memo.items[w].output: w for w in upstream if w in memo.verified and w in memo.items}
    artifacts = {
        ref: content_of(o)
        for o in ctx.observations
        if o.status == OutcomeStatus.SUCCESS
        for ref in o.artifacts
        if ref in refs
    }
    return EvidenceIndex.build(ctx.observations, artifacts, svc.config.goal.goal_id)


def cited_refs(obs: Observation) -> tuple[str, ...]:
    """The refs an artifact cites: ``record_output``'s ``evidence`` argument; an artifact another tool made
    rests on that tool's own recorded call."""
    if obs.action != OUTPUT_TOOL:
        return () if obs.evidence_id is None else (obs.evidence_id,)
    given = obs.args.get("evidence")
    if not isinstance(given, list):
        return ()
    return tuple(dict.fromkeys(str(ref) for ref in given if isinstance(ref, str | int)))


def backs_risk(memo: PlanRunMemo, item: WorkItem) -> RiskLevel:
    """The highest risk of a conclusion this artifact backs: its own item's and every item built on it
    (directly or not), walked once over the plan's reversed dependencies."""
    assert memo.plan is not None
    dependents: dict[str, list[WorkItem]] = {}
    for other in memo.plan.work_items:
        for dep in other.dependencies:
            dependents.setdefault(dep, []).append(other)
    highest, seen, todo = item.risk_level, {item.work_item_id}, [item.work_item_id]
    while todo and highest is not RiskLevel.HIGH:
        for other in dependents.get(todo.pop(), ()):
            if other.work_item_id not in seen:
                seen.add(other.work_item_id)
                todo.append(other.work_item_id)
                highest = max(highest, other.risk_level, key=_RISK_ORDER.index)
    return highest


def judge(
    svc: Services,
    ctx: DecisionContext,
    memo: PlanRunMemo,
    item: WorkItem,
    ref: str,
    obs: Observation,
    charged: list[Usage],
) -> tuple[list[CheckResult], ArtifactFact]:
    """Every acceptance check on the artifact ``ref`` written by ``obs``, and the artifact's record."""
    run = memo.items[item.work_item_id]
    spec = item.output_spec
    content = content_of(obs)
    data, parsed = parse_content(content)
    index = evidence_index(svc, ctx, memo, item)
    cited = cited_refs(obs)
    resolved = tuple(r for r in (index.resolve(c) for c in cited) if r is not None)
    results = [
        check_output_schema(spec.json_schema, data, parsed),
        check_evidence(cited, resolved, spec.evidence_required),
    ]
    given = ArtifactCheckInput(
        artifact_type=spec.artifact_type,
        ref=ref,
        content=content,
        data=data,
        evidence=resolved,
        observations=ctx.observations,
        inputs=view.verified_contents(ctx, memo, view.upstream(memo, item)),
        recorded=index.recorded_ids(),
        chosen_sources={k: c.source for k, c in memo.source_choices.items()},
    )
    results += run_checks(svc.config.checks.get(spec.artifact_type, ()), given)
    if spec.artifact_type in svc.config.model_checked:
        results.append(model_check(svc, memo, item, given, charged))
    attempt = run.attempts[-1] if run.attempts else None
    fact = ArtifactFact(
        ref=ref,
        schema_version=spec.schema_version,
        source_attempt=None if attempt is None else attempt.attempt_id,
        evidence_refs=cited,
        sha256=sha256_hex(content),
    )
    return results, fact


def model_check(
    svc: Services, memo: PlanRunMemo, item: WorkItem, given: ArtifactCheckInput, charged: list[Usage]
) -> CheckResult:
    """The configured checker model judges the artifact against its cited evidence, within the budget left
    (a call the budget cannot carry is not made: UNKNOWN). Its calls are the item's, like its worker's."""
    checker = metered_checker(svc, memo)
    name = "model_check"
    if checker is None:
        return CheckResult(name=name, verdict=CheckVerdict.UNKNOWN, detail="no checker model configured")
    check = _EvidenceModelCheck(checker, given)
    name_part, _, version = given.ref.rpartition(":v")
    artifact = ArtifactVersion.create(name_part, given.content, version=int(version) if version.isdigit() else 1)
    result = run_model_check(check, artifact, CheckContext())
    charge_checks(memo, item, checker, charged)
    return result


class _EvidenceModelCheck:
    """A model check over one artifact and the evidence it cites (the cited results, bounded)."""

    name = "model_check"

    def __init__(self, model: Model, given: ArtifactCheckInput) -> None:
        self.model = model
        self.given = given

    def judge(self, artifact: ArtifactVersion, context: CheckContext) -> ModelJudgement | dict[str, Any] | str:
        evidence: list[dict[str, Any]] = []
        used = 0
        for ev in self.given.evidence:
            shown = {"ref": ev.ref, "kind": ev.kind.value}
            if ev.observation is not None:
                shown["result"] = ev.observation.result
            elif ev.content is not None:
                shown["content"] = ev.content
            size = len(json.dumps(shown, default=str))
            if used + size > MAX_CHECK_EVIDENCE_CHARS:
                break
            evidence.append(shown)
            used += size
        reply = complete(
            self.model,
            document_request(
                ReplyContract.CHECK_JUDGEMENT,
                purpose="content",
                goal=f"check the {self.given.artifact_type} artifact against its evidence",
                facts={"artifact": self.given.data, "evidence": evidence},
                instructions=MODEL_CHECK_INSTRUCTIONS,
            ),
        )
        return reply_judgement(reply)


def findings_text(results: Sequence[CheckResult]) -> str:
    """What the next attempt is told to fix: each check that did not pass, with its findings."""
    parts = []
    for r in results:
        if r.verdict is CheckVerdict.PASS:
            continue
        parts.append(f"{r.name} {r.verdict.value}: {r.detail}".rstrip(": "))
    return "; ".join(parts)[:4000]
