"""Forking a run from any of its fork points, on both stores.

The refund and blog demo runs are forked at every point a state can be rebuilt at; each fork is driven to its
end (its requests approved): no journalled side effect runs again (the refund's payment system counts one
refund), usage is never below the source's at the fork point, the source's history is read through (not
copied) and stays unchanged. Grants are not carried (a guarded call asks again); the open request is
re-opened under a new id; another tenant's run is the same RUN_NOT_FOUND as an unknown one.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stateward import Budget, RunError, RunNotFoundError, RunStatus, Runtime
from stateward_demos import refund_agent
from stateward_demos.blog_fixtures import GOAL as BLOG_GOAL
from stateward_demos.registry import AGENTS

USAGE_FIELDS = ("steps", "model_calls", "tool_attempts", "input_tokens", "output_tokens", "approvals_consumed")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield str(tmp_path / "runs.db") if request.param == "sqlite" else request.getfixturevalue("pg_url")


@pytest.fixture
def runtime(location: str) -> Iterator[Runtime]:
    rt = Runtime.open(location, agents=AGENTS)
    try:
        yield rt
    finally:
        rt.close()


def _finish(runtime: Runtime, run_id: str, limit: int = 10) -> Any:
    """Approve whatever the run asks until it ends."""
    state = runtime.get(run_id)
    for _ in range(limit):
        if state.status is RunStatus.RUNNING:
            state = runtime.drive(run_id)
        if state.status is not RunStatus.WAITING_FOR_USER or state.pending is None:
            break
        state = runtime.approve(run_id, state.pending.request_id, by="alice").state
    return state


def _points(runtime: Runtime, run_id: str) -> list[int]:
    """Every event the run can be forked at (a state is rebuilt there), except where it had ended."""
    checkpoints = runtime.store.checkpoints_of(run_id)
    return sorted({1, *(c.seq for c in checkpoints if not c.state.status.is_terminal)})


def _usage(state: Any) -> dict[str, int]:
    return {name: getattr(state.usage, name) for name in USAGE_FIELDS}


def _logged_usage(events: list[Any], at: int) -> dict[str, int]:
    """Usage at event ``at`` counted from the log itself: a step per decision, a model call per model signal."""
    upto = [e for e in events if e.seq <= at]
    signals = [e for e in upto if e.type == "signal_received"]
    return {
        "steps": len(signals),
        "model_calls": sum(1 for e in signals if e.payload.get("signal_source") == "model"),
        "tool_attempts": sum(1 for e in upto if e.type == "tool_attempted"),
    }


def _fork_every_seq(runtime: Runtime, source_id: str, after: Any = None) -> list[int]:
    """Fork the run at every event: each fork carries the usage the log shows at its seq and completes; every
    refused seq is FORK_POINT_UNAVAILABLE naming an earlier seq that forks. Returns the seqs forked."""
    events = runtime.events(source_id, limit=10_000)
    forked: list[int] = []
    for at in range(1, len(events) + 2):
        try:
            fork = runtime.fork(source_id, at=at, by="ops")
        except RunError as err:
            assert err.code == "FORK_POINT_UNAVAILABLE", (at, err.code)
            instead = err.details.get("instead")
            assert instead is None or (instead < at and instead in forked), (at, instead, forked)
            continue
        forked.append(at)
        counted = _logged_usage(events, at)
        assert {k: getattr(fork.usage, k) for k in counted} == counted, at  # carried, never reset
        assert fork.approvals == () and fork.next_call is None  # grants are not carried into a fork
        shared = runtime.events(fork.run_id, limit=at)
        assert [(e.seq, e.type, e.payload) for e in shared] == [(e.seq, e.type, e.payload) for e in events[:at]]
        done = _finish(runtime, fork.run_id)
        assert done.status is RunStatus.COMPLETED, (at, done.status, done.terminal_reason)
        assert all(_usage(done)[k] >= v for k, v in counted.items())
        if after is not None:
            after(fork.run_id)
    assert runtime.events(source_id, limit=10_000) == events  # the source is untouched
    assert len(runtime.lineage(source_id)["forks"]) == len(forked)
    return forked


def test_a_refund_fork_at_every_seq_replays_the_refund_never_pays_twice(runtime: Runtime, tmp_path: Path) -> None:
    book_path = str(tmp_path / "book.db")
    book = refund_agent.RefundBook(book_path)
    source = runtime.start(AGENTS.create("refund", {"book": book_path}), "refund order A-1001")
    source = _finish(runtime, source.run_id)
    assert source.status is RunStatus.COMPLETED and book.refunds_of(source.run_id) == 1

    def one_refund(fork_id: str) -> None:
        # Exactly one refund was ever performed, by the source: the fork's was answered from the journal.
        assert sum(book.performed(k) for k in _refund_keys(runtime, fork_id)) == 1
        assert book.duplicates() == {} and book.refunds_of(fork_id) == 0

    forked = _fork_every_seq(runtime, source.run_id, one_refund)
    checkpoints = {c.seq for c in runtime.store.checkpoints_of(source.run_id) if not c.state.status.is_terminal}
    assert checkpoints < set(forked) and len(forked) > len(checkpoints) + 2  # steps between checkpoints fork too
    assert book.refunds_of(source.run_id) == 1


def _refund_keys(runtime: Runtime, run_id: str) -> set[str]:
    return {
        str(e.payload.get("idempotency_key"))
        for e in runtime.events(run_id, limit=10_000)
        if e.type == "tool_attempted" and e.payload.get("observation", {}).get("action") == "refund_order"
    }


def test_a_fork_at_the_wait_reopens_the_request_and_carries_usage(runtime: Runtime, tmp_path: Path) -> None:
    book_path = str(tmp_path / "book.db")
    waiting = runtime.start(AGENTS.create("refund", {"book": book_path}), "refund order A-1001")
    assert waiting.status is RunStatus.WAITING_FOR_USER and waiting.pending is not None
    at = runtime.store.last_seq(waiting.run_id)
    fork = runtime.fork(waiting.run_id, at=at, by="ops")
    assert fork.status is RunStatus.WAITING_FOR_USER and fork.pending is not None
    assert fork.pending.request_id != waiting.pending.request_id  # re-opened under a new id
    assert fork.pending.guarded_action == waiting.pending.guarded_action
    assert _usage(fork) == _usage(waiting)  # carried, never reset
    # The source's request answered after the fork point does not reach the fork.
    runtime.approve(waiting.run_id, waiting.pending.request_id, by="alice")
    assert runtime.get(fork.run_id).status is RunStatus.WAITING_FOR_USER
    with pytest.raises(RunError):
        runtime.approve(fork.run_id, waiting.pending.request_id, by="alice")
    assert runtime.get(fork.run_id).pending == fork.pending
    # A fork's budget is never lower than its source's; a larger one is an explicit, recorded grant.
    with pytest.raises(Exception) as lowered:
        runtime.fork(waiting.run_id, at=at, budget=Budget(max_steps=1))
    assert getattr(lowered.value, "code", None) == "INVALID_ARGUMENT"
    grown = runtime.fork(waiting.run_id, at=at, budget=Budget(max_steps=50))
    forked = next(e for e in runtime.events(grown.run_id, limit=10_000) if e.type == "run_forked")
    assert forked.payload["budget_granted"]["max_steps"] == 50 and grown.budget.max_steps == 50


def test_a_blog_fork_at_every_seq_completes_without_resetting_usage(runtime: Runtime) -> None:
    source = runtime.start(AGENTS.create("blog"), BLOG_GOAL)
    source = _finish(runtime, source.run_id)
    assert source.status is RunStatus.COMPLETED
    drafts_before = [a for a in runtime.artifacts(source.run_id) if a.name == "draft"]
    forked = _fork_every_seq(runtime, source.run_id)
    checkpoints = {c.seq for c in runtime.store.checkpoints_of(source.run_id) if not c.state.status.is_terminal}
    assert checkpoints < set(forked) and len(forked) > len(checkpoints) + 2
    assert [a for a in runtime.artifacts(source.run_id) if a.name == "draft"] == drafts_before


def test_an_event_inside_a_step_names_the_seq_to_fork_at(runtime: Runtime, tmp_path: Path) -> None:
    source = runtime.start(AGENTS.create("refund", {"book": str(tmp_path / "b.db")}), "refund")
    events = runtime.events(source.run_id, limit=100)
    intent = next(e.seq for e in events if e.type == "runtime_validated")  # between a call's decision and outcome
    with pytest.raises(RunError) as err:
        runtime.fork(source.run_id, at=intent)
    assert err.value.code == "FORK_POINT_UNAVAILABLE" and err.value.details["instead"] == 1
    assert f"fork at event {err.value.details['instead']} instead" in err.value.message
    assert runtime.lineage(source.run_id)["forks"] == []


def test_a_point_without_a_state_is_refused_by_name(runtime: Runtime, tmp_path: Path) -> None:
    source = runtime.start(AGENTS.create("refund", {"book": str(tmp_path / "b.db")}), "refund")
    last = runtime.store.last_seq(source.run_id)
    for at in (2, last + 5):
        with pytest.raises(RunError) as err:
            runtime.fork(source.run_id, at=at)
        assert err.value.code == "FORK_POINT_UNAVAILABLE"
    done = _finish(runtime, source.run_id)
    with pytest.raises(RunError) as ended:
        runtime.fork(source.run_id, at=runtime.store.last_seq(done.run_id))
    assert ended.value.code == "FORK_POINT_UNAVAILABLE"


def test_another_tenants_run_cannot_be_forked(runtime: Runtime, tmp_path: Path) -> None:
    theirs = runtime.start(AGENTS.create("refund", {"book": str(tmp_path / "b.db")}), "refund", tenant="acme")
    with pytest.raises(RunNotFoundError) as err:
        runtime.fork(theirs.run_id, at=1, tenant="globex")
    with pytest.raises(RunNotFoundError) as unknown:
        runtime.fork("run_0000000000000000", at=1, tenant="globex")
    assert (err.value.code, err.value.message.replace(theirs.run_id, "X")) == (
        unknown.value.code,
        unknown.value.message.replace("run_0000000000000000", "X"),
    )
    assert runtime.lineage(theirs.run_id)["forks"] == []
    mine = runtime.fork(theirs.run_id, at=1, tenant="acme")
    assert mine.tenant == "acme"


PUBLISHED: list[str] = []


def _standing_grant_registry() -> Any:
    from stateward import Agent, AgentRegistry, ApprovalScope, ReActController, ToolRegistry, tool
    from stateward.testing import ScriptedModel

    @tool(side_effect=True, requires_approval=True, approval_scope=ApprovalScope.RUN)
    def publish(page: str) -> dict[str, str]:
        """Publish a page (one approval admits it for the rest of the run)."""
        PUBLISHED.append(page)
        return {"published": page}

    def decide(req: Any) -> dict[str, Any]:
        done = [o for o in req.observations if o.get("action") == "publish" and o.get("status") == "SUCCESS"]
        if len(done) >= 2:
            return {"type": "FINISH", "reason": "published twice"}
        answered = (req.facts.get("last_answer") or {}).get("verdict") == "replied"
        if len(done) == 1 and not answered:
            return {"type": "REQUEST_USER_INPUT", "question": "publish again?"}
        return {"type": "EXECUTE_TOOL", "action": "publish", "args": {"page": "home"}}

    registry = AgentRegistry()
    registry.register(
        "publisher",
        lambda: Agent(
            name="publisher", controller=ReActController(ScriptedModel(decide)), tools=ToolRegistry([publish])
        ),
        version="1",
    )
    return registry


def test_a_standing_grant_is_not_carried_into_a_fork(location: str) -> None:
    registry = _standing_grant_registry()
    runtime = Runtime.open(location, agents=registry)
    try:
        first = runtime.start(registry.create("publisher"), "publish")
        assert first.pending is not None and first.pending.guarded_action is not None
        asked = runtime.approve(first.run_id, first.pending.request_id, by="alice").state
        assert asked.status is RunStatus.WAITING_FOR_USER and asked.pending is not None
        assert asked.pending.guarded_action is None and len(asked.approvals) == 1  # the standing grant, unspent
        at = runtime.store.last_seq(first.run_id)
        PUBLISHED.clear()
        fork = runtime.fork(first.run_id, at=at)
        again = runtime.reply(fork.run_id, fork.pending.request_id if fork.pending else "", by="bob", text="yes")
        # The fork's guarded call asks again: a grant given to the source is not the fork's.
        assert again.state.status is RunStatus.WAITING_FOR_USER and again.state.pending is not None
        assert again.state.pending.guarded_action is not None and again.state.pending.guarded_action.tool == "publish"
        assert PUBLISHED == []
        # The source, holding its grant, publishes again without asking.
        source = runtime.reply(first.run_id, asked.pending.request_id, by="bob", text="yes").state
        assert source.status is RunStatus.COMPLETED and PUBLISHED == ["home"]
    finally:
        runtime.close()


def test_a_reopened_request_notifies_the_tenants_webhooks(runtime: Runtime, tmp_path: Path) -> None:
    import time

    from stateward.store.outbox import NoticeKind, WebhookSubscription

    waiting = runtime.start(AGENTS.create("refund", {"book": str(tmp_path / "b.db")}), "refund", tenant="acme")
    runtime.store.add_webhook(  # type: ignore[attr-defined]
        WebhookSubscription(
            subscription_id="wh_0000000000000001",
            tenant="acme",
            url="https://hooks.example/x",
            secret="s" * 32,
            kinds=(NoticeKind.WAITING,),
            created_at=time.time(),
        )
    )
    fork = runtime.fork(waiting.run_id, at=runtime.store.last_seq(waiting.run_id))
    assert fork.pending is not None
    sent = [d for d in runtime.store.list_deliveries("acme") if d.run_id == fork.run_id]  # type: ignore[attr-defined]
    assert [(d.kind, json.loads(d.body)["request_id"]) for d in sent] == [(NoticeKind.WAITING, fork.pending.request_id)]
