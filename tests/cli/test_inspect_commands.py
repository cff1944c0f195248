"""The inspection and lifecycle commands report what the store holds, and name what it does not."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from stateward.cli.app import app
from stateward.core.status import RunStatus
from stateward.models.base import ModelRequest
from stateward.models.scripted import ScriptedModel
from stateward.runtime.runtime import Runtime
from stateward_demos import blog_fixtures as fx
from stateward_demos.blog import build_agent
from stateward_demos.blog_fixtures import GOAL


def _cli(*args: str) -> tuple[int, Any]:
    result = CliRunner().invoke(app, [*args, "--json"])
    return result.exit_code, json.loads(result.stdout)


def _two_waiting_runs(db: Path) -> tuple[str, str]:
    runtime = Runtime.open(str(db))
    try:
        first = runtime.start(build_agent("react"), GOAL).run_id
        second = runtime.start(build_agent("workflow"), GOAL).run_id
    finally:
        runtime.close()
    return first, second


def test_trace_of_an_unknown_run_is_run_not_found(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    _two_waiting_runs(db)
    code, out = _cli("trace", "run_nope", "--db", str(db))
    assert (code, out["error"]["code"]) == (1, "RUN_NOT_FOUND")


def test_the_inbox_lists_open_requests_only(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    first, second = _two_waiting_runs(db)
    code, inbox = _cli("requests", "list", "--db", str(db))
    assert code == 0 and sorted(r["run_id"] for r in inbox) == sorted([first, second])
    assert _cli("approve", first, "approval_001", "--db", str(db), "--no-drive")[0] == 0
    code, inbox = _cli("requests", "list", "--db", str(db))
    assert code == 0 and [(r["run_id"], r["request_id"]) for r in inbox] == [(second, "approval_001")]


def test_lifecycle_commands_report_the_control_flag(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    runtime = Runtime.open(str(db))
    run_id = runtime.submit(build_agent("react"), GOAL).run_id  # RUNNING, nobody driving it
    runtime.close()
    code, paused = _cli("pause", run_id, "--db", str(db))
    assert code == 0 and paused["status"] == "PAUSED" and "control" in paused
    code, cancelled = _cli("cancel", run_id, "--db", str(db))
    assert code == 0 and cancelled["status"] == "CANCELLED" and cancelled["control"] is None


# -- a person sees exactly what they approve, and nothing the model wrote can act on their terminal -------
EVIL = "Ship it? \x1b]52;c;ZXZpbA==\x07\x1b[2J\u202egnp.exe [red]x[/red] [link=https://evil.example]go[/link]"
SHOWN = "Ship it? \\x1b]52;c;ZXZpbA==\\x07\\x1b[2J\\u202egnp.exe [red]x[/red] [link=https://evil.example]go[/link]"


def _waiting_on_an_evil_question(db: Path) -> str:
    def policy(request: ModelRequest) -> Any:
        out = fx.react_policy(request)
        if isinstance(out, dict) and out.get("type") == "REQUEST_USER_INPUT":
            out = {**out, "question": EVIL}
        return out

    runtime = Runtime.open(str(db))
    try:
        state = runtime.start(build_agent("react", model=ScriptedModel(policy)), GOAL)
    finally:
        runtime.close()
    assert state.status is RunStatus.WAITING_FOR_USER and state.pending is not None
    assert state.pending.guarded_action is not None
    return state.run_id


def _text(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.parametrize("command", ["requests list", "runs show"])
def test_text_views_show_the_guarded_action_and_the_models_words_inert(tmp_path: Path, command: str) -> None:
    db = tmp_path / "a.db"
    run_id = _waiting_on_an_evil_question(db)
    _, [request] = _cli("requests", "list", "--db", str(db))
    args = command.split() + ([run_id] if command == "runs show" else []) + ["--db", str(db)]
    out = _text(*args)

    assert f"model says:     {SHOWN}" in out  # escaped, and markup printed literally
    for active in ("\x1b", "\x07", "\u202e"):
        assert active not in out
    guarded = request["guarded_action"]
    assert f"guarded action: {guarded['tool']}" in out
    assert f"digest:       {guarded['digest']}" in out and len(guarded["digest"]) == 64
    assert 'arguments:    {"brief": "brief:v1"}' in out
    assert "plan version: none" in out and "approver role:  any" in out and "expires:        never" in out


def test_the_inbox_json_carries_everything_an_approver_needs(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    run_id = _waiting_on_an_evil_question(db)
    code, [request] = _cli("requests", "list", "--db", str(db))
    assert code == 0
    assert {
        "run_id",
        "request_id",
        "kind",
        "question",
        "guarded_action",
        "approver_role",
        "expires_at",
        "tenant",
    } <= set(request)
    assert (request["run_id"], request["request_id"], request["kind"], request["tenant"]) == (
        run_id,
        "approval_001",
        "approval",
        "default",
    )
    assert request["question"] == EVIL  # data stays raw; JSON escapes it
    assert {"tool", "args", "digest", "plan_version"} <= set(request["guarded_action"])
    code, shown = _cli("runs", "show", run_id, "--db", str(db))
    assert shown["pending"]["guarded_action"] == request["guarded_action"]
    assert shown["pending"]["approver_role"] is None


def test_table_cells_are_inert_and_never_read_as_markup(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    reason = "[bold red]gave up[/bold red] \x1b[31m\u202e"
    runtime = Runtime.open(str(db))
    try:
        model = ScriptedModel(lambda r: {"type": "FAIL", "reason": reason})
        runtime.start(build_agent("react", model=model), GOAL)
    finally:
        runtime.close()
    out = _text("runs", "list", "--db", str(db))
    assert "[bold red]gave up[/bold red] \\x1b[31m\\u202e" in out  # piped: the table is not folded
    assert "\x1b" not in out and "\u202e" not in out


# -- listing runs a page at a time --------------------------------------------------------------------------
def test_runs_list_pages_with_a_cursor_and_filters(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    runtime = Runtime.open(str(db))
    try:
        made = [runtime.start(build_agent("react"), GOAL, tenant=t).run_id for t in ("acme", "globex", "acme")]
        runtime.approve(made[0], "approval_001", by="alice")
    finally:
        runtime.close()
    code, first = _cli("runs", "list", "--limit", "2", "--db", str(db))
    assert code == 0 and set(first) == {"runs", "next_cursor"} and len(first["runs"]) == 2
    assert {"run_id", "tenant", "agent", "status", "created_at", "updated_at"} <= set(first["runs"][0])
    code, rest = _cli("runs", "list", "--limit", "2", "--cursor", first["next_cursor"], "--db", str(db))
    assert [r["run_id"] for r in first["runs"] + rest["runs"]] == made[::-1] and rest["next_cursor"] is None
    code, acme = _cli("runs", "list", "--tenant", "acme", "--status", "WAITING_FOR_USER", "--db", str(db))
    assert [r["run_id"] for r in acme["runs"]] == [made[2]]
    code, blog = _cli("runs", "list", "--agent", "blog", "--status", "COMPLETED", "--db", str(db))
    assert [r["run_id"] for r in blog["runs"]] == [made[0]]
    assert "more: --cursor " in _text("runs", "list", "--limit", "1", "--db", str(db))


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["--cursor", "bogus"], "INVALID_CURSOR"),
        (["--status", "WAITING"], "INVALID_FILTER"),
    ],
)
def test_runs_list_refuses_a_bad_cursor_or_filter_by_name(tmp_path: Path, args: list[str], code: str) -> None:
    db = tmp_path / "a.db"
    _two_waiting_runs(db)
    before = db.read_bytes()
    exit_code, out = _cli("runs", "list", *args, "--db", str(db))
    assert (exit_code, out["error"]["code"]) == (3, code)
    assert db.read_bytes() == before
