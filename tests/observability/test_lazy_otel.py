"""OpenTelemetry costs nothing at start-up when nothing is configured: ``stateward approve`` resuming a run
imports no ``opentelemetry`` module (``python -X importtime`` lists every import), and the same command
with an ``OTEL_*`` variable set imports it and traces the resumed segment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.blog_runs import suspended_blog_run


def _approve(db: Path, run_id: str, **otel: str) -> tuple[dict[str, Any], list[str], str]:
    """(the command's JSON summary, the modules ``-X importtime`` saw imported, what the command printed
    after its summary: the console exporter's spans)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(otel)
    command = ["approve", run_id, "approval_001", "--db", str(db), "--json"]
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "stateward.cli.main", *command],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    imported = [line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")]
    summary, end = json.JSONDecoder().raw_decode(proc.stdout)
    return summary, imported, proc.stdout[end:]


def test_approve_imports_no_opentelemetry_when_nothing_is_configured(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    summary, imported, _ = _approve(db, suspended_blog_run(db))
    assert summary["status"] == "COMPLETED"  # the run was resumed and driven in that process
    assert "stateward.runtime.driver" in imported and "stateward.observability.tracing" in imported
    assert [m for m in imported if m.startswith("opentelemetry")] == []


def test_approve_traces_when_an_otel_variable_is_set(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    summary, imported, printed = _approve(db, suspended_blog_run(db), OTEL_TRACES_EXPORTER="console")
    assert summary["status"] == "COMPLETED"
    assert "opentelemetry.trace" in imported and "stateward.observability.spans" in imported
    assert '"name": "invoke_agent blog"' in printed and '"name": "execute_tool write_draft"' in printed


def test_an_otel_variable_set_or_removed_later_is_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    from stateward.observability.otel_state import may_be_configured

    for key in [k for k in os.environ if k.startswith("OTEL_")]:
        monkeypatch.delenv(key)
    api = "stateward_tests.no_such_api"  # never imported: only the environment can answer
    assert may_be_configured(api) is False
    monkeypatch.setenv("OTEL_SERVICE_NAME", "later")
    assert may_be_configured(api) is True
    monkeypatch.delenv("OTEL_SERVICE_NAME")
    assert may_be_configured(api) is False
