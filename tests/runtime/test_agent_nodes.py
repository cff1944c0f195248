"""A workflow's AgentNode starts its child run through the agent tool's one path: the same child per call
whatever crashes, the child's approvals answered anywhere, the parent resumed with the child's outcome."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.runtime import agent_nodes
from tests.runtime import child_family as family

from stateward import RunState, RunStatus, Runtime
from stateward.core.events import EventType
from stateward.core.state import RequestKind
from stateward.runtime.worker import Worker

ROOT = Path(__file__).parents[2]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "nodes.db")
    return str(request.getfixturevalue("pg_url"))


def _runtime(url: str) -> Runtime:
    return Runtime.open(url, agents=agent_nodes.registry(), lease=family.LEASE)


def _kids(rt: Runtime, parent: str) -> list[RunState]:
    runs = [rt.get(r.run_id) for r in rt.list_runs(limit=1000).items]
    return [r for r in runs if r.parent is not None and r.parent.run_id == parent]


def test_an_agent_node_whose_child_waits_for_approval_resumes_the_workflow_with_its_result(url: str) -> None:
    rt = _runtime(url)
    root = rt.agents.create("refund-workflow", {"guarded": True})
    parent = rt.start(root, goal="refund order A-1", tenant="acme", run_id="root")
    assert parent.status is RunStatus.WAITING_FOR_USER and parent.pending is not None
    assert parent.pending.kind is RequestKind.CHILD_RUN
    (child,) = _kids(rt, "root")
    assert child.goal == "refund A-1" and child.tenant == "acme"
    assert child.budget.max_steps == 5  # the node asked for 5 of the tool's 8 (of the 19 left)
    assert child.status is RunStatus.WAITING_FOR_USER and child.pending is not None
    assert child.pending.kind is RequestKind.APPROVAL
    rt.close()

    other = _runtime(url)  # another process answers the child's request, with the child's own role
    other.approve(child.run_id, child.pending.request_id, by="ana", tenant="acme", roles=frozenset({"refunds"}))
    done = other.get("root")
    assert done.status is RunStatus.COMPLETED and done.terminal_reason == "completed"
    returned = [e.payload for e in other.events("root", content=True) if e.type is EventType.CHILD_RUN_RETURNED]
    assert len(returned) == 1
    seen = returned[0]["observation"]
    assert seen["status"] == "SUCCESS" and seen["result"]["answer"] == "refunded A-1 with approval"
    assert seen["result"]["child_run_id"] == child.run_id
    assert other.get(child.run_id).status is RunStatus.COMPLETED
    assert done.usage.steps == 2 + other.get(child.run_id).usage.steps  # the child's spend is the parent's
    other.close()


def test_a_failed_child_takes_the_nodes_failure_route(tmp_path: Path) -> None:
    rt = _runtime(str(tmp_path / "fail.db"))
    agent = rt.agents.create("refund-workflow", {"child_steps": 1})  # one step: the child cannot finish
    state = rt.start(agent, goal="refund order A-1")
    assert state.status is RunStatus.FAILED and state.terminal_reason == "the refund agent failed"
    (child,) = _kids(rt, state.run_id)
    assert child.status is RunStatus.FAILED
    rt.close()


def test_an_agent_node_naming_a_plain_tool_fails_by_name(tmp_path: Path) -> None:
    from stateward import Agent, FinishNode, ToolRegistry, WorkflowController, tool
    from stateward.controllers.workflow import AgentNode

    @tool
    def pretend(goal: str) -> dict[str, str]:
        """Says it did the goal (a plain tool, no child run)."""
        return {"answer": "done"}

    agent = Agent(
        name="confused",
        controller=WorkflowController(
            [AgentNode("ask", "pretend", goal="refund A-1", next="done"), FinishNode("done")]
        ),
        tools=ToolRegistry([pretend]),
    )
    rt = _runtime(str(tmp_path / "plain.db"))
    state = rt.start(agent, goal="refund A-1")
    assert state.status is RunStatus.FAILED and "not an agent tool" in (state.terminal_reason or "")
    assert _kids(rt, state.run_id) == []
    rt.close()


KILLS = [("before_commit", 1), ("after_commit", 1), ("before_commit", 2), ("after_commit", 2)]
KILLS += [("child_before_start", 1), ("child_before_return", 1)]


def _recover(url: str) -> Runtime:
    rt = _runtime(url)
    deadline = time.monotonic() + 30
    while rt.get("root").status is not RunStatus.COMPLETED and time.monotonic() < deadline:
        time.sleep(family.LEASE.ttl_s)  # the dead process's leases expire
        Worker(rt, poll_s=0.02, expire_every_s=0.05).run(idle_exit_s=0.5)
    return rt


def _kill_and_check(url: str, kill_at: str, nth: int, agent: str = "refund-workflow") -> None:
    code = f"from tests.runtime import agent_nodes as a; a.main({url!r}, {kill_at!r}, {nth}, {agent!r})"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, timeout=60)
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]  # it died where it was told to
    rt = _recover(url)
    root = rt.get("root")
    assert root.status is RunStatus.COMPLETED, root
    (kid,) = _kids(rt, "root")  # exactly one child for the node's one call
    assert kid.status is RunStatus.COMPLETED
    assert len([e for e in rt.events(kid.run_id) if e.type is EventType.RUN_STARTED]) == 1
    returned = [e for e in rt.events("root") if e.type is EventType.CHILD_RUN_RETURNED]
    assert len(returned) == 1  # delivered once
    if agent == "refund-workflow":
        assert root.usage.steps == 2 + kid.usage.steps
    rt.close()


@pytest.mark.parametrize(("kill_at", "nth"), KILLS)
def test_a_crash_at_any_boundary_of_the_nodes_call_never_starts_a_second_child(
    tmp_path: Path, kill_at: str, nth: int
) -> None:
    _kill_and_check(str(tmp_path / "kill.db"), kill_at, nth)


@pytest.mark.postgres
@pytest.mark.parametrize(("kill_at", "nth"), [("after_commit", 1), ("child_before_start", 1)])
def test_a_crash_on_postgres_never_starts_a_second_child(pg_url: str, kill_at: str, nth: int) -> None:
    _kill_and_check(pg_url, kill_at, nth)


# --------------------------------------------------------------------------- plan items of type AGENT


def test_a_plan_item_of_type_agent_runs_as_a_child_run_and_its_outcome_is_the_items_output(url: str) -> None:
    rt = _runtime(url)
    state = rt.start(rt.agents.create("refund-planner"), goal="refund A-1", tenant="acme", run_id="root")
    assert state.status is RunStatus.COMPLETED, state.terminal_reason
    (kid,) = _kids(rt, "root")
    assert kid.agent.name == "refund-agent" and kid.goal == "refund A-1" and kid.tenant == "acme"
    assert kid.status is RunStatus.COMPLETED and kid.budget.max_steps == 8
    found = rt.store.get_artifact("root", "refund", 1)
    assert found is not None
    output = json.loads(found.content)
    assert output["child_run_id"] == kid.run_id and output["answer"] == "refunded A-1"
    assert output["status"] == "COMPLETED"
    sources = [e.payload["signal_source"] for e in rt.events("root") if e.type is EventType.SIGNAL_RECEIVED]
    assert sources.count("rule") == 2  # the agent tool's call and record_output: code, not a model
    assert state.usage.steps >= 3 + kid.usage.steps  # the child's spend is the parent's
    rt.close()


def test_a_plan_items_child_waiting_for_approval_is_answered_with_its_own_role(tmp_path: Path) -> None:
    url = str(tmp_path / "plan.db")
    rt = _runtime(url)
    state = rt.start(rt.agents.create("refund-planner", {"guarded": True}), goal="refund A-1", run_id="root")
    assert state.status is RunStatus.WAITING_FOR_USER
    (kid,) = _kids(rt, "root")
    assert kid.pending is not None and kid.pending.kind is RequestKind.APPROVAL
    rt.close()
    other = _runtime(url)
    other.approve(kid.run_id, kid.pending.request_id, by="ana", roles=frozenset({"refunds"}))
    assert other.get("root").status is RunStatus.COMPLETED
    found = other.store.get_artifact("root", "refund", 1)
    assert found is not None and json.loads(found.content)["answer"] == "refunded A-1 with approval"
    other.close()


def test_an_agent_item_whose_child_fails_ends_its_attempt_by_name(tmp_path: Path) -> None:
    rt = _runtime(str(tmp_path / "fail.db"))
    state = rt.start(rt.agents.create("refund-planner", {"endless": True}), goal="refund A-1", run_id="root")
    assert state.status is not RunStatus.COMPLETED
    (kid,) = _kids(rt, "root")
    assert kid.status is RunStatus.FAILED
    blocked = [e.payload for e in rt.events("root") if e.type is EventType.WORK_ITEM_BLOCKED]
    assert any("CHILD_RUN_FAILED" in b["message"] for b in blocked)
    ended = [e.payload for e in rt.events("root") if e.type is EventType.WORK_ITEM_ENDED]
    assert [e["error"] for e in ended] == ["PROCEDURE_FAILED"]
    assert rt.store.get_artifact("root", "refund", 1) is None
    rt.close()


@pytest.mark.parametrize(
    ("kill_at", "nth"), [("after_commit", 2), ("child_before_start", 1), ("child_before_return", 1)]
)
def test_a_crash_around_an_agent_items_call_never_starts_a_second_child(tmp_path: Path, kill_at: str, nth: int) -> None:
    _kill_and_check(str(tmp_path / "kill.db"), kill_at, nth, agent="refund-planner")


def test_a_plans_budget_counts_what_its_items_children_spent(tmp_path: Path) -> None:
    """The planner's one model call and the child's two use up a plan limited to 3: the item stops on the
    plan's budget before it records its output; with 4 it completes."""
    rt = _runtime(str(tmp_path / "budget.db"))
    tight = rt.start(rt.agents.create("refund-planner", {"max_model_calls": 3}), goal="refund A-1", run_id="tight")
    (kid,) = _kids(rt, "tight")
    assert kid.status is RunStatus.COMPLETED and kid.usage.model_calls == 2
    assert tight.status is RunStatus.PARTIALLY_COMPLETED
    ended = [e.payload for e in rt.events("tight") if e.type is EventType.WORK_ITEM_ENDED]
    assert [(e["outcome"], e["error"]) for e in ended] == [("FAILED", "BUDGET_EXHAUSTED")]
    roomy = rt.start(rt.agents.create("refund-planner", {"max_model_calls": 4}), goal="refund A-1", run_id="roomy")
    assert roomy.status is RunStatus.COMPLETED
    rt.close()
