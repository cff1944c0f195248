"""Bad input through the real ``stateward`` entry point: a named error, the documented exit code, and
the database (or the file mistaken for one) exactly as it was."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.blog_runs import suspended_blog_run

from stateward.cli.output import reported_errors
from stateward.core.errors import StoreError
from stateward.core.events import EventType, NewEvent
from stateward.core.state import AgentRef, RunState
from stateward.store.sqlite import SQLiteStore


def _cli(*args: str | bytes, cwd: Path) -> tuple[int, Any, str]:
    """(exit code, parsed JSON stdout or None, stderr) of one real process."""
    env = {k: v for k, v in os.environ.items() if k != "STATEWARD_DB"}
    done = subprocess.run(
        [sys.executable, "-m", "stateward.cli.main", *args], cwd=cwd, capture_output=True, env=env, timeout=120
    )
    out = done.stdout.decode()
    assert "Traceback" not in done.stderr.decode(), done.stderr.decode()
    return done.returncode, json.loads(out) if out.strip().startswith(("{", "[")) else None, done.stderr.decode()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _foreign_db(path: Path) -> Path:
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE notes (body TEXT)")
    db.execute("INSERT INTO notes VALUES ('keep me')")
    db.commit()
    db.close()
    return path


@pytest.mark.parametrize(
    "command",
    [["runs", "list"], ["runs", "show", "run_x"], ["trace", "run_x"], ["approve", "run_x", "approval_001"]],
)
def test_a_file_that_is_not_a_database_is_named_and_left_alone(tmp_path: Path, command: list[str]) -> None:
    text = tmp_path / "notes.db"
    text.write_text("not sqlite at all\n")
    before = _digest(text)
    code, out, _ = _cli(*command, "--db", str(text), "--json", cwd=tmp_path)
    assert code == 1
    assert out["error"]["code"] == "STORE_CORRUPT"
    assert _digest(text) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.db"]  # no -wal, no -shm


def test_a_truncated_database_is_named_corrupt(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    suspended_blog_run(db)
    cut = tmp_path / "cut.db"
    cut.write_bytes(db.read_bytes()[:4096])
    code, out, _ = _cli("runs", "list", "--db", str(cut), "--json", cwd=tmp_path)
    assert (code, out["error"]["code"]) == (1, "STORE_CORRUPT")


@pytest.mark.parametrize(
    "command",
    [
        ["runs", "list"],
        ["runs", "show", "run_x"],
        ["trace", "run_x"],
        ["requests", "list"],
        ["approve", "run_x", "approval_001"],
        ["reject", "run_x", "approval_001", "--comment", "no"],
        ["cancel", "run_x"],
    ],
)
def test_commands_that_only_read_or_answer_never_create_a_database(tmp_path: Path, command: list[str]) -> None:
    code, out, _ = _cli(*command, "--db", str(tmp_path / "typo.db"), "--json", cwd=tmp_path)
    assert (code, out["error"]["code"]) == (1, "STORE_NOT_FOUND")
    assert list(tmp_path.iterdir()) == []


def test_another_applications_database_is_refused_before_anything_changes(tmp_path: Path) -> None:
    foreign = _foreign_db(tmp_path / "app.db")
    before = _digest(foreign)
    for command in (["runs", "list"], ["demo", "blog"]):
        code, out, _ = _cli(*command, "--db", str(foreign), "--json", cwd=tmp_path)
        assert (code, out["error"]["code"]) == (1, "NOT_A_STATEWARD_STORE")
    assert _digest(foreign) == before
    db = sqlite3.connect(foreign)
    assert db.execute("PRAGMA journal_mode").fetchone() == ("delete",)  # not switched to WAL
    assert db.execute("SELECT name FROM sqlite_master").fetchall() == [("notes",)]
    db.close()


def test_a_newer_schema_is_refused_before_the_file_changes(tmp_path: Path) -> None:
    newer = tmp_path / "newer.db"
    db = sqlite3.connect(newer)
    db.execute("PRAGMA user_version=99")
    db.close()
    before = _digest(newer)
    code, out, _ = _cli("demo", "blog", "--db", str(newer), "--json", cwd=tmp_path)
    assert (code, out["error"]["code"]) == (1, "SCHEMA_TOO_NEW")
    assert _digest(newer) == before


def test_an_empty_db_path_is_a_configuration_error_not_a_throwaway_database(tmp_path: Path) -> None:
    code, out, _ = _cli("demo", "blog", "--db", "", "--json", cwd=tmp_path)
    assert (code, out["error"]["code"]) == (3, "CONFIGURATION_ERROR")


@pytest.mark.parametrize(
    "command",
    [
        ["demo", "blog", "--max-steps", "abc"],
        ["approve", "run_x"],
        ["runs", "list", "--limit", "99999999999999999999999"],
    ],
)
def test_usage_errors_are_json_when_json_was_asked_for(tmp_path: Path, command: list[str]) -> None:
    code, out, _ = _cli(*command, "--json", cwd=tmp_path)
    assert code == 2
    assert out["error"]["code"] == "USAGE_ERROR" and out["error"]["message"]


def test_usage_errors_without_json_stay_typers(tmp_path: Path) -> None:
    code, out, err = _cli("demo", "blog", "--max-steps", "abc", cwd=tmp_path)
    assert code == 2 and out is None
    assert "--max-steps" in err


def test_arguments_that_are_not_utf8_are_refused_and_change_nothing(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    run_id = suspended_blog_run(db)
    before = _digest(db)
    for command in (
        [b"runs", b"show", b"run_\xff", b"--db", os.fsencode(db), b"--json"],
        [b"approve", run_id.encode(), b"approval_001", b"--by", b"\xff\xfe", b"--db", os.fsencode(db), b"--json"],
    ):
        code, out, _ = _cli(*command, cwd=tmp_path)
        assert (code, out["error"]["code"]) == (2, "USAGE_ERROR")
    assert _digest(db) == before


def test_an_unknown_run_in_the_inbox_filter_is_an_error_like_everywhere_else(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    suspended_blog_run(db)
    code, out, _ = _cli("requests", "list", "--run", "nope", "--db", str(db), "--json", cwd=tmp_path)
    assert (code, out["error"]["code"]) == (1, "RUN_NOT_FOUND")


def test_a_database_damaged_after_opening_is_reported_by_name_and_left_as_it_was(tmp_path: Path) -> None:
    """The store names a SQLite failure met mid-use (here a page found malformed): STORE_CORRUPT, exit 1."""
    db = tmp_path / "damaged.db"
    store = SQLiteStore(db)
    run_ids = [f"run_{i:04d}" for i in range(200)]
    for run_id in run_ids:
        event = NewEvent(type=EventType.RUN_STARTED, payload={"note": "y" * 300})
        store.create_run(RunState(run_id=run_id, agent=AgentRef(name="x"), goal="g" * 500), [event])
    store.close()
    # Damage the root page of the runs table: every read of a run goes through it.
    raw = sqlite3.connect(db)
    page_size = raw.execute("PRAGMA page_size").fetchone()[0]
    root = raw.execute("SELECT rootpage FROM sqlite_master WHERE type='table' AND name='runs'").fetchone()[0]
    raw.close()
    with db.open("r+b") as f:
        f.seek((root - 1) * page_size)
        f.write(b"\xde\xad\xbe\xef" * (page_size // 4))
    before = _digest(db)

    reopened = SQLiteStore(db, create=False)
    with pytest.raises(StoreError) as err:
        for run_id in run_ids:
            reopened.load_run(run_id)
    reopened.close()
    assert err.value.code == "STORE_CORRUPT"
    # Named, never a traceback (checked by _cli), from a new process too.
    code, out, _ = _cli("runs", "show", run_ids[7], "--db", str(db), "--json", cwd=tmp_path)
    assert (code, out["error"]["code"]) == (1, "STORE_CORRUPT")
    assert _digest(db) == before


def test_other_exceptions_are_not_disguised_as_store_errors() -> None:
    with pytest.raises(ZeroDivisionError), reported_errors(True):
        raise ZeroDivisionError
