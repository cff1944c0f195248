"""Migrating a stopped run to another version of its agent: only through a migration that version registers.

On both stores: a v1 run waiting for an approval is moved to v2 by a v2 process (recorded with who, from,
to; the migration's facts kept); an approval whose action v2 no longer has, or has changed, is closed as
stale and never re-bound; no migration registered, a running or ended run, a migration that touches the
budget: each refused by name with the run unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stateward import Agent, AgentRegistry, ReActController, RunError, RunState, RunStatus, Runtime, ToolRegistry, tool
from stateward.testing import ScriptedModel

PAID: list[str] = []


@tool(side_effect=True, requires_approval=True)
def pay(invoice: str) -> dict[str, str]:
    """Pay an invoice (guarded)."""
    PAID.append(invoice)
    return {"paid": invoice}


@tool(name="pay", side_effect=True, requires_approval=True)
def pay_with_amount(invoice: str, amount_cents: int) -> dict[str, str]:
    """Pay an invoice, with its amount now required (guarded)."""
    PAID.append(invoice)
    return {"paid": invoice}


@tool(side_effect=True, requires_approval=True)
def settle(invoice: str) -> dict[str, str]:
    """The v3 name of paying (guarded)."""
    PAID.append(invoice)
    return {"paid": invoice}


def _payer(spec: Any = pay) -> Agent:
    def decide(req: Any) -> dict[str, Any]:
        if any(o.get("status") == "SUCCESS" for o in req.observations):
            return {"type": "FINISH", "reason": "paid"}
        if req.observations:  # refused or closed: ask a person what to do
            return {"type": "REQUEST_USER_INPUT", "question": "the payment did not go through: what now?"}
        return {"type": "EXECUTE_TOOL", "action": spec.name, "args": {"invoice": "INV-7"}, "reason": "due"}

    return Agent(name="payer", controller=ReActController(ScriptedModel(decide)), tools=ToolRegistry([spec]))


def _note_facts(state: RunState) -> RunState:
    return state.model_copy(update={"facts": {**state.facts, "migrated_by": "v2 migration"}})


def _registry(version: str, spec: Any = pay, migrations: dict[str, Any] | None = None) -> AgentRegistry:
    registry = AgentRegistry()
    registry.register("payer", lambda: _payer(spec), version=version, migrations=migrations)
    return registry


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield str(tmp_path / "runs.db") if request.param == "sqlite" else request.getfixturevalue("pg_url")


def _waiting_v1(location: str) -> tuple[str, str, int]:
    first = Runtime.open(location, agents=_registry("1"))
    try:
        run = first.start(first.agents.create("payer"), "pay INV-7")
        assert run.status is RunStatus.WAITING_FOR_USER and run.pending is not None
        return run.run_id, run.pending.request_id, len(first.events(run.run_id))
    finally:
        first.close()


def test_a_waiting_run_moves_to_v2_through_its_migration_and_goes_on(location: str) -> None:
    run_id, request_id, _ = _waiting_v1(location)
    v2 = Runtime.open(location, agents=_registry("2", migrations={"1": _note_facts}))
    try:
        moved = v2.migrate(run_id, "2", by="ops-alice")
        assert moved.agent.version == "2" and moved.facts["migrated_by"] == "v2 migration"
        assert moved.status is RunStatus.WAITING_FOR_USER and moved.pending is not None
        assert moved.pending.request_id == request_id  # the same action under v2: the request stands
        event = [e for e in v2.events(run_id) if e.type == "agent_migrated"][-1]
        assert event.payload["by"] == "ops-alice"
        assert (event.payload["from_version"], event.payload["to_version"]) == ("1", "2")
        assert event.payload["stale"] == []
        row = next(r for r in v2.list_runs().items if r.run_id == run_id)
        assert row.agent_version == "2"  # the claim filter reads the column: v2 workers now drive it
        done = v2.approve(run_id, request_id, by="alice")
        assert done.state.status is RunStatus.COMPLETED and done.state.agent.version == "2"
    finally:
        v2.close()


def test_no_migration_registered_is_refused_and_the_run_is_unchanged(location: str) -> None:
    run_id, _, events_before = _waiting_v1(location)
    v2 = Runtime.open(location, agents=_registry("2", migrations={"0": _note_facts}))
    try:
        before = v2.get(run_id)
        with pytest.raises(RunError) as err:
            v2.migrate(run_id, "2", by="ops")
        assert err.value.code == "AGENT_MIGRATION_NOT_REGISTERED"
        with pytest.raises(RunError) as other:
            v2.migrate(run_id, "3", by="ops")  # not the version this process builds
        assert other.value.code == "AGENT_VERSION_UNAVAILABLE"
        assert v2.get(run_id) == before and len(v2.events(run_id)) == events_before
    finally:
        v2.close()


def test_a_migration_may_not_touch_usage_or_budget(location: str) -> None:
    run_id, _, events_before = _waiting_v1(location)

    def reset_usage(state: RunState) -> RunState:
        return state.model_copy(update={"usage": state.usage.model_copy(update={"model_calls": 0})})

    v2 = Runtime.open(location, agents=_registry("2", migrations={"1": reset_usage}))
    try:
        before = v2.get(run_id)
        with pytest.raises(RunError) as err:
            v2.migrate(run_id, "2", by="ops")
        assert err.value.code == "INVALID_MIGRATION" and "usage" in err.value.message
        assert v2.get(run_id) == before and len(v2.events(run_id)) == events_before
    finally:
        v2.close()


@pytest.mark.parametrize(
    ("spec", "why"),
    [(settle, "no longer exists"), (pay_with_amount, "refuses the approved arguments")],
)
def test_an_approval_whose_action_changed_is_closed_stale_never_rebound(location: str, spec: Any, why: str) -> None:
    run_id, request_id, _ = _waiting_v1(location)
    PAID.clear()
    v2 = Runtime.open(location, agents=_registry("2", spec, migrations={"1": _note_facts}))
    try:
        moved = v2.migrate(run_id, "2", by="ops", drive=True)
        record = v2.store.get_request(run_id, request_id)
        assert record is not None and record.answer is not None
        assert record.answer.verdict == "closed" and (record.answer.text or "").startswith("stale:")
        assert why in (record.answer.text or "")
        event = [e for e in v2.events(run_id) if e.type == "agent_migrated"][-1]
        assert [s["request_id"] for s in event.payload["stale"]] == [request_id]
        # The run decided again under v2 and waits on a new request; nothing was paid on the old approval.
        assert moved.status is RunStatus.WAITING_FOR_USER and moved.pending is not None
        assert moved.pending.request_id != request_id
        assert not moved.approvals and PAID == []
        with pytest.raises(RunError) as err:
            v2.approve(run_id, request_id, by="alice")
        assert err.value.code in ("REQUEST_CLOSED", "STALE_REQUEST", "UNKNOWN_REQUEST", "REQUEST_ALREADY_ANSWERED")
        assert PAID == []
    finally:
        v2.close()


def test_a_running_or_ended_run_is_not_migrated(location: str) -> None:
    v1 = Runtime.open(location, agents=_registry("1"))
    try:
        running = v1.submit(v1.agents.create("payer"), "pay later")
        with pytest.raises(RunError) as err:
            v1.migrate(running.run_id, "1", by="ops")
        assert err.value.code == "RUN_NOT_MIGRATABLE"
        v1.cancel(running.run_id)
        with pytest.raises(RunError) as ended:
            v1.migrate(running.run_id, "1", by="ops")
        assert ended.value.code == "RUN_NOT_MIGRATABLE"
    finally:
        v1.close()


def test_stats_count_runs_by_agent_version(location: str) -> None:
    from datetime import UTC, datetime

    from stateward.observability.stats import compute_stats

    run_id, _, _ = _waiting_v1(location)
    v2 = Runtime.open(location, agents=_registry("2", migrations={"1": _note_facts}))
    try:
        v2.submit(v2.agents.create("payer"), "a v2 run")
        mine = {r.run_id for r in v2.list_runs(limit=1000).items if r.agent == "payer"}
        report = compute_stats(v2.store, now=datetime.now(UTC))
        counted = report.runs_by_agent_version["payer"]
        assert counted.get("1", 0) >= 1 and counted.get("2", 0) >= 1
        before = dict(counted)
        v2.migrate(run_id, "2", by="ops")
        after = compute_stats(v2.store, now=datetime.now(UTC)).runs_by_agent_version["payer"]
        assert after.get("1", 0) == before["1"] - 1 and after["2"] == before["2"] + 1
        assert run_id in mine
    finally:
        v2.close()


def test_a_paused_run_is_migrated_and_resumes_under_the_new_version(location: str) -> None:
    v1 = Runtime.open(location, agents=_registry("1"))
    try:
        run = v1.submit(v1.agents.create("payer"), "pay when resumed")
        paused = v1.pause(run.run_id, by="ops")
        assert paused.status is RunStatus.PAUSED, paused.status
    finally:
        v1.close()
    v2 = Runtime.open(location, agents=_registry("2", migrations={"1": _note_facts}))
    try:
        moved = v2.migrate(run.run_id, "2", by="ops")
        assert moved.status is RunStatus.PAUSED and moved.agent.version == "2"
        resumed = v2.resume(run.run_id, by="ops")
        assert resumed.agent.version == "2" and resumed.status is RunStatus.WAITING_FOR_USER
    finally:
        v2.close()


def test_a_fork_under_another_version_goes_through_its_migration(location: str) -> None:
    run_id, request_id, _ = _waiting_v1(location)
    at_wait = 0
    without = Runtime.open(location, agents=_registry("2"))
    try:
        at_wait = without.store.last_seq(run_id)
        with pytest.raises(RunError) as err:
            without.fork(run_id, at=at_wait, agent_version="2")
        assert err.value.code == "AGENT_MIGRATION_NOT_REGISTERED"
        with pytest.raises(RunError) as same:
            without.fork(run_id, at=at_wait)  # the source's version is not one this process builds
        assert same.value.code == "AGENT_VERSION_UNAVAILABLE"
        assert without.lineage(run_id)["forks"] == []
    finally:
        without.close()
    PAID.clear()
    v2 = Runtime.open(location, agents=_registry("2", settle, migrations={"1": _note_facts}))
    try:
        fork = v2.fork(run_id, at=at_wait, agent_version="2", by="ops", drive=True)
        assert fork.agent.version == "2" and fork.facts["migrated_by"] == "v2 migration"
        events = v2.events(fork.run_id, after=at_wait)
        assert [e.type for e in events][:2] == ["run_forked", "pending_recorded"]
        migrated = next(e for e in events if e.type == "agent_migrated")
        reopened = events[1].payload["pending_request_id"]
        assert [s["request_id"] for s in migrated.payload["stale"]] == [reopened]  # pay is gone in this v2
        assert fork.status is RunStatus.WAITING_FOR_USER and fork.pending is not None
        assert fork.pending.guarded_action is not None and fork.pending.guarded_action.tool == "settle"
        assert v2.get(run_id).agent.version == "1"  # the source is untouched
        assert v2.store.get_request(run_id, request_id).answer is None  # type: ignore[union-attr]
    finally:
        v2.close()
