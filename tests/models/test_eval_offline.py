"""The live evaluation's plumbing, offline: real Runtime and store, models from a replay or a local stub."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from stateward.models.recording import RecordingModel
from stateward.runtime.runtime import Runtime
from stateward_demos import blog, blog_fixtures
from stateward_demos.eval_cmd import app
from stateward_demos.live_eval import run_live_eval


def _record_scripted_runs(tmp_path: Path) -> Path:
    recording = tmp_path / "scripted.jsonl"
    runtime = Runtime.open(str(tmp_path / "record.db"))
    try:
        for mode, scripted in blog.scripted_models().items():
            agent = blog.build_agent(mode, model=RecordingModel(scripted, recording))
            runtime.start(agent, blog_fixtures.GOAL)
    finally:
        runtime.close()
    return recording


def test_a_replayed_recording_reproduces_every_run(tmp_path: Path) -> None:
    recording = _record_scripted_runs(tmp_path)
    report = run_live_eval(f"replay:{recording}", 2, tmp_path / "eval.db")
    assert report["distribution"] == {mode: {"wait_suspended": 2} for mode in blog.MODES}
    assert all(r["suspended"] and r["rejection_code"] is None for r in report["rows"])
    assert report["integrity"]["continued_after_rejection"] == 0


def test_cli_prints_the_report_as_json(tmp_path: Path) -> None:
    recording = _record_scripted_runs(tmp_path)
    result = CliRunner().invoke(
        app, ["stop-signal", "--model", f"replay:{recording}", "--runs", "1", "--json", "--controllers", "workflow"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["distribution"] == {"workflow": {"wait_suspended": 1}}
    row = report["rows"][0]
    assert {"mode", "run_id", "status", "terminal_reason", "rejection_code", "suspended"} <= set(row)
    assert (row["model_calls"], row["suspended"]) == (1, True)


def _completion(message: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def _call(name: str, args: str, call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


def test_a_refused_tool_call_ends_the_run_with_nothing_after_it(
    stub: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Wire shapes follow OpenAI's documented parallel tool calls; served by the local stub."""
    monkeypatch.setenv("STATEWARD_OPENAI_BASE_URL", f"{stub.url}/v1")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("STATEWARD_MODEL_RECORD", raising=False)
    stub.queue(_completion({"role": "assistant", "tool_calls": [_call("list_materials", "{}", "c1")]}))
    two = [_call("read_material", '{"material_id": "a"}', "c2"), _call("read_material", '{"material_id": "b"}', "c3")]
    stub.queue(_completion({"role": "assistant", "tool_calls": two}))

    report = run_live_eval("openai:gpt-test", 1, tmp_path / "eval.db", modes=["react"])
    row = report["rows"][0]
    assert (row["outcome"], row["status"], row["rejection_code"]) == (
        "rejected_signal:MULTIPLE_TOOL_CALLS",
        "FAILED",
        "MULTIPLE_TOOL_CALLS",
    )
    assert (row["model_calls"], row["tool_attempts"], row["continued_after_rejection"]) == (2, 1, False)

    runtime = Runtime.open(str(tmp_path / "eval.db"))
    try:
        types = [e.type.value for e in runtime.store.read_events(row["run_id"])]
    finally:
        runtime.close()
    assert types[-4:] == ["signal_received", "runtime_validated", "state_transition", "run_exited"]
    assert types.count("tool_attempted") == 1
