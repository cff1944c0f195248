"""``stateward eval payment-migration``: outcomes and gate counts, offline with the scripted models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stateward_demos.eval_cmd import app as eval_app
from stateward_demos.payment import tools as payment_tools


@pytest.fixture(autouse=True)
def delivery_log(monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, str]]:
    log: dict[str, dict[str, str]] = {}
    monkeypatch.setattr(payment_tools, "DELIVERY_LOG", log)
    return log


def test_the_eval_prints_the_distribution_and_zero_gate_breaches(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        eval_app, ["payment-migration", "--model", "scripted", "--runs", "2", "--db", str(tmp_path / "e.db"), "--json"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["distribution"] == {"COMPLETED/REPORT_WITH_GAPS": 2}
    assert set(report["gates"].values()) == {0} and len(report["gates"]) == 6
    assert [r["plan_version"] for r in report["rows"]] == [2, 2]
