"""The Payment SDK migration scenario: 12 repositories (11 accessible), 8 breaking changes, 37 call sites,
3 high- and 5 medium-risk modules. ``v1`` states 36 call sites and has a high-risk claim without evidence;
``v2`` is the repaired report that passes every check."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from stateward.verify import CheckContext, CheckSuite

REPOS = [
    "checkout-api",
    "payments-core",
    "billing-worker",  # no access
    "refund-service",
    "merchant-portal",
    "invoice-api",
    "ledger",
    "subscription-service",
    "fraud-check",
    "payout-service",
    "mobile-bff",
    "admin-console",
]
ACCESSIBLE = [r for r in REPOS if r != "billing-worker"]
SECTIONS = ["summary", "scope", "breaking_changes", "call_sites", "risk_matrix", "migration_order", "gaps"]
HIGH = ["payments-core/gateway", "checkout-api/charge", "refund-service/refund"]
MEDIUM = [
    "invoice-api/client",
    "ledger/posting",
    "subscription-service/renewal",
    "payout-service/batch",
    "mobile-bff/pay",
]
EVIDENCE = {
    "ev-guide": "official migration guide",
    "ev-release": "v2 release notes",
    **{f"ev-cs-{i:02d}": f"search hit {i}" for i in range(1, 38)},
    "ev-access-billing": "403 from billing-worker",
}


def report_doc(**override: Any) -> dict[str, Any]:
    """The repaired (v2) report as JSON data; ``override`` replaces top-level fields."""
    doc: dict[str, Any] = {
        "title": "Payment SDK v2 migration assessment",
        "sections": [{"section_id": s, "title": s, "body": f"{s} text"} for s in SECTIONS],
        "claims": [
            {
                "claim_id": "c1",
                "text": "payments-core must migrate first",
                "risk": "high",
                "confidence": "high",
                "evidence_ids": ["ev-guide", "ev-cs-01"],
            },
            {
                "claim_id": "c2",
                "text": "refund flow uses the removed sync capture API",
                "risk": "high",
                "confidence": "high",
                "evidence_ids": ["ev-release", "ev-cs-20"],
            },
            {
                "claim_id": "c3",
                "text": "billing-worker could not be analysed",
                "risk": "none_found",
                "confidence": "low",
                "evidence_ids": ["ev-access-billing"],
            },
        ],
        "breaking_changes": [
            {"change_id": f"BC{i}", "title": f"change {i}", "evidence_ids": ["ev-guide" if i % 2 else "ev-release"]}
            for i in range(1, 9)
        ],
        "call_sites": [
            {
                "call_site_id": f"cs-{i:02d}",
                "repository": ACCESSIBLE[i % len(ACCESSIBLE)],
                "module": "m",
                "location": f"src/f{i}.py:10",
                "evidence_ids": [f"ev-cs-{i:02d}"],
            }
            for i in range(1, 38)
        ],
        "module_risks": [{"module": m, "risk": "high", "evidence_ids": ["ev-guide"]} for m in HIGH]
        + [{"module": m, "risk": "medium", "evidence_ids": ["ev-release"]} for m in MEDIUM],
        "coverage": [
            {"repository": r, "status": "NOT_ACCESSIBLE" if r == "billing-worker" else "ANALYZED"} for r in REPOS
        ],
        "stated": {
            "repositories_expected": 12,
            "repositories_accessible": 11,
            "repositories_analyzed": 11,
            "breaking_changes": 8,
            "call_sites": 37,
            "modules_by_risk": {"high": 3, "medium": 5},
        },
    }
    doc.update(override)
    return doc


def report_v1_doc() -> dict[str, Any]:
    """v1: states 36 call sites (37 listed) and claim c2 (high risk) cites no evidence."""
    doc = report_doc()
    doc["stated"] = {**doc["stated"], "call_sites": 36}
    doc["claims"] = [*doc["claims"][:1], {**doc["claims"][1], "evidence_ids": []}, *doc["claims"][2:]]
    return doc


@pytest.fixture
def make_doc() -> Callable[..., dict[str, Any]]:
    return report_doc


@pytest.fixture
def v1_doc() -> dict[str, Any]:
    return report_v1_doc()


@pytest.fixture
def ctx() -> CheckContext:
    return CheckContext.build(EVIDENCE, in_scope=tuple(REPOS), required_sections=tuple(SECTIONS))


@pytest.fixture
def suite(ctx: CheckContext) -> CheckSuite:
    return CheckSuite(context=ctx)
