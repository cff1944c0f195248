"""``plan validate``: verdicts map to exit codes 0/1/2, unreadable input to 3 with a named error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from stateward.cli.plan_cmd import app

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "plans"
CAPS = (
    "check_repository_access,compute_risk_score,deliver_report,get_document,get_file_section,"
    "list_repositories,render_report,search_code,search_docs,search_docs_cache"
)
runner = CliRunner()


def invoke(*args: str) -> Any:
    return runner.invoke(app, ["validate", *args])


def write(tmp_path: Path, doc: Any) -> str:
    path = tmp_path / "plan.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(path)


def test_accept_exits_zero_with_json() -> None:
    result = invoke(
        str(EXAMPLES / "payment_migration.json"),
        "--capabilities",
        CAPS,
        "--budget-tool-calls",
        "120",
        "--budget-model-calls",
        "40",
        "--budget-tokens",
        "250000",
        "--goal",
        str(EXAMPLES / "payment_migration.goal.json"),
        "--json",
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"verdict": "ACCEPT", "issues": []}


def test_accept_table_output() -> None:
    result = invoke(str(EXAMPLES / "payment_migration.json"))
    assert result.exit_code == 0
    assert "ACCEPT" in result.stdout


def test_reject_exits_two() -> None:
    result = invoke(str(EXAMPLES / "broken.json"), "--json")
    assert result.exit_code == 2
    out = json.loads(result.stdout)
    assert out["verdict"] == "REJECT"
    assert {i["code"] for i in out["issues"]} == {"CYCLE", "UNKNOWN_DEPENDENCY"}
    assert set(out["issues"][0]) == {"code", "work_item_id", "message"}
    cycle = next(i for i in out["issues"] if i["code"] == "CYCLE")
    assert cycle["message"] == "dependency cycle: W02 -> W04 -> W03 -> W02"


def test_reject_table_output_names_codes() -> None:
    result = invoke(str(EXAMPLES / "broken.json"))
    assert result.exit_code == 2
    assert "CYCLE" in result.stdout and "UNKNOWN_DEPENDENCY" in result.stdout


def test_revise_exits_one_on_budget() -> None:
    result = invoke(str(EXAMPLES / "payment_migration.json"), "--budget-tool-calls", "10", "--json")
    assert result.exit_code == 1
    out = json.loads(result.stdout)
    assert out["verdict"] == "REVISE"
    assert [i["code"] for i in out["issues"]] == ["BUDGET_INFEASIBLE"]


def test_unknown_capability_and_scope_flags_reject() -> None:
    result = invoke(str(EXAMPLES / "payment_migration.json"), "--capabilities", "search_code", "--json")
    assert result.exit_code == 2
    assert "UNKNOWN_CAPABILITY" in {i["code"] for i in json.loads(result.stdout)["issues"]}
    result = invoke(str(EXAMPLES / "payment_migration.json"), "--out-of-scope", "payment-platform", "--json")
    assert result.exit_code == 2
    assert {i["code"] for i in json.loads(result.stdout)["issues"]} == {"OUT_OF_SCOPE"}
    result = invoke(
        str(EXAMPLES / "payment_migration.json"),
        "--scope",
        "payment-services,engineering,payment-platform",
        "--json",
    )
    assert result.exit_code == 0


@pytest.mark.parametrize(
    ("content", "code"),
    [
        (None, "PLAN_FILE_NOT_FOUND"),
        ("{not json", "NOT_JSON"),
        ({"plan_id": "p"}, "INVALID_PLAN_DOCUMENT"),
        ([1, 2, 3], "INVALID_PLAN_DOCUMENT"),
    ],
)
def test_unreadable_input_exits_three_with_named_error(tmp_path: Path, content: Any, code: str) -> None:
    path = str(tmp_path / "missing.json") if content is None else write(tmp_path, content)
    result = invoke(path, "--json")
    assert result.exit_code == 3
    assert result.exception is None or isinstance(result.exception, SystemExit)
    err = json.loads(result.stdout)["error"]
    assert err["code"] == code and err["message"]

    plain = invoke(path)
    assert plain.exit_code == 3
    assert plain.stdout == ""
    assert plain.stderr.count("\n") == 1 and code in plain.stderr


def test_bad_goal_file_exits_three(tmp_path: Path) -> None:
    goal = tmp_path / "goal.json"
    goal.write_text('{"goal_id": "g"}')
    result = invoke(str(EXAMPLES / "payment_migration.json"), "--goal", str(goal), "--json")
    assert result.exit_code == 3
    assert json.loads(result.stdout)["error"]["code"] == "INVALID_GOAL_DOCUMENT"


def test_goal_with_other_id_rejects() -> None:
    result = invoke(str(EXAMPLES / "broken.json"), "--goal", str(EXAMPLES / "payment_migration.goal.json"), "--json")
    assert result.exit_code == 2
