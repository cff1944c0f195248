"""Agent versions: a run is driven only by the build it started under (or one declared compatible).

On both stores: a worker claims only runs its build may drive; a process of another build refuses to
answer a waiting run and changes nothing; the fingerprint of an unversioned agent follows its definition.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stateward import Agent, AgentRegistry, ReActController, RunError, RunStatus, Runtime, ToolRegistry, tool
from stateward.runtime.agent_version import fingerprint
from stateward.runtime.worker import Worker
from stateward.testing import ScriptedModel


@tool(side_effect=True, requires_approval=True)
def pay(invoice: str) -> dict[str, str]:
    """Pay an invoice (guarded)."""
    return {"paid": invoice}


@tool(side_effect=True, requires_approval=True)
def pay_v2(invoice: str, amount_cents: int) -> dict[str, str]:
    """Pay an invoice, with its amount (guarded)."""
    return {"paid": invoice}


def _payer(spec: Any = pay) -> Agent:
    def decide(req: Any) -> dict[str, Any]:
        if any(o.get("status") == "SUCCESS" for o in req.observations):
            return {"type": "FINISH", "reason": "paid"}
        return {"type": "EXECUTE_TOOL", "action": spec.name, "args": {"invoice": "INV-7"}, "reason": "due"}

    return Agent(name="payer", controller=ReActController(ScriptedModel(decide)), tools=ToolRegistry([spec]))


def _registry(version: str | None, compatible_with: tuple[str, ...] = ()) -> AgentRegistry:
    registry = AgentRegistry()
    registry.register("payer", _payer, version=version, compatible_with=compatible_with)
    return registry


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield str(tmp_path / "runs.db") if request.param == "sqlite" else request.getfixturevalue("pg_url")


def test_a_fingerprint_follows_the_definition_not_the_process() -> None:
    assert fingerprint(_payer()) == fingerprint(_payer())
    assert fingerprint(_payer()).startswith("fp-")
    assert fingerprint(_payer(pay_v2)) != fingerprint(_payer())
    bigger = _payer()
    bigger.budget = bigger.budget.model_copy(update={"max_steps": 999})
    assert fingerprint(bigger) != fingerprint(_payer())


def test_an_unversioned_agent_records_its_fingerprint() -> None:
    registry = _registry(None)
    agent = registry.create("payer")
    assert agent.agent_ref.version == fingerprint(_payer())
    assert registry.accepted_versions("payer") == (fingerprint(_payer()),)


def test_a_version_is_checked_at_registration() -> None:
    for bad in ["", "a b", "x" * 101, "fp-forged"]:
        with pytest.raises(Exception) as err:
            _registry(bad)
        assert getattr(err.value, "code", None) == "INVALID_AGENT_VERSION"


def test_a_run_waiting_under_v1_is_refused_by_a_v2_process_and_left_unchanged(location: str) -> None:
    first = Runtime.open(location, agents=_registry("1"))
    try:
        run = first.start(first.agents.create("payer"), "pay INV-7")
        assert run.status is RunStatus.WAITING_FOR_USER and run.agent.version == "1"
        request_id = run.pending.request_id if run.pending else ""
        events_before = len(first.events(run.run_id))
    finally:
        first.close()

    other = Runtime.open(location, agents=_registry("2"))
    try:
        with pytest.raises(RunError) as err:
            other.approve(run.run_id, request_id, by="alice")
        assert err.value.code == "AGENT_VERSION_UNAVAILABLE"
        assert err.value.details["run_version"] == "1"
        after = other.get(run.run_id)
        assert after.status is RunStatus.WAITING_FOR_USER
        assert after.pending is not None and after.pending.request_id == request_id
        assert len(other.events(run.run_id)) == events_before
    finally:
        other.close()

    compatible = Runtime.open(location, agents=_registry("2", compatible_with=("1",)))
    try:
        done = compatible.approve(run.run_id, request_id, by="alice")
        assert done.state.status is RunStatus.COMPLETED
        assert done.state.agent.version == "1"  # the run keeps the version it started under
    finally:
        compatible.close()


def test_workers_of_two_builds_each_claim_only_their_own_runs(location: str) -> None:
    def submit(version: str, count: int) -> list[str]:
        runtime = Runtime.open(location, agents=_registry(version))
        try:
            return [runtime.submit(runtime.agents.create("payer"), f"pay {i}").run_id for i in range(count)]
        finally:
            runtime.close()

    v1_runs, v2_runs = submit("1", 3), submit("2", 3)
    v2 = Runtime.open(location, agents=_registry("2"))
    try:
        worker = Worker(v2, poll_s=0.01)
        assert worker.builds == {"payer": ("2",)}
        worker.run(idle_exit_s=0.3)
        for run_id in v2_runs:
            assert v2.get(run_id).status is RunStatus.WAITING_FOR_USER
        for run_id in v1_runs:  # never claimed: not a setback, not an event, nothing
            untouched = v2.get(run_id)
            assert untouched.status is RunStatus.RUNNING and untouched.setback is None
            assert [e.type for e in v2.events(run_id)] == ["run_started"]
    finally:
        v2.close()

    v1 = Runtime.open(location, agents=_registry("1"))
    try:
        Worker(v1, poll_s=0.01).run(idle_exit_s=0.3)
        assert all(v1.get(run_id).status is RunStatus.WAITING_FOR_USER for run_id in v1_runs)
    finally:
        v1.close()
