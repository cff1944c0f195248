"""Agents by name: a process builds only agents its operator registered; a stored row chooses no code."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from stateward import Agent, AgentRef, AgentRegistry, ReActController, RunError, Runtime, ToolRegistry, UserError
from stateward.runtime.agent_registry import builtin_agents, process_agents
from stateward.store.migrations import SQLITE_MIGRATIONS
from stateward.store.sqlite import SQLiteStore
from stateward.testing import ScriptedModel


def finishing_agent(name: str = "expenses", limit: int = 100) -> Agent:
    model = ScriptedModel(lambda req: {"type": "FINISH", "reason": f"limit {limit}"})
    return Agent(name=name, controller=ReActController(model), tools=ToolRegistry([]))


def test_a_registered_factory_gets_the_runs_json_params() -> None:
    registry = AgentRegistry()
    seen: list[int] = []

    @registry.agent("expenses", version="2")
    def make(limit: int = 100) -> Agent:
        seen.append(limit)
        return finishing_agent(limit=limit)

    agent = registry.build(AgentRef(name="expenses", version="2", params={"limit": 7}))
    assert seen == [7]
    assert agent.ref == AgentRef(name="expenses", version="2", params={"limit": 7})
    assert registry.ref("expenses", {"limit": 7}) == agent.ref


def test_a_factory_whose_one_parameter_is_params_gets_the_dict() -> None:
    registry = AgentRegistry()
    got: list[dict[str, Any]] = []

    def make(params: dict[str, Any]) -> Agent:
        got.append(params)
        return finishing_agent()

    registry.register("expenses", make)
    registry.build(AgentRef(name="expenses", params={"limit": 3}))
    assert got == [{"limit": 3}]


def test_an_unregistered_name_is_refused_and_nothing_is_imported(tmp_path: Path, monkeypatch: Any) -> None:
    marker = tmp_path / "imported"
    (tmp_path / "hostile_agents.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\ndef build(**kw): raise SystemExit\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("hostile_agents:build", "os:system"):
        with pytest.raises(RunError) as err:
            builtin_agents().build(AgentRef(name=name, params={"command": f"touch {tmp_path / 'pwned'}"}))
        assert err.value.code == "AGENT_NOT_REGISTERED"
    assert not marker.exists() and not (tmp_path / "pwned").exists()
    assert "hostile_agents" not in sys.modules


def test_a_legacy_import_path_becomes_a_name_nobody_registered() -> None:
    legacy = AgentRef.model_validate({"factory": "os:system", "params": {"command": "id"}})
    assert legacy.name == "os:system" and legacy.params == {"command": "id"}
    assert AgentRef.model_validate({"factory": "stateward.demos.blog:build_agent"}).name == "blog"
    with pytest.raises(RunError) as err:
        process_agents(env={}, use_entry_points=False).build(legacy)
    assert err.value.code == "AGENT_NOT_REGISTERED"


def test_a_factory_that_fails_is_agent_unavailable() -> None:
    registry = AgentRegistry()

    def broken(**params: Any) -> Agent:
        raise ConnectionError("vault unreachable")

    registry.register("broken", broken)
    registry.register("not-an-agent", lambda **params: "nope")
    for name, text in (("broken", "vault unreachable"), ("not-an-agent", "not an Agent")):
        with pytest.raises(RunError) as err:
            registry.build(AgentRef(name=name))
        assert err.value.code == "AGENT_UNAVAILABLE" and text in err.value.message


def test_a_name_registered_twice_is_a_conflict() -> None:
    registry = AgentRegistry()
    registry.register("a", lambda **p: finishing_agent())
    with pytest.raises(UserError) as err:
        registry.register("a", lambda **p: finishing_agent())
    assert err.value.code == "AGENT_NAME_CONFLICT"


def _write_registry_module(directory: Path, module: str) -> None:
    (directory / f"{module}.py").write_text(
        textwrap.dedent(
            """
            from stateward import Agent, AgentRegistry, ReActController, ToolRegistry
            from stateward.testing import ScriptedModel

            registry = AgentRegistry()

            @registry.agent("expenses")
            def make_expenses(limit: int = 100) -> Agent:
                model = ScriptedModel(lambda req: {"type": "FINISH", "reason": "ok"})
                return Agent(name="expenses", controller=ReActController(model), tools=ToolRegistry([]))
            """
        )
    )


def test_registries_load_from_the_environment_and_entry_points(tmp_path: Path, monkeypatch: Any) -> None:
    _write_registry_module(tmp_path, "ops_agents")
    dist = tmp_path / "ops_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ops-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[stateward.agents]\nbilling = ops_agents:make_expenses\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    from_env = process_agents(env={"STATEWARD_AGENTS": "ops_agents:registry"}, use_entry_points=False)
    assert "expenses" in from_env.names()
    assert "chaos-ledger" not in from_env.names(), "a test agent is registered only on request"
    assert "blog" not in from_env.names(), "the demos' agents come from their package's entry point"

    from_entry_points = process_agents(env={})
    assert {"billing", "blog", "payment-migration"} <= set(from_entry_points.names())
    entry = next(e for e in from_entry_points if e.name == "billing")
    assert "entry point" in entry.source
    assert isinstance(from_entry_points.build(AgentRef(name="billing")), Agent)

    with pytest.raises(UserError) as err:
        process_agents(env={"STATEWARD_AGENTS": "ops_agents:missing"}, use_entry_points=False)
    assert err.value.code == "INVALID_AGENTS_SOURCE"


def test_a_run_is_rebuilt_by_name_in_another_runtime(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    registry = AgentRegistry()
    registry.register("expenses", lambda limit=100: finishing_agent(limit=limit))
    first = Runtime.open(str(db), agents=registry)
    state = first.submit(registry.build(registry.ref("expenses", {"limit": 5})), "reimburse")
    first.close()
    assert state.agent == AgentRef(
        name="expenses", version=registry.accepted_versions("expenses")[0], params={"limit": 5}
    )
    assert state.agent.version is not None and state.agent.version.startswith("fp-")

    elsewhere = Runtime.open(str(db), agents=registry)
    done = elsewhere.drive(state.run_id)
    assert done.terminal_reason == "completed"
    elsewhere.close()

    stranger = Runtime.open(str(db), agents=AgentRegistry())
    with pytest.raises(RunError) as err:
        stranger.agent_for(stranger.get(state.run_id))
    assert err.value.code == "AGENT_NOT_REGISTERED"
    stranger.close()


def test_a_store_of_schema_one_migrates_to_agent_names(tmp_path: Path) -> None:
    """A file written before agents were named: rows keep their data and name agents, never paths."""
    db = tmp_path / "v1.db"
    raw = sqlite3.connect(db)
    raw.execute("PRAGMA journal_mode=WAL")
    for statement in SQLITE_MIGRATIONS[0]:
        raw.execute(statement)
    raw.execute("PRAGMA user_version=1")
    snapshot = {
        "run_id": "run_old",
        "agent": {"factory": "stateward.demos.blog:build_agent", "params": {"controller": "react"}},
        "goal": "old",
        "approvals": [{"tool": "write_draft", "args": {"brief": "brief:v1"}, "plan_version": None, "digest": "d" * 64}],
    }
    raw.execute(
        "INSERT INTO runs(run_id, agent, status, snapshot, last_seq, created_at, updated_at)"
        " VALUES ('run_old', 'stateward.demos.blog:build_agent', 'RUNNING', ?, 0, '2026-01-01T00:00:00+00:00', 0)",
        (json.dumps(snapshot),),
    )
    raw.execute(
        "INSERT INTO side_effects(idempotency_key, run_id, tool, status, body) VALUES ('k', 'run_old', 't', 'STARTED',"
        " ?)",
        (
            json.dumps(
                {
                    "idempotency_key": "k",
                    "run_id": "run_old",
                    "tool": "t",
                    "status": "STARTED",
                    "updated_at": "2026-01-01T00:00:00+00:00",
                }
            ),
        ),
    )
    raw.commit()
    raw.close()

    store = SQLiteStore(db)
    state = store.load_run("run_old")
    assert state.agent == AgentRef(name="blog", params={"controller": "react"})
    assert [g.action.args for g in state.approvals] == [{"brief": "brief:v1"}]
    assert [row.agent for row in store.list_runs()] == ["blog"]
    side = store.get_side_effect("k")
    assert side is not None and side.grant_id is None
    store.close()


# -- a new run's agent by name (what `stateward run NAME` does) ---------------------------------------------
def test_create_builds_a_new_runs_agent_whose_ref_carries_exactly_its_params() -> None:
    registry = AgentRegistry()

    @registry.agent("expenses", version="3")
    def make(limit: int = 100, model_spec: str | None = None) -> Agent:
        return finishing_agent(limit=limit)

    agent = registry.create("expenses", {"limit": 7}, model_spec="openai:m")
    assert agent.ref == AgentRef(name="expenses", version="3", params={"limit": 7, "model_spec": "openai:m"})
    assert registry.create("expenses").ref == AgentRef(name="expenses", version="3", params={})
    for params, code in (
        ({"limit": 1, "colour": "red"}, "INVALID_AGENT_PARAMS"),
        ({"limit": float("nan")}, "INVALID_AGENT_PARAMS"),
    ):
        with pytest.raises(RunError) as err:
            registry.create("expenses", params)
        assert err.value.code == code
    with pytest.raises(RunError) as err:
        registry.create("expenses", {"model_spec": "openai:a"}, model_spec="openai:b")
    assert err.value.code == "INVALID_AGENT_PARAMS"


def test_a_model_reaches_only_factories_that_take_one() -> None:
    registry = AgentRegistry()
    got: list[dict[str, Any]] = []
    registry.register("no-model", lambda limit=1: finishing_agent())
    registry.register("any", lambda **params: finishing_agent())
    registry.register("dict", lambda params: got.append(params) or finishing_agent())
    with pytest.raises(RunError) as err:
        registry.create("no-model", model_spec="openai:m")
    assert err.value.code == "MODEL_NOT_SUPPORTED"
    assert registry.create("any", model_spec="openai:m").agent_ref.params == {"model_spec": "openai:m"}
    registry.create("dict", {"a": 1}, model_spec="openai:m")
    assert got[0] == {"a": 1, "model_spec": "openai:m"}  # (then once with no params: its version's fingerprint)
    with pytest.raises(UserError) as bad:
        registry.create("any", model_spec="no-spec")
    assert bad.value.code == "INVALID_MODEL_SPEC"


def test_lazy_factories_show_their_own_signatures_without_being_imported_to_list() -> None:
    builtins = {entry.name: entry for entry in process_agents(env={"STATEWARD_TEST_AGENTS": "1"})}
    assert builtins["blog"].accepts("model_spec") and builtins["payment-migration"].accepts("model_spec")
    assert not builtins["chaos-ledger"].accepts("model_spec")
    assert builtins["blog"].refusal({"colour": "red"}) is not None
    assert builtins["blog"].refusal({"controller": "workflow"}) is None


def test_listing_the_demos_agents_imports_none_of_them() -> None:
    probe = (
        "import sys\n"
        "from stateward import AgentRegistry\n"
        "from stateward.runtime.agent_registry import process_agents\n"
        "names = process_agents(env={}).names()\n"
        "assert {'blog', 'payment-migration'} <= set(names), names\n"
        "loaded = [m for m in sys.modules if m.startswith('stateward_demos.')]\n"
        "print(sorted(set(loaded) - {'stateward_demos.registry'}))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_lazy_factory_names_a_bad_target_when_registered_and_a_missing_one_when_built() -> None:
    registry = AgentRegistry()
    for target in ("no_colon", ":attr", "module:"):
        with pytest.raises(UserError) as bad:
            registry.register_lazy("x", target)
        assert bad.value.code == "INVALID_AGENT"
    registry.register_lazy("gone", "stateward_no_such_module:build")
    with pytest.raises(UserError) as missing:
        registry.create("gone")
    assert missing.value.code == "INVALID_AGENTS_SOURCE"
