"""The report's verification: the semantic (model) check and the evidence store the checks read."""

from __future__ import annotations

import json
from typing import Any

from stateward import EventType, ModelRequest
from stateward.models import ScriptedModel
from stateward.verify import CheckVerdict, failures
from stateward_demos.payment import tools as payment_tools
from stateward_demos.payment.agent import build_agent, goal, verify_report
from stateward_demos.payment.drafting import draft_report
from stateward_demos.payment.reports import report_v1, report_v2
from stateward_demos.payment.semantic import CHECK_NAME


def semantic(results: Any) -> Any:
    [result] = [r for r in results if r.name == CHECK_NAME]
    return result


def test_the_model_check_fails_the_overcertain_v1_for_its_wording_and_passes_v2() -> None:
    v1 = semantic(verify_report(report_v1().to_content()))
    assert v1.verdict is CheckVerdict.FAIL
    assert "over-certain" in v1.detail and "any other order" in v1.detail
    assert semantic(verify_report(report_v2().to_content())).verdict is CheckVerdict.PASS


def test_the_checker_sees_the_migration_order_and_an_unreadable_answer_is_unknown() -> None:
    seen: list[ModelRequest] = []

    def mumbling(req: ModelRequest) -> str:
        seen.append(req)
        return "looks fine to me"

    result = semantic(verify_report(report_v2().to_content(), checker=ScriptedModel(mumbling)))
    assert result.verdict is CheckVerdict.UNKNOWN  # never PASS on an answer that is not a verdict
    assert seen[0].facts["migration_order"].startswith("Migrate in this order:")


def test_cited_evidence_must_be_in_what_the_run_recorded() -> None:
    # v2 cites only real fixture evidence; checked against a run that recorded none of it, it fails.
    assert failures(verify_report(report_v2().to_content())) == ()
    names = {r.name for r in failures(verify_report(report_v2().to_content(), recorded=frozenset()))}
    assert names == {"evidence_exists"}


def test_the_run_writes_its_report_from_what_it_recorded(runtime: Any, monkeypatch: Any) -> None:
    monkeypatch.setattr(payment_tools, "DELIVERY_LOG", {})
    state = runtime.start(build_agent(), goal().objective)
    [v1, v2] = [e.payload for e in runtime.store.read_events(state.run_id) if e.type is EventType.VERIFICATION_RECORDED]
    assert {c["name"] for c in v1["checks"] if c["verdict"] == "FAIL"} == {
        "count_consistency",
        "claims_have_evidence",
        "migration_order_not_overcertain",
    }
    assert v2["outcome"] == "ACCEPT"
    # The drafter reads the recorded outputs: the same inputs minus one recorded call site give one fewer.
    sites = runtime.store.get_artifact(state.run_id, "direct-call-sites")
    inventory = runtime.store.get_artifact(state.run_id, "repository-inventory")
    assert sites is not None and inventory is not None
    recorded = json.loads(sites.content)
    fewer = {**recorded, "call_sites": recorded["call_sites"][1:]}
    inputs = {"direct-call-sites": json.dumps(fewer), "repository-inventory": inventory.content}
    report = draft_report(inputs, first_draft=False)
    assert len(report.call_sites) == report.stated.call_sites == 36
    assert report.stated.repositories_expected == 12 and report.stated.repositories_accessible == 11
