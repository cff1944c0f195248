"""``stateward replay`` through a subprocess: another model judged against a recorded run, the store untouched."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

from stateward.core.events import EventType
from stateward.models.recording import RecordingModel
from stateward.models.scripted import ScriptedModel
from stateward.runtime.runtime import Runtime
from stateward_demos import blog_fixtures as fx
from stateward_demos.blog import build_agent
from stateward_demos.payment.agent import build_agent as payment_agent
from stateward_demos.payment.agent import goal as payment_goal

EXIT_DIVERGED = 6


def _cli(*args: str, stdin: str | None = None) -> tuple[int, Any]:
    env = {**os.environ, "STATEWARD_REPLAY_DIR": "/"}
    done = subprocess.run(
        [sys.executable, "-m", "stateward.cli.main", *args, "--json"],
        capture_output=True,
        text=True,
        input=stdin,
        env=env,
        timeout=300,
        check=False,
    )
    return done.returncode, json.loads(done.stdout)


def _rows_digest(db: Path) -> str:
    con = sqlite3.connect(db)
    try:
        digest = hashlib.sha256()
        for (table,) in con.execute("select name from sqlite_master where type='table' order by name"):
            for row in con.execute(f"select * from {table} order by 1"):  # table names from sqlite_master
                digest.update(repr((table, row)).encode())
        return digest.hexdigest()
    finally:
        con.close()


def _recorded_blog_run(db: Path, recording: Path) -> tuple[str, list[int]]:
    """A blog ReAct run whose model exchanges are recorded, approved to its end; its decision seqs."""
    runtime = Runtime.open(str(db))
    try:
        model = RecordingModel(ScriptedModel(fx.react_policy, name="scripted-react"), recording)
        state = runtime.start(build_agent("react", model=model), fx.GOAL)
        assert state.pending is not None
        runtime.approve(state.run_id, state.pending.request_id, by="editor")
        seqs = [e.seq for e in runtime.store.read_events(state.run_id) if e.type is EventType.SIGNAL_RECEIVED]
        return state.run_id, seqs
    finally:
        runtime.close()


def test_the_recorded_model_diverges_nowhere_and_the_store_is_untouched(tmp_path: Path) -> None:
    db, recording = tmp_path / "s.db", tmp_path / "model.jsonl"
    run_id, seqs = _recorded_blog_run(db, recording)
    before = _rows_digest(db)

    code, report = _cli("replay", run_id, "--model", f"replay:{recording}", "--db", str(db))

    assert code == 0, report
    assert report["first_divergence"] is None
    assert report["compared"] == report["matched"] == len(seqs)
    assert report["answers_applied"] == 1
    assert report["model_calls"] == len(seqs)
    assert _rows_digest(db) == before


def test_a_changed_model_is_named_at_its_first_divergence(tmp_path: Path) -> None:
    db, recording = tmp_path / "s.db", tmp_path / "model.jsonl"
    run_id, seqs = _recorded_blog_run(db, recording)
    lines = recording.read_text(encoding="utf-8").splitlines()
    exchange = json.loads(lines[1])  # the second decision: another model reads another material first
    exchange["reply"]["text"] = json.dumps({"type": "FINISH", "reason": "enough"})
    lines[1] = json.dumps(exchange)
    changed = tmp_path / "changed.jsonl"
    changed.write_text("\n".join(lines) + "\n", encoding="utf-8")
    before = _rows_digest(db)

    code, report = _cli("replay", run_id, "--model", f"replay:{changed}", "--db", str(db))

    assert code == EXIT_DIVERGED, report
    first = report["first_divergence"]
    assert (first["kind"], first["index"], first["seq"]) == ("DECISION", 1, seqs[1])
    assert first["replayed"]["type"] == "FINISH"
    assert first["recorded"]["type"] == "EXECUTE_TOOL"
    assert [o["action"] for o in first["context"]] == ["list_materials"]
    assert report["matched"] == 1
    assert _rows_digest(db) == before


def test_runs_from_a_listing_give_one_row_each(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    runtime = Runtime.open(str(db))
    try:
        state = runtime.start(payment_agent(), payment_goal().objective)
        blog = runtime.start(build_agent("workflow"), fx.GOAL)
    finally:
        runtime.close()
    code, listing = _cli("runs", "list", "--db", str(db))
    assert code == 0

    code, rows = _cli("replay", "--runs", "-", "--db", str(db), stdin=json.dumps(listing))

    assert code == 0, rows
    assert sorted(r["run_id"] for r in rows) == sorted([state.run_id, blog.run_id])
    assert all(r["divergence"] is None and r["error"] is None and r["compared"] > 0 for r in rows)
    assert all(r["compared"] == r["matched"] for r in rows)


def test_an_unknown_run_is_run_not_found(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    Runtime.open(str(db)).close()
    code, out = _cli("replay", "run_nope", "--db", str(db))
    assert (code, out["error"]["code"]) == (1, "RUN_NOT_FOUND")
    code, rows = _cli("replay", "--runs", "-", "--db", str(db), stdin="run_nope\n")
    assert code == 1 and rows[0]["error"]["code"] == "RUN_NOT_FOUND"
