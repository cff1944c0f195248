"""Readiness is computed from submitted evidence, never taken from a model's ready: true."""

from __future__ import annotations

import pytest

from stateward.planning.readiness import (
    InvalidReadinessEvidence,
    ReadinessContract,
    evaluate_readiness,
    parse_evidence,
)

CONTRACT = ReadinessContract(stage="research", required_items=("guide", "release-notes", "call-sites"))
RECORDED = frozenset({"ev:1", "ev:2", "ev:3"})


def test_a_bare_ready_true_is_refused() -> None:
    with pytest.raises(InvalidReadinessEvidence):
        parse_evidence('{"ready": true}')
    with pytest.raises(InvalidReadinessEvidence):
        parse_evidence('{"covered": [], "remaining": [], "ready": true}')


def test_complete_supported_evidence_is_ready() -> None:
    evidence = parse_evidence(
        '{"covered": [{"item": "guide", "basis": ["ev:1"]}, {"item": "release-notes", "basis": ["ev:2"]},'
        ' {"item": "call-sites", "basis": ["ev:3"]}], "remaining": []}'
    )
    assert evaluate_readiness(CONTRACT, evidence, RECORDED).ready


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ('{"covered": [{"item": "guide", "basis": ["ev:1"]}], "remaining": []}', "missing"),
        (
            '{"covered": [{"item": "guide", "basis": []}, {"item": "release-notes", "basis": ["ev:2"]},'
            ' {"item": "call-sites", "basis": ["ev:3"]}]}',
            "unsupported",
        ),
        (
            '{"covered": [{"item": "guide", "basis": ["ev:9"]}, {"item": "release-notes", "basis": ["ev:2"]},'
            ' {"item": "call-sites", "basis": ["ev:3"]}]}',
            "unknown_evidence",
        ),
        (
            '{"covered": [{"item": "guide", "basis": ["ev:1"]}, {"item": "release-notes", "basis": ["ev:2"]},'
            ' {"item": "call-sites", "basis": ["ev:3"]}], "remaining": ["wrappers"]}',
            "open_items",
        ),
    ],
)
def test_gaps_keep_the_stage_open(doc: str, field: str) -> None:
    verdict = evaluate_readiness(CONTRACT, parse_evidence(doc), RECORDED)
    assert not verdict.ready
    assert getattr(verdict, field)
