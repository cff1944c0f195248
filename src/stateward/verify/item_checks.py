"""What a work item's artifact must pass before its item succeeds: its output schema, the evidence it cites
(resolved against what the run recorded), the program checks registered for its artifact type and, if
configured, a model check.

A work item's status is derived from facts, never from a worker saying it is done: an artifact of the right
type is only a claim until it validates, rests on evidence the run really recorded and its checks PASS.
Every check returns PASS / FAIL / UNKNOWN with findings; a check that raises is UNKNOWN, and UNKNOWN never
passes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from stateward.core.contract import Observation, OutcomeStatus
from stateward.core.errors import ErrorCode
from stateward.core.model_io import ModelReply
from stateward.planning.plan import schema_problem
from stateward.verify.checks import CheckResult, CheckVerdict

GOAL_REF_PREFIX = "goal:"  # ``goal:<goal_id>``: the run's goal contract, evidence for restating it
MAX_FINDINGS = 20  # findings kept per check: enough to act on, bounded whatever an artifact holds


class EvidenceKind(StrEnum):
    """What an evidence ref resolved to."""

    OBSERVATION = "observation"  # a tool attempt of this run, by its evidence_id
    RECORDED_FACT = "recorded_fact"  # an evidence id a recorded tool result names
    ARTIFACT = "artifact"  # a verified artifact of an item this one depends on
    GOAL = "goal"  # the run's goal contract


@dataclass(frozen=True)
class ResolvedEvidence:
    """One cited ref and what the run recorded under it (the observation, or the artifact's content)."""

    ref: str
    kind: EvidenceKind
    observation: Observation | None = None
    content: str | None = None


@dataclass(frozen=True)
class EvidenceIndex:
    """Every ref an artifact of this run may cite, built from the run's records: each successful observation
    by its own evidence_id and by the evidence ids its result names, the verified upstream artifacts by ref,
    and the goal. Built once per verification, never from what the artifact says about itself."""

    observations: Mapping[str, Observation]
    artifacts: Mapping[str, str] = field(default_factory=dict)  # ref -> content
    goal_ref: str | None = None

    @classmethod
    def build(
        cls, observations: Iterable[Observation], artifacts: Mapping[str, str], goal_id: str | None
    ) -> EvidenceIndex:
        """The index of ``observations`` (a run's log), the verified upstream ``artifacts`` and the goal."""
        by_ref: dict[str, Observation] = {}
        for obs in observations:
            if obs.status != OutcomeStatus.SUCCESS:
                continue  # a failed call backs no claim
            if obs.evidence_id:
                by_ref[obs.evidence_id] = obs
            for named in named_evidence(obs.result):
                by_ref.setdefault(named, obs)
        return cls(by_ref, dict(artifacts), None if goal_id is None else f"{GOAL_REF_PREFIX}{goal_id}")

    def resolve(self, ref: str) -> ResolvedEvidence | None:
        """What ``ref`` names in this run, or None when the run recorded nothing under it."""
        if ref in self.artifacts:
            return ResolvedEvidence(ref=ref, kind=EvidenceKind.ARTIFACT, content=self.artifacts[ref])
        if self.goal_ref is not None and ref == self.goal_ref:
            return ResolvedEvidence(ref=ref, kind=EvidenceKind.GOAL)
        obs = self.observations.get(ref)
        if obs is None:
            return None
        kind = EvidenceKind.OBSERVATION if ref == obs.evidence_id else EvidenceKind.RECORDED_FACT
        return ResolvedEvidence(ref=ref, kind=kind, observation=obs)

    def recorded_ids(self) -> frozenset[str]:
        """Every observation-backed ref (own ids and named ids)."""
        return frozenset(self.observations)


def named_evidence(value: Any) -> list[str]:
    """Evidence ids a JSON value names (any ``evidence_id`` / ``evidence_ids`` field, at any depth)."""
    found: list[str] = []
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key, inner in node.items():
                if key == "evidence_id" and isinstance(inner, str):
                    found.append(inner)
                elif key == "evidence_ids" and isinstance(inner, list):
                    found.extend(str(v) for v in inner if isinstance(v, str | int))
                else:
                    stack.append(inner)
        elif isinstance(node, list):
            stack.extend(node)
    return found


@dataclass(frozen=True)
class ArtifactCheckInput:
    """What a program check judges: the artifact (its ref, text and parsed JSON), the evidence it cites as the
    run resolved it, and the run's facts (its observations, the verified upstream contents by artifact type)."""

    artifact_type: str
    ref: str
    content: str
    data: Any  # the parsed JSON content (None if it does not parse)
    evidence: tuple[ResolvedEvidence, ...] = ()
    observations: Sequence[Observation] = ()
    inputs: Mapping[str, str] = field(default_factory=dict)  # verified upstream content by artifact type
    recorded: frozenset[str] = frozenset()  # every evidence ref the run's observations back
    # Conflicts people settled at a handoff: conflict key -> the source they chose (a recorded fact).
    chosen_sources: Mapping[str, str] = field(default_factory=dict)

    def cited(self, action: str | None = None) -> list[Observation]:
        """The cited observations (of ``action``, if given), each once, in citation order."""
        seen: dict[int, Observation] = {}
        for ev in self.evidence:
            obs = ev.observation
            if obs is not None and (action is None or obs.action == action):
                seen.setdefault(id(obs), obs)
        return list(seen.values())

    def recorded_results(self, action: str) -> list[Any]:
        """The results of every successful ``action`` call the run recorded, oldest first."""
        return [o.result for o in self.observations if o.action == action and o.status == OutcomeStatus.SUCCESS]


ArtifactCheck = Callable[[ArtifactCheckInput], CheckResult]


def verdict_of(name: str, findings: Sequence[str], ok: str = "", *, repairable: bool = True) -> CheckResult:
    """PASS when there are no findings, else FAIL with them (bounded)."""
    if not findings:
        return CheckResult(name=name, verdict=CheckVerdict.PASS, detail=ok)
    kept = tuple(findings[:MAX_FINDINGS])
    more = len(findings) - len(kept)
    detail = "; ".join(kept) + (f"; and {more} more" if more else "")
    return CheckResult(name=name, verdict=CheckVerdict.FAIL, detail=detail, findings=kept, repairable=repairable)


def check_output_schema(schema: dict[str, Any] | None, data: Any, parsed: bool) -> CheckResult:
    """The artifact meets its item's declared JSON Schema (every violation named by its path)."""
    name = "output_schema"
    if schema is None:
        return CheckResult(name=name, verdict=CheckVerdict.PASS)  # nothing declared: nothing to fail
    if not parsed:
        return verdict_of(name, ["content is not JSON"])
    problem = schema_problem(schema)
    if problem is not None:  # the validator refuses such a plan; an older one is not judged by it
        return CheckResult(name=name, verdict=CheckVerdict.UNKNOWN, detail=f"schema is malformed: {problem}")
    import jsonschema  # ~40 modules: loaded by the first item whose output carries a schema

    validator = jsonschema.validators.validator_for(schema)(schema)
    found = [
        f"{'/'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message[:200]}"
        for e in sorted(validator.iter_errors(data), key=lambda e: list(map(str, e.absolute_path)))
    ]
    return verdict_of(name, found, "meets its schema")


def check_evidence(cited: Sequence[str], resolved: Sequence[ResolvedEvidence], required: bool) -> CheckResult:
    """The artifact cites evidence (unless its item needs none) and every ref resolves in this run."""
    name = "cites_evidence"
    known = {r.ref for r in resolved}
    unresolved = [ref for ref in dict.fromkeys(cited) if ref not in known]
    if unresolved:
        findings = [
            f"{ErrorCode.EVIDENCE_UNRESOLVED.value}: {ref!r} is no observation of this run nor a verified "
            "input of this item"
            for ref in unresolved
        ]
        return verdict_of(name, findings)
    if required and not cited:
        return verdict_of(name, [f"{ErrorCode.EVIDENCE_MISSING.value}: the artifact cites no evidence"])
    return CheckResult(name=name, verdict=CheckVerdict.PASS)


def run_checks(checks: Iterable[ArtifactCheck], given: ArtifactCheckInput) -> list[CheckResult]:
    """Run each registered check; one that raises or returns something else is UNKNOWN (never PASS)."""
    out: list[CheckResult] = []
    for check in checks:
        name = getattr(check, "__name__", type(check).__name__)
        try:
            result = check(given)
        except Exception as exc:  # a broken check says nothing about the artifact
            code = getattr(exc, "code", None)
            why = type(exc).__name__ if code is None else f"{code}: {str(exc)[:300]}"
            out.append(CheckResult(name=name, verdict=CheckVerdict.UNKNOWN, detail=f"check failed: {why}"))
            continue
        if not isinstance(result, CheckResult):
            out.append(CheckResult(name=name, verdict=CheckVerdict.UNKNOWN, detail="check returned no CheckResult"))
            continue
        out.append(result)
    return out


def reply_judgement(reply: ModelReply) -> dict[str, Any] | str:
    """A checker model's reply as a judgement for :func:`stateward.verify.run_model_check`: its JSON object,
    or ``"UNKNOWN"`` for a refused call or anything that is not one (never PASS by default)."""
    if reply.rejection_code is not None:
        return "UNKNOWN"
    try:
        parsed = json.loads(reply.text)
    except ValueError:
        return "UNKNOWN"
    return parsed if isinstance(parsed, dict) else "UNKNOWN"


def parse_content(content: str) -> tuple[Any, bool]:
    """The artifact's JSON, and whether it parsed."""
    try:
        return json.loads(content), True
    except ValueError:
        return None, False
