"""Parallel children: one call of a ``parallel`` agent tool starts a child run per goal, each carved an
equal share, run concurrently; the parent waits for all of them and resumes once, with every outcome."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.runtime import child_family as family
from tests.runtime import parallel_family as parallel

from stateward import RunState, RunStatus, Runtime
from stateward.core.events import EventType
from stateward.core.state import RequestKind
from stateward.runtime.worker import Worker

ROOT = Path(__file__).parents[2]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "parallel.db")
    return str(request.getfixturevalue("pg_url"))


def _runtime(url: str) -> Runtime:
    return Runtime.open(url, agents=parallel.registry(), lease=family.LEASE)


def _kids(rt: Runtime, parent: str) -> list[RunState]:
    runs = [rt.get(r.run_id) for r in rt.list_runs(limit=1000).items]
    return sorted((r for r in runs if r.parent is not None and r.parent.run_id == parent), key=lambda r: r.goal)


def _returned(rt: Runtime, run_id: str) -> list[dict]:
    return [e.payload for e in rt.events(run_id, content=True) if e.type is EventType.CHILD_RUN_RETURNED]


def test_one_call_starts_a_child_per_goal_and_the_parent_resumes_once_with_all(url: str) -> None:
    rt = _runtime(url)
    root = rt.start(rt.agents.create("fan-out"), goal="refund every order", tenant="acme", run_id="root")
    assert root.status is RunStatus.COMPLETED
    kids = _kids(rt, "root")
    assert [k.goal for k in kids] == ["refund A-1", "refund B-2"]
    assert all(k.status is RunStatus.COMPLETED and k.tenant == "acme" for k in kids)
    assert [k.budget.max_steps for k in kids] == [5, 5]  # the tool's 10 steps, shared equally
    (back,) = _returned(rt, "root")  # one resume, after both
    assert back["observation"]["status"] == "SUCCESS"
    answers = [c["answer"] for c in back["observation"]["result"]["children"]]
    assert answers == ["refunded A-1", "refunded B-2"]
    assert sorted(back["child_run_ids"]) == sorted(k.run_id for k in kids)
    assert root.usage.steps == 2 + sum(k.usage.steps for k in kids)  # both children's spend is the parent's
    (wait,) = rt.list_requests(run_id="root", open_only=False).items
    assert wait.request.kind is RequestKind.CHILD_RUN and len(wait.request.siblings) == 1
    assert {c.run_id for c in rt.children("root")} == {k.run_id for k in kids}
    rt.close()


def test_workers_run_the_children_concurrently_and_the_parent_waits_for_both(url: str) -> None:
    rt = _runtime(url)
    rt.submit(rt.agents.create("fan-out", {"guarded": True}), goal="refund every order", run_id="root")
    Worker(rt, concurrency=2, poll_s=0.02, expire_every_s=0.05).run(idle_exit_s=1.0)
    kids = _kids(rt, "root")
    # Both children started from the one call and both wait for their approvals at once.
    assert [k.status for k in kids] == [RunStatus.WAITING_FOR_USER] * 2
    assert rt.get("root").status is RunStatus.WAITING_FOR_USER
    first, second = kids
    assert first.pending is not None and second.pending is not None
    rt.approve(first.run_id, first.pending.request_id, by="ana", roles=frozenset({"refunds"}), drive=False)
    Worker(rt, concurrency=2, poll_s=0.02, expire_every_s=0.05).run(idle_exit_s=1.0)
    assert rt.get(first.run_id).status is RunStatus.COMPLETED
    assert rt.get("root").status is RunStatus.WAITING_FOR_USER  # still waiting for the second
    rt.approve(second.run_id, second.pending.request_id, by="ana", roles=frozenset({"refunds"}), drive=False)
    Worker(rt, concurrency=2, poll_s=0.02, expire_every_s=0.05).run(idle_exit_s=1.0)
    root = rt.get("root")
    assert root.status is RunStatus.COMPLETED
    assert root.terminal_reason == "completed"
    assert len(_returned(rt, "root")) == 1
    rt.close()


def test_a_failed_child_fails_the_call_once_both_ended(tmp_path: Path) -> None:
    rt = _runtime(str(tmp_path / "fail.db"))
    root = rt.start(rt.agents.create("fan-out", {"endless": True}), goal="refund every order", run_id="root")
    assert root.status is RunStatus.COMPLETED  # the parent's controller decides; here it finishes saying so
    (back,) = _returned(rt, "root")
    assert back["observation"]["status"] == "FAILED"
    assert back["observation"]["error_code"] == "CHILD_RUN_FAILED"
    assert [k.status for k in _kids(rt, "root")] == [RunStatus.FAILED] * 2
    rt.close()


def test_cancelling_the_parent_cancels_every_child(tmp_path: Path) -> None:
    rt = _runtime(str(tmp_path / "cancel.db"))
    rt.start(rt.agents.create("fan-out", {"guarded": True}), goal="refund every order", run_id="root")
    assert [k.status for k in _kids(rt, "root")] == [RunStatus.WAITING_FOR_USER] * 2
    rt.cancel("root", by="ops")
    assert rt.get("root").status is RunStatus.CANCELLED
    assert [k.status for k in _kids(rt, "root")] == [RunStatus.CANCELLED] * 2
    rt.close()


def test_a_call_giving_more_goals_than_declared_is_refused_and_starts_nothing(tmp_path: Path) -> None:
    from stateward.tools import agent_tool

    spec = agent_tool("refund-agent", parallel=2)
    with pytest.raises(Exception, match="1 to 2 goals"):
        spec.handler(goals=["a", "b", "c"])


KILLS = [
    ("after_commit", 1),
    ("child_before_start", 1),
    ("child_before_return", 1),
    ("child_before_return", 2),
]


def _recover(url: str) -> Runtime:
    rt = _runtime(url)
    deadline = time.monotonic() + 30
    while rt.get("root").status is not RunStatus.COMPLETED and time.monotonic() < deadline:
        time.sleep(family.LEASE.ttl_s)
        Worker(rt, poll_s=0.02, expire_every_s=0.05).run(idle_exit_s=0.5)
    return rt


@pytest.mark.parametrize(("kill_at", "nth"), KILLS)
def test_a_crash_around_a_parallel_call_starts_each_child_once(tmp_path: Path, kill_at: str, nth: int) -> None:
    url = str(tmp_path / "kill.db")
    code = f"from tests.runtime import parallel_family as p; p.main({url!r}, {kill_at!r}, {nth})"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, timeout=60)
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]
    rt = _recover(url)
    root = rt.get("root")
    assert root.status is RunStatus.COMPLETED, root
    kids = _kids(rt, "root")
    assert [k.goal for k in kids] == ["refund A-1", "refund B-2"]  # one child per goal
    for kid in kids:
        assert len([e for e in rt.events(kid.run_id) if e.type is EventType.RUN_STARTED]) == 1
    assert len(_returned(rt, "root")) == 1  # delivered once
    assert root.usage.steps == 2 + sum(k.usage.steps for k in kids)
    rt.close()


def test_the_shares_of_a_carve_never_add_up_to_more_than_it() -> None:
    from hypothesis import given
    from hypothesis import strategies as st

    from stateward import Budget
    from stateward.core.budget import BOUNDED, split

    bound = st.none() | st.integers(0, 100)

    @given(whole=st.builds(Budget, max_steps=bound, max_model_calls=bound, max_tool_calls=bound), n=st.integers(1, 16))
    def check(whole: Budget, n: int) -> None:
        share = split(whole, n)
        for name, _ in BOUNDED:
            total, part = getattr(whole, name), getattr(share, name)
            assert (part is None) == (total is None)
            if total is not None:
                assert part * n <= total

    check()


def test_no_parallel_call_spends_more_than_the_parents_limits(tmp_path: Path) -> None:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    @settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(max_steps=st.integers(2, 14), child_steps=st.integers(0, 12), endless=st.booleans(), n=st.integers(0, 10**9))
    def check(max_steps: int, child_steps: int, endless: bool, n: int) -> None:
        rt = _runtime(str(tmp_path / f"p{n}-{max_steps}-{child_steps}-{endless}.db"))
        params = {"max_steps": max_steps, "child_steps": child_steps, "endless": endless}
        root = rt.start(rt.agents.create("fan-out", params), goal="refund", run_id="root")
        assert root.status.is_terminal
        assert root.usage.steps <= max_steps and root.usage.tool_attempts <= max_steps
        kids = _kids(rt, "root")
        assert sum(k.usage.steps for k in kids) <= child_steps
        for kid in kids:
            assert kid.budget.max_steps is not None and kid.usage.steps <= kid.budget.max_steps
        rt.close()

    check()


def test_the_async_runtime_and_worker_drive_a_parallel_call_too(tmp_path: Path) -> None:
    import asyncio

    from stateward import AsyncWorker

    rt = _runtime(str(tmp_path / "async.db"))
    root = asyncio.run(rt.astart(rt.agents.create("fan-out"), goal="refund every order", run_id="root"))
    assert root.status is RunStatus.COMPLETED and len(_returned(rt, "root")) == 1
    rt.submit(rt.agents.create("fan-out"), goal="refund every order", run_id="queued")
    AsyncWorker(rt, concurrency=4, poll_s=0.02).run(idle_exit_s=1.0)  # children claimed like any run
    assert rt.get("queued").status is RunStatus.COMPLETED
    assert [k.status for k in _kids(rt, "queued")] == [RunStatus.COMPLETED] * 2
    rt.close()


def test_a_workflow_agent_node_with_two_goals_runs_them_as_parallel_children(tmp_path: Path) -> None:
    from stateward import Agent, AgentNode, Budget, FailNode, FinishNode, ToolRegistry, WorkflowController
    from stateward.tools import agent_tool

    both = agent_tool("refund-agent", name="refund_agents", parallel=2, params={"guarded": True})
    nodes = [
        AgentNode("refunds", "refund_agents", goal=["refund A-1", "refund B-2"], next="done", on_failure="failed"),
        FinishNode("done", reason="both refunded"),
        FailNode("failed", reason="a refund failed"),
    ]
    agent = Agent(
        name="wf", controller=WorkflowController(nodes), tools=ToolRegistry([both]), budget=Budget(max_steps=30)
    )
    url = str(tmp_path / "wf.db")
    rt = _runtime(url)
    state = rt.start(agent, goal="refund both", run_id="root")
    assert state.status is RunStatus.WAITING_FOR_USER
    kids = _kids(rt, "root")
    assert [k.status for k in kids] == [RunStatus.WAITING_FOR_USER] * 2  # both started, both waiting
    first, second = kids
    assert first.pending is not None and second.pending is not None
    rt.approve(first.run_id, first.pending.request_id, by="ana", roles=frozenset({"refunds"}))
    assert rt.get("root").status is RunStatus.WAITING_FOR_USER  # the node waits for both
    rt.approve(second.run_id, second.pending.request_id, by="ana", roles=frozenset({"refunds"}))
    done = rt.get("root")
    assert done.status is RunStatus.COMPLETED and done.terminal_reason == "completed"
    rt.close()
