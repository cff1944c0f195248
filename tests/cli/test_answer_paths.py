"""The answer commands' short path (argparse, no Typer) and the Typer app must behave as one command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.blog_runs import suspended_blog_run
from typer.testing import CliRunner

from stateward.cli.answers import run_fast
from stateward.cli.app import app
from stateward.runtime.runtime import Runtime


def _typer(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout


def _fast(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[bool, int, str]:
    """(taken, exit code, stdout) of the short path."""
    code = 0
    try:
        taken = run_fast(list(args))
    except SystemExit as exc:
        taken, code = True, int(exc.code or 0)
    return taken, code, capsys.readouterr().out


def _comparable(summary: dict[str, Any]) -> dict[str, Any]:
    """A summary without what differs between two runs: ids and times."""
    drop = {"run_id", "created_at", "updated_at"}
    out = {k: v for k, v in summary.items() if k not in drop}
    out["answer"] = {k: v for k, v in summary["answer"].items() if k != "at"}
    out["artifacts"] = [{k: v for k, v in a.items() if k != "created_at"} for a in summary["artifacts"]]
    return out


@pytest.mark.parametrize(
    ("command", "extra"),
    [("approve", ["--comment", "ok"]), ("reject", ["--comment", "shorter intro"]), ("approve", ["--no-drive"])],
)
def test_both_paths_give_the_same_result(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, extra: list[str]
) -> None:
    fast_db, typer_db = tmp_path / "fast.db", tmp_path / "typer.db"
    fast_run, typer_run = suspended_blog_run(fast_db), suspended_blog_run(typer_db)

    taken, fast_code, fast_out = _fast(
        capsys, command, fast_run, "approval_001", "--db", str(fast_db), "--by", "alice", *extra, "--json"
    )
    typer_code, typer_out = _typer(
        command, typer_run, "approval_001", "--db", str(typer_db), "--by", "alice", *extra, "--json"
    )

    assert taken and fast_code == typer_code == 0
    assert _comparable(json.loads(fast_out)) == _comparable(json.loads(typer_out))


def test_refusals_are_identical(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "runs.db"
    run_id = suspended_blog_run(db)
    for request_id in ("approval_404", "../../etc"):
        taken, fast_code, fast_out = _fast(capsys, "approve", run_id, request_id, "--db", str(db), "--json")
        typer_code, typer_out = _typer("approve", run_id, request_id, "--db", str(db), "--json")
        assert taken and fast_code == typer_code == 1
        assert json.loads(fast_out) == json.loads(typer_out)
        assert json.loads(fast_out)["error"]["code"] == "UNKNOWN_REQUEST"


def test_a_second_identical_answer_says_so_on_both_paths(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "runs.db"
    run_id = suspended_blog_run(db)
    answer = ["approve", run_id, "approval_001", "--db", str(db), "--by", "alice"]
    _fast(capsys, *answer)
    taken, code, fast_out = _fast(capsys, *answer)
    typer_code, typer_out = _typer(*answer)
    assert taken and code == typer_code == 0
    for out in (fast_out, typer_out):
        assert "approval_001 was already approved by alice; nothing was done again" in out


def test_both_paths_hold_an_approval_to_the_digest_presented(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "runs.db"
    run_id = suspended_blog_run(db)
    wrong = ["approve", run_id, "approval_001", "--db", str(db), "--digest", "0" * 64, "--json"]
    taken, fast_code, fast_out = _fast(capsys, *wrong)
    typer_code, typer_out = _typer(*wrong)
    assert taken and fast_code == typer_code == 1
    assert json.loads(fast_out)["error"]["code"] == json.loads(typer_out)["error"]["code"] == "ACTION_DIGEST_MISMATCH"
    runtime = Runtime.open(str(db))
    pending = runtime.get(run_id).pending
    runtime.close()
    assert pending is not None and pending.guarded_action is not None  # still waiting, nothing recorded
    right = ["approve", run_id, "approval_001", "--db", str(db), "--digest", pending.guarded_action.digest, "--json"]
    taken, code, out = _fast(capsys, *right)
    assert taken and code == 0 and json.loads(out)["status"] == "COMPLETED"


@pytest.mark.parametrize(
    "argv",
    [
        ["approve", "run_x"],  # missing request id
        ["approve", "run_x", "approval_001", "--bogus"],
        ["approve", "run_x", "approval_001", "--db"],  # option without its value
        ["approve", "run_x", "approval_001", "--js"],  # no abbreviations: Typer decides
        ["approve", "--help"],
        ["reply", "run_x", "question_001"],  # reply needs --text
        ["reply", "run_x", "question_001", "--text", "x", "--digest", "abc"],  # reply has no --digest
        ["runs", "list"],
        [],
    ],
)
def test_anything_else_is_left_to_typer(argv: list[str], tmp_path: Path) -> None:
    cwd = Path.cwd()
    os.chdir(tmp_path)  # a fall-through must not have created a database on the way
    try:
        assert run_fast(argv) is False
    finally:
        os.chdir(cwd)
    assert not list(tmp_path.iterdir())


def test_usage_errors_still_come_from_typer(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "stateward.cli.main", "approve", "run_x", "--db", str(tmp_path / "x.db")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "Missing argument" in proc.stderr
    assert not (tmp_path / "x.db").exists()


def test_short_path_reads_the_db_from_the_environment_and_never_imports_typer(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    run_id = suspended_blog_run(db)
    probe = (
        "import sys; from stateward.cli.main import main\n"
        f"sys.argv = ['stateward', 'approve', {run_id!r}, 'approval_001', '--json']\n"
        "main()\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('typer', 'click', 'rich'))\n"
        "sys.stderr.write('LOADED=' + ','.join(loaded))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        env={**os.environ, "STATEWARD_DB": str(db)},
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["status"] == "COMPLETED"
    assert proc.stderr.strip().endswith("LOADED=")


def test_an_empty_db_variable_means_the_default_database_on_both_paths(tmp_path: Path) -> None:
    run_id = suspended_blog_run(tmp_path / "stateward.db")  # the default name, in the working directory
    env = {**os.environ, "STATEWARD_DB": ""}
    proc = subprocess.run(
        [sys.executable, "-m", "stateward.cli.main", "approve", run_id, "approval_001", "--json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["status"] == "COMPLETED"


def test_a_reader_that_went_away_ends_the_short_path_quietly(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    run_id = suspended_blog_run(db)
    read_end, write_end = os.pipe()
    os.close(read_end)  # nobody will read what the command prints
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "stateward.cli.main", "approve", run_id, "approval_001", "--db", str(db), "--json"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write_end)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    # The answer was recorded and the run resumed before the output was lost.
    again = subprocess.run(
        [sys.executable, "-m", "stateward.cli.main", "runs", "show", run_id, "--db", str(db), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert json.loads(again.stdout)["status"] == "COMPLETED"


@pytest.mark.parametrize(
    ("command", "option"), [("approve", "--comment"), ("reject", "--comment"), ("reply", "--text")]
)
def test_both_paths_refuse_an_oversized_answer_before_storing_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, option: str
) -> None:
    db = tmp_path / "runs.db"
    run_id = suspended_blog_run(db)
    args = [command, run_id, "approval_001", "--db", str(db), option, "x" * 9000, "--json"]
    taken, fast_code, fast_out = _fast(capsys, *args)
    typer_code, typer_out = _typer(*args)
    assert taken and fast_code == typer_code == 1
    assert json.loads(fast_out)["error"]["code"] == json.loads(typer_out)["error"]["code"] == "ANSWER_TOO_LARGE"
    runtime = Runtime.open(str(db))
    try:
        record = runtime.store.get_request(run_id, "approval_001")
        assert record is not None and record.answer is None
    finally:
        runtime.close()
