"""``budget_breaches`` over trees of runs: a normal tree holds (with opportunities for every run, child and
return), and a tree whose bounds are broken on purpose (usage written straight to the store, as a build that
did not carve or did not roll up would leave it) fails the gate, on both stores and through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.runtime import child_family as family
from typer.testing import CliRunner

from stateward import RunState, RunStatus, Runtime
from stateward.cli.app import app
from stateward.core.budget import Budget
from stateward.observability.gates import Gate, audit
from stateward.store.records import StepWrite

GATE = "budget_breaches"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "tree.db")
    return str(request.getfixturevalue("pg_url"))


def _tree(url: str, **params: object) -> tuple[Runtime, RunState, list[RunState]]:
    rt = Runtime.open(url, agents=family.registry(), lease=family.LEASE)
    root = rt.start(rt.agents.create("triage", params), goal="refund every order", run_id="root")
    assert root.status is RunStatus.COMPLETED
    kids = rt.children("root")
    assert len(kids) == 2
    return rt, root, kids


def _gate(rt: Runtime) -> Gate:
    ids = [r.run_id for r in rt.list_runs(limit=100).items]
    return next(g for g in audit(rt.store, ids).gates if g.name == GATE)


def _write(rt: Runtime, state: RunState) -> None:
    """Commit ``state`` straight to the store under a fresh lease: nothing of the Runtime checks it."""
    _, seq = rt.store.load_run_at(state.run_id)
    lease = rt.store.acquire_lease(state.run_id, "forger", 30.0)
    rt.store.commit_step(state.run_id, seq, StepWrite(state=state, events=[]), lease)
    rt.store.release_lease(lease)


def _used(state: RunState, **counts: int) -> RunState:
    return state.model_copy(update={"usage": state.usage.model_copy(update=counts)})


def test_a_normal_tree_holds_with_a_chance_for_each_run_child_and_return(url: str) -> None:
    # Children that run out of their carve (endless) are bounded, not breaches.
    rt, _, kids = _tree(url, endless=True, child_steps=3)
    assert all(k.usage.steps == 3 == k.budget.max_steps for k in kids)
    found = _gate(rt)
    assert found.holds and found.value == 0
    assert found.opportunities == 3 + 2 + 2  # three runs, two of them children, two returns
    rt.close()


def test_a_child_past_its_carve_is_a_breach_whatever_budget_its_record_claims(url: str) -> None:
    rt, _, (kid, _) = _tree(url, child_steps=5)
    carve = kid.budget
    assert carve.max_steps == 5 and kid.usage.steps < 5
    # A build that conjured budget: the child claims 50 steps, spent 9; its parent's wait carved 5.
    conjured = _used(kid, steps=9).model_copy(update={"budget": Budget(max_steps=50)})
    _write(rt, conjured)
    found = _gate(rt)
    # One for the carve; the parent's roll-up is short of the 9 steps as well.
    assert not found.holds and found.value == 2
    # The unbounded-loops gate sees nothing: the child stayed within the budget it claims.
    ids = [r.run_id for r in rt.list_runs(limit=100).items]
    assert next(g for g in audit(rt.store, ids).gates if g.name == "unbounded_loops").holds
    rt.close()


def test_a_parent_whose_rolled_up_usage_is_past_its_limits_is_a_breach(url: str) -> None:
    rt, root, _ = _tree(url, max_steps=20)
    assert root.budget.max_tool_calls == 20 and root.usage.tool_attempts < 20
    _write(rt, _used(root, tool_attempts=21))
    found = _gate(rt)
    assert not found.holds and found.value == 1
    rt.close()


def test_a_childs_spend_its_parent_never_counted_is_a_breach(url: str) -> None:
    rt, _, (kid, _) = _tree(url, child_steps=5)
    # Within its carve, but more than the parent's returned usage says it spent.
    _write(rt, _used(kid, tool_attempts=kid.usage.tool_attempts + 1))
    found = _gate(rt)
    assert not found.holds and found.value == 1
    rt.close()


def test_the_cli_fails_on_a_child_past_its_carve_and_passes_a_normal_tree(tmp_path: Path) -> None:
    db = str(tmp_path / "tree.db")
    rt, _, (kid, _) = _tree(db)
    rt.close()
    ok = CliRunner().invoke(app, ["gates", "--db", db, "--json"])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.output)["passed"] is True
    rt = Runtime.open(db, agents=family.registry())
    _write(rt, _used(kid, steps=(kid.budget.max_steps or 0) + 1))
    rt.close()
    bad = CliRunner().invoke(app, ["gates", "--db", db, "--json"])
    assert bad.exit_code == 1
    data = json.loads(bad.output)
    assert GATE in data["breaches"]
    assert next(g for g in data["gates"] if g["name"] == GATE)["value"] == 3  # past its budget, its carve, the roll-up


def test_a_parallel_calls_second_child_past_its_share_or_not_rolled_up_is_a_breach(tmp_path: Path) -> None:
    from tests.runtime import parallel_family as parallel

    rt = Runtime.open(str(tmp_path / "fan.db"), agents=parallel.registry(), lease=family.LEASE)
    root = rt.start(rt.agents.create("fan-out"), goal="refund every order", run_id="root")
    assert root.status is RunStatus.COMPLETED
    found = _gate(rt)
    assert found.holds and found.opportunities == 3 + 2 + 1  # three runs, two children, one return for both
    second = next(k for k in rt.children("root") if k.goal == "refund B-2")
    assert second.budget.max_steps == 5
    # The second child, not the one the return names first: past its share (5 steps), and past the roll-up.
    _write(rt, _used(second, steps=6))
    found = _gate(rt)
    assert not found.holds and found.value == 3  # past its own budget, its carve, and the parent's roll-up
    rt.close()
