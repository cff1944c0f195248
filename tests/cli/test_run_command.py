"""``stateward run NAME``: any registered agent from the command line, answered later by another process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from stateward.cli.run_cmd import parse_params
from stateward.core.errors import RunError
from stateward.runtime.runtime import Runtime

AGENTS_MODULE = '''
from stateward import Agent, AgentRegistry, ReActController, ToolRegistry, tool
from stateward.testing import ScriptedModel


@tool(requires_approval=True)
def pay(invoice: str, amount_cents: int) -> dict[str, str]:
    """Pay an invoice (a real effect)."""
    return {"paid": invoice}


agents = AgentRegistry()


@agents.agent("payer", version="1")
def make_payer(invoice: str = "INV-1", amount_cents: int = 100, model_spec: str | None = None) -> Agent:
    """Pays one invoice once a person approves that exact payment."""
    if amount_cents <= 0:
        raise ValueError("amount_cents must be positive")

    def decide(request):
        if any(o["action"] == "pay" and o["status"] == "SUCCESS" for o in request.observations):
            return {"type": "FINISH", "reason": "paid"}
        return {"type": "EXECUTE_TOOL", "action": "pay", "args": {"invoice": invoice, "amount_cents": amount_cents}}

    # A real agent would build its model with stateward.models.config.model_from_spec(model_spec).
    model = ScriptedModel(decide, name=model_spec or "scripted")
    return Agent(name="payer", controller=ReActController(model), tools=ToolRegistry([pay]))


@agents.agent("plain")
def make_plain(note: str = "") -> Agent:
    """Finishes at once; takes no model."""
    model = ScriptedModel(lambda request: {"type": "FINISH", "reason": note or "done"})
    return Agent(name="plain", controller=ReActController(model), tools=ToolRegistry([]))
'''


@pytest.fixture
def agents_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "ops"
    directory.mkdir()
    (directory / "payer_agents.py").write_text(textwrap.dedent(AGENTS_MODULE))
    return directory


def sw(*args: str, cwd: Path, agents_dir: Path | None = None, env: dict[str, str] | None = None) -> tuple[int, Any]:
    """(exit code, JSON stdout) of one real ``stateward`` process; the registry module only if ``agents_dir``."""
    environment = {k: v for k, v in os.environ.items() if k not in {"STATEWARD_DB", "STATEWARD_AGENTS"}}
    if agents_dir is not None:
        environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(agents_dir), os.environ.get("PYTHONPATH")]))
        environment["STATEWARD_AGENTS"] = "payer_agents:agents"
    environment.update(env or {})
    done = subprocess.run(
        [sys.executable, "-m", "stateward.cli.main", *args, "--json"],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=environment,
        timeout=120,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout)


def test_a_registered_agent_runs_by_name_and_another_process_approves_it(tmp_path: Path, agents_dir: Path) -> None:
    db = str(tmp_path / "runs.db")
    code, started = sw(
        "run", "payer", "--goal", "pay INV-9", "--param", "invoice=INV-9", "--param", "amount_cents=1200",
        "--tenant", "acme", "--db", db, cwd=tmp_path, agents_dir=agents_dir,
    )  # fmt: skip
    assert code == 0, started
    assert (started["status"], started["pending_request_id"], started["tenant"]) == (
        "WAITING_FOR_USER",
        "approval_001",
        "acme",
    )
    assert started["suspended"] is True and started["counters"]["tool_calls_after_wait"] == 0
    assert started["agent_ref"] == {
        "name": "payer",
        "version": "1",
        "params": {"invoice": "INV-9", "amount_cents": 1200},
    }
    assert started["pending"]["guarded_action"]["args"] == {"invoice": "INV-9", "amount_cents": 1200}
    run_id = started["run_id"]

    code, listed = sw("runs", "list", "--agent", "payer", "--tenant", "acme", "--db", db, cwd=tmp_path)
    assert code == 0 and [r["run_id"] for r in listed["runs"]] == [run_id] and listed["next_cursor"] is None
    code, inbox = sw("requests", "list", "--tenant", "acme", "--db", db, cwd=tmp_path)
    assert code == 0 and [(r["run_id"], r["request_id"]) for r in inbox] == [(run_id, "approval_001")]

    # Another process, which knows the agent only by the operator's registry, rebuilds it from the row.
    code, approved = sw(
        "approve", run_id, "approval_001", "--by", "alice", "--db", db, cwd=tmp_path, agents_dir=agents_dir
    )
    assert code == 0, approved
    assert approved["status"] == "COMPLETED" and approved["counters"]["approvals_consumed"] == 1
    code, inbox = sw("requests", "list", "--tenant", "acme", "--db", db, cwd=tmp_path)
    assert inbox == []


def test_params_are_stored_exactly_as_parsed_and_the_model_spec_joins_them(tmp_path: Path, agents_dir: Path) -> None:
    db = str(tmp_path / "runs.db")
    code, started = sw(
        "run", "payer", "--goal", "g", "--param", "invoice=\"7\"", "--param", "amount_cents=5",
        "--model", "openai:some-model", "--no-drive", "--db", db, cwd=tmp_path, agents_dir=agents_dir,
    )  # fmt: skip
    assert code == 0, started
    assert started["status"] == "RUNNING" and started["pending_request_id"] is None
    expected = {"invoice": "7", "amount_cents": 5, "model_spec": "openai:some-model"}
    assert started["agent_ref"]["params"] == expected
    runtime = Runtime.open(db, create=False)
    try:
        assert runtime.get(started["run_id"]).agent.params == expected  # what a worker rebuilds from
    finally:
        runtime.close()


@pytest.mark.parametrize(
    ("args", "code", "error"),
    [
        (["run", "nobody", "--goal", "g"], 1, "AGENT_NOT_REGISTERED"),
        (["run", "payer", "--goal", "g", "--param", "amount_cents=-1"], 1, "INVALID_AGENT_PARAMS"),
        (["run", "payer", "--goal", "g", "--param", "colour=red"], 1, "INVALID_AGENT_PARAMS"),
        (["run", "payer", "--goal", "g", "--param", "amount_cents"], 1, "INVALID_AGENT_PARAMS"),
        (["run", "payer", "--goal", "g", "--param", "amount_cents=1e999"], 1, "INVALID_AGENT_PARAMS"),
        (["run", "plain", "--goal", "g", "--model", "openai:x"], 1, "MODEL_NOT_SUPPORTED"),
        (["run", "payer", "--goal", "g", "--model", "gpt-4"], 3, "INVALID_MODEL_SPEC"),
        (["run", "payer", "--goal", "g", "--db", ""], 3, "CONFIGURATION_ERROR"),
    ],
)
def test_a_run_that_cannot_start_is_refused_by_name_and_writes_nothing(
    tmp_path: Path, agents_dir: Path, args: list[str], code: int, error: str
) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    got, out = sw(*args, cwd=cwd, agents_dir=agents_dir)
    assert (got, out["error"]["code"]) == (code, error), out
    assert list(cwd.iterdir()) == []  # no database was created on the way


def test_an_agent_only_another_registry_names_is_not_registered_here(tmp_path: Path, agents_dir: Path) -> None:
    code, out = sw("run", "payer", "--goal", "g", cwd=tmp_path)  # this process has no STATEWARD_AGENTS
    assert (code, out["error"]["code"]) == (1, "AGENT_NOT_REGISTERED")


def test_agents_list_shows_the_builtins_and_the_operators_registry(tmp_path: Path, agents_dir: Path) -> None:
    code, rows = sw("agents", "list", cwd=tmp_path, agents_dir=agents_dir)
    assert code == 0
    by_name = {r["name"]: r for r in rows}
    assert {"blog", "payment-migration", "payer", "plain"} <= set(by_name)
    assert "chaos-ledger" not in by_name  # a test agent: registered only on request (STATEWARD_TEST_AGENTS=1)
    assert by_name["payer"]["source"] == "payer_agents:agents" and by_name["payer"]["version"] == "1"
    assert by_name["payer"]["description"].startswith("Pays one invoice")
    assert by_name["blog"]["source"].startswith("entry point stateward-demos")


def test_the_blog_demo_and_a_builtin_by_name_accept_a_model(tmp_path: Path) -> None:
    """--model reaches the blog agent as its model_spec param (not driven: no model is called)."""
    db = str(tmp_path / "runs.db")
    local = {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}  # a local server needs no key; never contacted here
    code, demo = sw("demo", "blog", "--model", "openai:local", "--no-drive", "--db", db, cwd=tmp_path, env=local)
    assert code == 0, demo
    code, named = sw(
        "run", "blog", "--goal", "brief", "--param", "controller=workflow", "--model", "openai:local",
        "--no-drive", "--db", db, cwd=tmp_path, env=local,
    )  # fmt: skip
    assert code == 0, named
    assert named["agent_ref"]["version"].startswith("fp-")  # the blog agent names no version: its fingerprint
    assert named["agent_ref"] == {
        "name": "blog",
        "version": named["agent_ref"]["version"],
        "params": {"controller": "workflow", "model_spec": "openai:local"},
    }
    runtime = Runtime.open(db, create=False)
    try:
        assert runtime.get(demo["run_id"]).agent.params["model_spec"] == "openai:local"
    finally:
        runtime.close()
    code, out = sw("run", "payment-migration", "--goal", "g", "--model", "nonsense", "--db", db, cwd=tmp_path)
    assert (code, out["error"]["code"]) == (3, "INVALID_MODEL_SPEC")


# -- --param parsing ------------------------------------------------------------------------------------
def test_param_values_are_json_where_they_parse_and_text_otherwise() -> None:
    assert parse_params(
        ["n=5", "yes=true", "none=null", 's="x"', "t=x", "empty=", 'obj={"a": [1, 2.5]}', "eq=a=b", "neg=-3"]
    ) == {
        "n": 5,
        "yes": True,
        "none": None,
        "s": "x",
        "t": "x",
        "empty": "",
        "obj": {"a": [1, 2.5]},
        "eq": "a=b",
        "neg": -3,
    }


@pytest.mark.parametrize(
    "pairs",
    [["k=1", "k=2"], ["novalue"], ["=x"], ["k=NaN"], ["k=1e999"], ['k={"a": 1, "a": 2}']],
    ids=["twice", "no-equals", "no-key", "nan", "infinity", "duplicate-key"],
)
def test_malformed_params_are_refused_by_name(pairs: list[str]) -> None:
    with pytest.raises(RunError) as err:
        parse_params(pairs)
    assert err.value.code == "INVALID_AGENT_PARAMS"
