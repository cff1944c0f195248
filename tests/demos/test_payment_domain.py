"""The payment migration scenario's numbers hold when recomputed through its tools and the gateway.

12 repositories (11 accessible), 8 breaking changes, 37 direct call sites, 3 high / 5 medium risk
modules; report v2 cites only evidence the tools can show and passes the default checks, v1 does not.
"""

from __future__ import annotations

import importlib.util
import json
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from stateward.tools import (
    CallContext,
    InMemoryGatewayStore,
    OutcomeStatus,
    RuntimeAction,
    ToolCall,
    ToolErrorCode,
    ToolGateway,
    ToolOutcome,
)
from stateward.verify import CheckSuite, CheckVerdict, failures
from stateward_demos.payment import facts
from stateward_demos.payment.reports import REQUIRED_SECTIONS, artifact_v1, artifact_v2, check_context, report_v2
from stateward_demos.payment.tools import make_tools

ROOT = Path(__file__).resolve().parents[2]


class Client:
    """Calls the scenario's tools through a real gateway, one step per call."""

    def __init__(self) -> None:
        self.log: dict[str, dict[str, str]] = {}
        self.gateway = ToolGateway(make_tools(delivery_log=self.log), InMemoryGatewayStore(), sleep=lambda s: None)
        self.step = 0

    def invoke(self, tool: str, step: int | None = None, approved: bool = False, **args: Any) -> ToolOutcome:
        self.step += 1
        call = ToolCall(tool=tool, args=args)
        digests = frozenset({self.gateway.action_digest(call, None)}) if approved else frozenset()
        ctx = CallContext(run_id="run-payment", step=step or self.step, approved_digests=digests)
        return self.gateway.invoke(call, ctx)

    def __call__(self, tool: str, **args: Any) -> Any:
        out = self.invoke(tool, **args)
        assert out.status is OutcomeStatus.SUCCESS, (tool, args, out.error)
        return out.result


@pytest.fixture
def client() -> Client:
    return Client()


def accessible(client: Client) -> list[str]:
    repos = [r["name"] for r in client("list_repositories")["repositories"]]
    return [r for r in repos if client("check_repository_access", repo=r)["status"] == "ACCESSIBLE"]


def guide_changes(client: Client) -> list[dict[str, Any]]:
    hits = client("search_docs", query="paysdk v2 migration guide breaking changes", space="payment-platform")["hits"]
    guide = next(h for h in hits if h["authority"] == "official" and "migration guide" in h["title"])
    sections = client("get_document", doc_id=guide["doc_id"])["sections"]
    return [s for s in sections if "change_id" in s["fields"]]


def direct_matches(client: Client) -> dict[str, dict[str, Any]]:
    """Every non-test match of every breaking change's search pattern, keyed by evidence id."""
    found: dict[str, dict[str, Any]] = {}
    patterns = {bc["fields"]["search_pattern"]: bc["fields"]["change_id"] for bc in guide_changes(client)}
    for repo in accessible(client):
        for pattern, change_id in patterns.items():
            for m in client("search_code", repo=repo, query=pattern)["matches"]:
                if not m["is_test"]:
                    found.setdefault(m["evidence_id"], {**m, "repository": repo, "change_id": change_id})
    return found


