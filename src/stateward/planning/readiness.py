"""Readiness by contract: whether an exploring stage may hand over to the next (research -> plan,
plan -> execute) is computed by code over structured evidence, never taken from a model's word.

A model submits :class:`ReadinessEvidence` — which items it covered, on what basis, what remains.
There is deliberately no ``ready`` field: ``{"ready": true}`` is not evidence, and the strict model
refuses it as an unexpected field.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, ValidationError

from stateward.core.errors import ErrorCode, RunError


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CoveredItem(_Frozen):
    item: str = Field(min_length=1)
    basis: tuple[str, ...] = ()  # evidence ids that support it


class ReadinessEvidence(_Frozen):
    covered: tuple[CoveredItem, ...] = ()
    remaining: tuple[str, ...] = ()


class ReadinessContract(_Frozen):
    """What must be true to leave the stage: every required item covered, each with enough basis,
    nothing left open, and every cited evidence id one the run actually recorded."""

    stage: str = Field(min_length=1)
    required_items: tuple[str, ...] = Field(min_length=1)
    min_basis_per_item: NonNegativeInt = 1


class ReadinessVerdict(_Frozen):
    ready: bool
    missing: tuple[str, ...] = ()
    unsupported: tuple[str, ...] = ()
    unknown_evidence: tuple[str, ...] = ()
    open_items: tuple[str, ...] = ()


class InvalidReadinessEvidence(RunError):
    default_code = ErrorCode.INVALID_READINESS_EVIDENCE


def parse_evidence(text: str) -> ReadinessEvidence:
    """The submitted evidence, or a named error; a bare ``ready: true`` is an error, not a shortcut."""
    try:
        return ReadinessEvidence.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise InvalidReadinessEvidence(f"{'.'.join(map(str, first['loc']))}: {first['msg']}") from None


def evaluate_readiness(
    contract: ReadinessContract, evidence: ReadinessEvidence, recorded_evidence: frozenset[str]
) -> ReadinessVerdict:
    covered = {c.item: c for c in evidence.covered}
    missing = tuple(i for i in contract.required_items if i not in covered)
    unsupported = tuple(
        i for i in contract.required_items if i in covered and len(covered[i].basis) < contract.min_basis_per_item
    )
    unknown = tuple(sorted({e for c in evidence.covered for e in c.basis} - recorded_evidence))
    open_items = tuple(evidence.remaining)
    ready = not (missing or unsupported or unknown or open_items)
    return ReadinessVerdict(
        ready=ready, missing=missing, unsupported=unsupported, unknown_evidence=unknown, open_items=open_items
    )
