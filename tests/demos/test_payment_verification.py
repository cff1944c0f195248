"""The report's verification: the semantic (model) check and the evidence store the checks read."""

from __future__ import annotations

from typing import Any

from stateward import ModelRequest
from stateward.models import ScriptedModel
from stateward.verify import CheckVerdict, failures
from stateward_demos.payment.agent import verify_report
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