def verify_conftest() -> ModuleType:
    """tests/verify/conftest.py as a plain module (its scenario constants; its fixtures are ignored)."""
    spec = importlib.util.spec_from_file_location("payment_verify_scenario", ROOT / "tests/verify/conftest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --------------------------------------------------------------------------- tools and scope


def test_tool_names_are_the_plans_capabilities() -> None:
    plan = json.loads((ROOT / "examples/plans/payment_migration.json").read_text())
    capabilities = {c for item in plan["work_items"] for c in item["required_capabilities"]}
    registry = make_tools(delivery_log={})
    assert set(registry.names()) == capabilities
    protected = {s.name for s in registry if s.side_effect or s.requires_approval}
    assert protected == {"deliver_report"}
    spec = registry.get("deliver_report")
    assert spec is not None and spec.side_effect and spec.requires_approval and spec.lookup is not None


def test_twelve_repositories_eleven_accessible(client: Client) -> None:
    listing = client("list_repositories")
    assert listing["count"] == 12 and listing["evidence_id"] == facts.INVENTORY_EVIDENCE
    assert [r["name"] for r in listing["repositories"]] == verify_conftest().REPOS
    assert len(accessible(client)) == 11

    denied = client.invoke("check_repository_access", repo="billing-worker")
    assert denied.status is OutcomeStatus.SUCCESS  # reported, not raised
    assert denied.result["status"] == "NO_ACCESS" and "403" in denied.result["reason"]
    assert denied.result["evidence_id"] == "ev:access:billing-worker"


def test_code_tools_refuse_unknown_and_unreadable_repositories(client: Client) -> None:
    unknown = client.invoke("search_code", repo="no-such-repo", query=".charge(")
    assert (unknown.status, unknown.error_code) == (OutcomeStatus.FAILED, ToolErrorCode.INVALID_ARGUMENT)
    assert unknown.handler_calls == 1  # the remote side refused, not the schema
    denied = client.invoke("search_code", repo="billing-worker", query=".charge(")
    assert denied.error_code is ToolErrorCode.PERMISSION_DENIED
    assert denied.handler_calls == 1  # not retried: retrying cannot grant access
    section = client.invoke("get_file_section", repo="ledger", path="src/ledger/posting.py", start=0, end=3)
    assert section.error_code is ToolErrorCode.INVALID_ARGUMENT and section.handler_calls == 0


# --------------------------------------------------------------------------- documents


def test_the_guide_lists_eight_breaking_changes(client: Client) -> None:
    changes = guide_changes(client)
    assert [c["fields"]["change_id"] for c in changes] == [f"BC{i}" for i in range(1, 9)]
    for change in changes:
        assert {"old_api", "new_api", "behaviour", "search_pattern"} <= set(change["fields"])
        assert change["evidence_id"] == f"ev:doc:paysdk-v2-migration-guide#{change['section_id']}"


def test_the_stale_blog_conflicts_with_the_official_sources_on_capture_sync(client: Client) -> None:
    hits = client("search_docs", query="capture_sync")["hits"]
    assert {h["doc_id"] for h in hits} >= {"paysdk-v2-migration-guide", "paysdk-v2-release-notes"}
    by_source: dict[str, set[str]] = {}
    for hit in hits:
        for section in client("get_document", doc_id=hit["doc_id"])["sections"]:
            fields = section["fields"]
            if "capture_sync" in fields.get("old_api", "") + fields.get("api", ""):
                by_source.setdefault(hit["authority"], set()).add(fields["change_type"])
    assert by_source == {"official": {"removed"}, "informal": {"deprecated"}}


# --------------------------------------------------------------------------- code


def test_searching_the_accessible_repositories_finds_37_direct_call_sites(client: Client) -> None:
    sites = direct_matches(client)
    assert len(sites) == 37
    assert "billing-worker" not in {s["repository"] for s in sites.values()}
    assert set(Counter(s["change_id"] for s in sites.values())) == {f"BC{i}" for i in range(1, 9)}
    for eid, site in list(sites.items())[:5] + list(sites.items())[-5:]:
        line = site["line"]
        read = client("get_file_section", repo=site["repository"], path=site["path"], start=line, end=line)
        assert read["lines"][0]["evidence_id"] == eid and read["lines"][0]["text"].strip() == site["text"]


def test_wrapper_usages_are_indirect_and_not_counted_as_direct(client: Client) -> None:
    sites = direct_matches(client)
    indirect = []
    for repo in ("merchant-portal", "admin-console"):
        indirect += [m for m in client("search_code", repo=repo, query=".issue_refund(")["matches"] if not m["is_test"]]
    assert len(indirect) == 2
    assert not {m["evidence_id"] for m in indirect} & set(sites)
    assert {u.hit.evidence_id for u in facts.indirect_usages()} >= {m["evidence_id"] for m in indirect}


def test_risk_rules_give_three_high_and_five_medium_modules(client: Client) -> None:
    sites = direct_matches(client)
    per_module = Counter(s["module"] for s in sites.values())
    scores = {m: client("compute_risk_score", module=m) for m in per_module}
    levels = Counter(s["risk"] for s in scores.values())
    assert levels == {"high": 3, "medium": 5, "low": 2}
    scenario = verify_conftest()
    assert sorted(m for m, s in scores.items() if s["risk"] == "high") == sorted(scenario.HIGH)
    assert sorted(m for m, s in scores.items() if s["risk"] == "medium") == sorted(scenario.MEDIUM)
    for module, result in scores.items():
        assert result["rule"] and result["inputs"]["call_sites"] == per_module[module]
        assert set(result["evidence_ids"]) == {e for e, s in sites.items() if s["module"] == module}
    # A high-usage module without tests is high risk because of that gap (rule H2), not its volume.
    refund = scores["refund-service/refund"]
    assert (refund["rule"], refund["inputs"]["covering_tests"]) == ("H2-removed-api-untested", 0)
    assert client("compute_risk_score", module="checkout-api/orders")["risk"] == "none_found"
    assert client.invoke("compute_risk_score", module="nowhere/x").error_code is ToolErrorCode.INVALID_ARGUMENT


# --------------------------------------------------------------------------- reports


def resolve_through_tools(client: Client, evidence_id: str) -> bool:
    kind, _, rest = evidence_id.removeprefix("ev:").partition(":")
    if kind == "code":
        location, _, line = rest.rpartition(":")
        repo, _, path = location.partition("/")
        read = client("get_file_section", repo=repo, path=path, start=int(line), end=int(line))
        return bool(read["lines"][0]["evidence_id"] == evidence_id)
    if kind == "doc":
        doc_id, _, section = rest.partition("#")
        return bool(client("get_document", doc_id=doc_id, section=section)["sections"][0]["evidence_id"] == evidence_id)
    if kind == "access":
        return bool(client("check_repository_access", repo=rest)["evidence_id"] == evidence_id)
    return False


def test_every_evidence_id_of_report_v2_resolves_to_a_fixture_location(client: Client) -> None:
    refs = report_v2().evidence_refs()
    assert len(refs) > 40
    for evidence_id in refs:
        assert facts.resolve_evidence(evidence_id) is not None, evidence_id
        assert resolve_through_tools(client, evidence_id), evidence_id


def test_report_v2_states_what_the_tools_compute(client: Client) -> None:
    report = report_v2()
    sites = direct_matches(client)
    assert report.stated.call_sites == len(sites) == 37
    assert {c.evidence_ids[0] for c in report.call_sites} == set(sites)
    assert report.stated.breaking_changes == len(guide_changes(client)) == 8
    assert (report.stated.repositories_expected, report.stated.repositories_accessible) == (12, 11)
    for module in report.module_risks:
        assert client("compute_risk_score", module=module.module)["risk"] == module.risk.value
    assert set(verify_conftest().SECTIONS) <= set(REQUIRED_SECTIONS) == {s.section_id for s in report.sections}


def test_v2_passes_the_default_checks_and_v1_fails_the_count_check() -> None:
    suite = CheckSuite(context=check_context())
    assert failures(suite.run(artifact_v2())) == ()
    failed = {r.name: r for r in failures(suite.run(artifact_v1()))}
    assert set(failed) == {"count_consistency", "claims_have_evidence"}
    assert failed["count_consistency"].verdict is CheckVerdict.FAIL
    assert "call_sites: states 36, lists 37" in failed["count_consistency"].detail
    assert artifact_v2().parent == "migration-assessment:v1" and artifact_v2().sha256 != artifact_v1().sha256


def test_render_report_stores_a_valid_report_and_rejects_an_invalid_one(client: Client) -> None:
    report = report_v2()
    out = client.invoke("render_report", report_json=report.to_content())
    assert out.status is OutcomeStatus.SUCCESS and out.result["sections"] == 10
    [artifact] = out.artifacts
    assert (artifact.name, artifact.media_type, artifact.content) == (
        "migration-assessment",
        "application/json",
        report.to_content(),
    )
    broken = {**json.loads(report.to_content()), "title": "", "module_risks": [{"module": "x", "risk": "severe"}]}
    bad = client.invoke("render_report", report_json=json.dumps(broken))
    assert (bad.status, bad.error_code) == (OutcomeStatus.FAILED, ToolErrorCode.INVALID_ARGUMENT)
    assert bad.error is not None and "title" in bad.error and "module_risks.0.risk" in bad.error
    assert bad.artifacts == []


def test_deliver_report_needs_approval_and_delivers_once(client: Client) -> None:
    blocked = client.invoke("deliver_report", step=9, report_ref="migration-assessment:v2")
    assert (blocked.status, blocked.handler_calls, client.log) == (OutcomeStatus.BLOCKED, 0, {})

    first = client.invoke("deliver_report", step=9, approved=True, report_ref="migration-assessment:v2")
    assert first.status is OutcomeStatus.SUCCESS and first.result["delivered"] == "migration-assessment:v2"
    assert [a.name for a in first.artifacts] == ["delivery-receipt"]
    again = client.invoke("deliver_report", step=9, approved=True, report_ref="migration-assessment:v2")
    assert again.runtime_action is RuntimeAction.REPLAY_SUCCESS and again.handler_calls == 0
    assert len(client.log) == 1 and first.idempotency_key in client.log

    spec = client.gateway.registry.get("deliver_report")
    assert spec is not None and spec.lookup is not None
    assert spec.lookup(str(first.idempotency_key))[1] == first.result
    assert spec.lookup("idem_never_sent")[0].value == "NOT_EXECUTED"

    wrong = client.invoke("deliver_report", step=10, approved=True, report_ref="draft:v1")
    assert wrong.error_code is ToolErrorCode.INVALID_ARGUMENT and len(client.log) == 1
