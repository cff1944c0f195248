"""Agents that call agents: a call through an ``agent_tool`` is a child run of its own, started once per
call whatever crashes, with a budget carved from the parent's, and its outcome is the call's observation."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from tests.runtime import child_family as family

from stateward import AgentRegistry, Budget, RequestRefusedError, RunState, RunStatus, Runtime
from stateward.core.budget import spent
from stateward.core.errors import ErrorCode
from stateward.core.events import EventType
from stateward.core.state import RequestKind
from stateward.runtime.worker import Worker

ROOT = Path(__file__).parents[2]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "family.db")
    return str(request.getfixturevalue("pg_url"))


def _runtime(url: str, agents: AgentRegistry | None = None) -> Runtime:
    return Runtime.open(url, agents=agents or family.registry(), lease=family.LEASE)


def _children(rt: Runtime, parent: str) -> list[RunState]:
    runs = [rt.get(r.run_id) for r in rt.list_runs(limit=1000).items]
    return sorted((r for r in runs if r.parent is not None and r.parent.run_id == parent), key=lambda r: r.goal)


def _observed(rt: Runtime, run_id: str) -> list[dict[str, Any]]:
    return [e.payload["observation"] for e in rt.events(run_id, content=True) if e.type is EventType.CHILD_RUN_RETURNED]


def test_each_call_is_a_child_run_and_its_outcome_is_the_calls_observation(url: str) -> None:
    rt = _runtime(url)
    root = rt.start(rt.agents.create("triage"), goal="refund every order", tenant="acme", run_id="root")
    assert root.status is RunStatus.COMPLETED
    # The parent's last decision saw each child's outcome as its call's observation (and nothing else).
    assert root.terminal_reason == "completed"
    seen = _observed(rt, "root")
    assert [o["result"]["answer"] for o in seen] == ["refunded A-1", "refunded B-2"]
    assert {o["status"] for o in seen} == {"SUCCESS"} and [o["action"] for o in seen] == ["refund_agent"] * 2
    kids = _children(rt, "root")
    assert [k.goal for k in kids] == ["refund A-1", "refund B-2"]
    for kid in kids:
        # A run of its own: its agent, its events, its tenant inherited; its place in the tree recorded.
        assert kid.agent.name == "refund-agent" and kid.status is RunStatus.COMPLETED and kid.tenant == "acme"
        assert kid.parent is not None and kid.parent.root_run_id == "root" and kid.parent.depth == 1
        types = [e.type for e in rt.events(kid.run_id)]
        assert types[:2] == [EventType.RUN_STARTED, EventType.CHILD_RUN_STARTED]
        assert kid.usage.tool_attempts == 1
    # The parent waited durably: a CHILD_RUN request, answered by the child's end, not by a person.
    waits = rt.list_requests(run_id="root", open_only=False).items
    assert [w.request.kind for w in waits] == [RequestKind.CHILD_RUN] * 2
    assert [w.request.child.run_id for w in waits if w.request.child] == [
        next(k.run_id for k in kids if k.goal == w.request.child.goal) for w in waits if w.request.child
    ]
    rt.close()


def test_usage_rolls_up_exactly_and_each_carve_is_at_most_what_remains(url: str) -> None:
    rt = _runtime(url)
    agent = rt.agents.create("triage", {"child_steps": 5, "max_steps": 8})
    root = rt.start(agent, goal="refund every order", run_id="root")
    first, second = _children(rt, "root")
    # The first call (step 1) leaves 7 steps: the tool's cap of 5 holds. The second call is step 1 + 2 (the
    # first child's) + 1 = 4, leaving 4: less than the cap, so the child gets 4.
    assert first.budget.max_steps == 5 and second.budget.max_steps == 4
    assert (
        first.budget.max_tool_calls == 8 - 1 and second.budget.max_tool_calls == 8 - 1 - 1 - 1
    )  # two calls, one lookup
    own_steps, own_tools = 3, 2  # call, call, finish; the two calls
    assert root.usage.steps == own_steps + first.usage.steps + second.usage.steps
    assert root.usage.tool_attempts == own_tools + first.usage.tool_attempts + second.usage.tool_attempts
    assert root.usage.model_calls == 3 + first.usage.model_calls + second.usage.model_calls
    # Each child's spend, in every budget dimension, is handed back with its outcome and counted once.
    rolled = [e.payload["usage"] for e in rt.events("root") if e.type is EventType.CHILD_RUN_RETURNED]
    assert rolled == [spent(r.usage).counts() for r in (first, second)]
    # The parent's resume records the usage it goes on with: its own steps so far and the child's.
    resumed = [e.payload["usage"]["steps"] for e in rt.events("root") if e.type is EventType.RUN_RESUMED]
    assert resumed == [1 + first.usage.steps, 1 + first.usage.steps + 1 + second.usage.steps]
    for counter in ("input_tokens", "output_tokens"):
        children_spent = getattr(first.usage, counter) + getattr(second.usage, counter)
        assert children_spent > 0 and getattr(root.usage, counter) > children_spent
    assert root.status is RunStatus.COMPLETED
    rt.close()


def test_a_child_that_runs_out_of_its_carve_is_the_parents_named_tool_failure(url: str) -> None:
    rt = _runtime(url)
    root = rt.start(rt.agents.create("triage", {"endless": True, "child_steps": 3}), goal="refund", run_id="root")
    kids = _children(rt, "root")
    assert [k.status for k in kids] == [RunStatus.FAILED] * 2
    assert {k.terminal_reason for k in kids} == {"budget_exhausted"}
    assert all(k.usage.steps <= 3 for k in kids)  # never past its carve
    seen = _observed(rt, "root")
    assert [(o["status"], o["error_code"]) for o in seen] == [("FAILED", ErrorCode.CHILD_RUN_FAILED.value)] * 2
    assert root.status is RunStatus.COMPLETED  # the parent decided what to do with the failures
    rt.close()


def test_a_child_of_an_agent_nobody_registered_fails_the_call_and_starts_nothing(tmp_path: Path) -> None:
    only_triage = AgentRegistry()
    only_triage.register("triage", family.triage_agent)
    rt = _runtime(str(tmp_path / "x.db"), only_triage)
    root = rt.start(rt.agents.create("triage"), goal="refund", run_id="root")
    seen = _observed(rt, "root")
    assert [o["error_code"] for o in seen] == [ErrorCode.CHILD_AGENT_UNAVAILABLE.value] * 2
    assert _children(rt, "root") == [] and root.status is RunStatus.COMPLETED
    rt.close()


def test_nobody_answers_a_child_run_wait(tmp_path: Path) -> None:
    rt = _runtime(str(tmp_path / "x.db"))
    agent = rt.agents.create("triage", {"guarded": True})
    root = rt.start(agent, goal="refund every order", run_id="root")
    assert root.status is RunStatus.WAITING_FOR_USER and root.pending is not None
    assert root.pending.kind is RequestKind.CHILD_RUN
    with pytest.raises(RequestRefusedError) as refused:
        rt.approve("root", root.pending.request_id, by="mallory")
    assert refused.value.code == ErrorCode.WRONG_ANSWER_KIND
    # The child asks its own approvers (the refunds role), not the parent's.
    (kid,) = _children(rt, "root")
    assert kid.status is RunStatus.WAITING_FOR_USER and kid.pending is not None
    assert kid.pending.approver_role == "refunds"
    done = rt.approve(kid.run_id, kid.pending.request_id, by="rita", roles=frozenset({"refunds"}))
    assert done.state.status is RunStatus.COMPLETED
    # The answer in the child drove the tree on: the parent took the outcome and called the next child.
    assert rt.get("root").status is RunStatus.WAITING_FOR_USER
    assert len(_children(rt, "root")) == 2
    # Driving the first (ended) child again hands nothing to a parent that now waits on the second.
    rt.drive(kid.run_id)
    rt.settle_children(drive=True)
    waiting = rt.get("root")
    assert waiting.pending is not None and waiting.pending.child is not None
    assert waiting.pending.child.goal == "refund B-2" and len(_observed(rt, "root")) == 1
    rt.close()


def test_workers_drive_a_submitted_tree_to_its_end(url: str) -> None:
    rt = _runtime(url)
    rt.submit(rt.agents.create("triage"), goal="refund every order", run_id="root")
    Worker(rt, concurrency=2, poll_s=0.02, expire_every_s=0.05).run(idle_exit_s=1.0)
    assert rt.get("root").status is RunStatus.COMPLETED
    assert [k.status for k in _children(rt, "root")] == [RunStatus.COMPLETED] * 2
    rt.close()


KILLS = [
    *[("before_commit", n) for n in range(1, 8)],
    *[("after_commit", n) for n in range(1, 8)],
    ("child_before_start", 1),
    ("child_before_start", 2),
    ("child_before_return", 1),
    ("child_before_return", 2),
]


def _recover(url: str) -> Runtime:
    """A new process's Runtime after the kill: workers (and their sweeps) finish whatever was left."""
    rt = _runtime(url)
    deadline = time.monotonic() + 30
    while rt.get("root").status is not RunStatus.COMPLETED and time.monotonic() < deadline:
        time.sleep(family.LEASE.ttl_s)  # the dead process's leases expire
        Worker(rt, poll_s=0.02, expire_every_s=0.05).run(idle_exit_s=0.5)
    return rt


@pytest.mark.parametrize(("kill_at", "nth"), KILLS)
def test_sigkill_at_every_boundary_of_a_call_starts_exactly_one_child_per_call(
    tmp_path: Path, kill_at: str, nth: int
) -> None:
    url = str(tmp_path / "kill.db")
    _kill_and_check(url, kill_at, nth)


@pytest.mark.postgres
@pytest.mark.parametrize(("kill_at", "nth"), [("before_commit", 1), ("after_commit", 1), *KILLS[-4:]])
def test_sigkill_on_postgres_starts_exactly_one_child_per_call(pg_url: str, kill_at: str, nth: int) -> None:
    _kill_and_check(pg_url, kill_at, nth)


def _kill_and_check(url: str, kill_at: str, nth: int) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", f"from tests.runtime import child_family as f; f.main({url!r}, {kill_at!r}, {nth})"],
        cwd=ROOT,
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]  # it died where it was told to
    rt = _recover(url)
    root = rt.get("root")
    assert root.status is RunStatus.COMPLETED, root
    kids = _children(rt, "root")
    assert [k.goal for k in kids] == ["refund A-1", "refund B-2"]  # exactly one child per call
    assert all(k.status is RunStatus.COMPLETED for k in kids)
    for kid in kids:
        started = [e for e in rt.events(kid.run_id) if e.type is EventType.RUN_STARTED]
        assert len(started) == 1
    seen = _observed(rt, "root")
    assert [o["result"]["answer"] for o in seen] == ["refunded A-1", "refunded B-2"]  # nothing lost, none twice
    assert root.usage.steps == 3 + sum(k.usage.steps for k in kids)
    assert root.usage.tool_attempts == 2 + sum(k.usage.tool_attempts for k in kids)
    rt.close()


def test_a_carve_never_exceeds_the_parents_remaining_budget() -> None:
    from hypothesis import given
    from hypothesis import strategies as st

    from stateward.core.budget import Usage, carve

    bound = st.none() | st.integers(0, 50)

    @given(
        limits=st.builds(Budget, max_steps=bound, max_model_calls=bound, max_tool_calls=bound),
        used=st.builds(
            Usage, steps=st.integers(0, 60), model_calls=st.integers(0, 60), tool_attempts=st.integers(0, 60)
        ),
        cap=st.none() | st.builds(Budget, max_steps=bound, max_model_calls=bound, max_tool_calls=bound),
    )
    def check(limits: Budget, used: Usage, cap: Budget | None) -> None:
        got = carve(limits, used, cap)
        for bound_name, counter in (
            ("max_steps", "steps"),
            ("max_model_calls", "model_calls"),
            ("max_tool_calls", "tool_attempts"),
        ):
            limit, value = getattr(limits, bound_name), getattr(got, bound_name)
            if limit is not None:
                assert value is not None and value <= max(0, limit - getattr(used, counter))
            if cap is not None and getattr(cap, bound_name) is not None:
                assert value is not None and value <= getattr(cap, bound_name)

    check()


def test_no_tree_of_children_spends_more_than_the_parents_limits(tmp_path: Path) -> None:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    @settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(max_steps=st.integers(2, 14), child_steps=st.integers(1, 6), endless=st.booleans(), n=st.integers(0, 10**9))
    def check(max_steps: int, child_steps: int, endless: bool, n: int) -> None:
        rt = _runtime(str(tmp_path / f"p{n}-{max_steps}-{child_steps}-{endless}.db"))
        params = {"max_steps": max_steps, "child_steps": child_steps, "endless": endless}
        root = rt.start(rt.agents.create("triage", params), goal="refund", run_id="root")
        assert root.status.is_terminal
        assert root.usage.steps <= max_steps and root.usage.tool_attempts <= max_steps
        for kid in _children(rt, "root"):
            assert kid.budget.max_steps is not None and kid.usage.steps <= kid.budget.max_steps <= child_steps
        rt.close()

    check()


def _tree(rt: Runtime, root: str) -> list[RunState]:
    """Every descendant of ``root``, parents before children."""
    found, frontier = [], [root]
    while frontier:
        kids = _children(rt, frontier.pop(0))
        found += kids
        frontier += [k.run_id for k in kids]
    return found


def test_cancelling_the_root_ends_every_descendant_and_closes_their_requests(url: str) -> None:
    rt = _runtime(url)
    root = rt.start(rt.agents.create("manager"), goal="refunds", run_id="root")
    tree = _tree(rt, "root")
    assert [r.agent.name for r in tree] == ["triage", "refund-agent"]  # a grandchild waits for approval
    assert [r.parent.depth for r in tree if r.parent] == [1, 2]
    assert {r.parent.root_run_id for r in tree if r.parent} == {"root"}
    assert root.status is RunStatus.WAITING_FOR_USER and len(rt.list_requests().items) == 3
    rt.cancel("root", by="ops")
    assert rt.get("root").status is RunStatus.CANCELLED
    assert [rt.get(r.run_id).status for r in tree] == [RunStatus.CANCELLED] * 2
    assert rt.list_requests().items == []  # the grandchild's approval closed with it
    rt.close()


def test_a_cancelled_child_is_its_parents_named_tool_failure(tmp_path: Path) -> None:
    rt = _runtime(str(tmp_path / "x.db"))
    rt.start(rt.agents.create("triage", {"guarded": True}), goal="refund every order", run_id="root")
    (first,) = _children(rt, "root")
    rt.cancel(first.run_id, by="ops")
    # Handed back at once: the parent saw CHILD_RUN_CANCELLED and went on to its next call.
    assert [(o["status"], o["error_code"]) for o in _observed(rt, "root")] == [
        ("FAILED", ErrorCode.CHILD_RUN_CANCELLED.value)
    ]
    assert len(_children(rt, "root")) == 2
    rt.close()


class _DiesBeforeChild:
    """The process dies once, right after the parent's wait is durable and before its child starts."""

    def __init__(self) -> None:
        self.died = False

    def point(self, name: str) -> None:
        if name == "child_before_start" and not self.died:
            self.died = True
            raise SystemExit("killed")


def test_pausing_a_waiting_parent_pauses_its_child_and_resuming_it_goes_on(tmp_path: Path) -> None:
    url = str(tmp_path / "x.db")
    dying = Runtime.open(url, agents=family.registry(), faults=_DiesBeforeChild())
    with pytest.raises(SystemExit):
        dying.start(dying.agents.create("triage"), goal="refund every order", run_id="root")
    dying.close()
    rt = _runtime(url)
    started = rt.settle_children()  # a sweep starts the child nobody started, for a worker to drive
    (child,) = _children(rt, "root")
    assert started == [child.run_id] and child.status is RunStatus.RUNNING
    assert rt.pause("root", by="ops").status is RunStatus.WAITING_FOR_USER
    assert rt.get(child.run_id).status is RunStatus.PAUSED
    rt.resume("root", by="ops")
    assert rt.get(child.run_id).status is RunStatus.COMPLETED
    assert rt.get("root").status is RunStatus.COMPLETED and len(_children(rt, "root")) == 2
    rt.close()


class _CancelMidStep:
    """An operator cancels the parent while its first step (the call) is in flight, under its lease."""

    def __init__(self) -> None:
        self.runtime: Runtime | None = None
        self.done = False

    def point(self, name: str) -> None:
        if name == "before_commit" and not self.done and self.runtime is not None:
            self.done = True
            self.runtime.cancel("root", by="ops")  # the lease is held: the request waits for the holder


def test_a_cancel_asked_while_the_call_is_in_flight_starts_no_child(tmp_path: Path) -> None:
    faults = _CancelMidStep()
    rt = Runtime.open(str(tmp_path / "x.db"), agents=family.registry(), faults=faults)
    faults.runtime = operator = Runtime.open(str(tmp_path / "x.db"))  # another process
    root = rt.start(rt.agents.create("triage"), goal="refund every order", run_id="root")
    assert root.status is RunStatus.CANCELLED and rt.children("root") == []
    assert len(rt.list_runs().items) == 1  # no child run exists
    operator.close()
    rt.close()


def test_the_async_runtime_drives_a_tree_too(tmp_path: Path) -> None:
    import asyncio

    rt = _runtime(str(tmp_path / "a.db"))
    root = asyncio.run(rt.astart(rt.agents.create("triage"), goal="refund every order", run_id="root"))
    assert root.status is RunStatus.COMPLETED
    assert [o["result"]["answer"] for o in _observed(rt, "root")] == ["refunded A-1", "refunded B-2"]
    rt.close()


class _DiesAt:
    """The process dies (SystemExit, which nothing of the Runtime catches) the ``nth`` time at ``name``."""

    def __init__(self, name: str, nth: int) -> None:
        self.name, self.nth, self.seen = name, nth, 0

    def point(self, name: str) -> None:
        if name == self.name:
            self.seen += 1
            if self.seen == self.nth:
                raise SystemExit(f"died at {name} #{self.nth}")


def test_no_crash_and_resume_of_a_tree_spends_more_than_the_parents_limits(tmp_path: Path) -> None:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from stateward.runtime.faults import CHILD_BOUNDARIES

    points = st.sampled_from(("before_commit", "after_commit", *CHILD_BOUNDARIES))

    @settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(
        max_steps=st.integers(3, 12),
        child_steps=st.integers(1, 5),
        endless=st.booleans(),
        crash=st.tuples(points, st.integers(1, 6)),
        n=st.integers(0, 10**9),
    )
    def check(max_steps: int, child_steps: int, endless: bool, crash: tuple[str, int], n: int) -> None:
        url = str(tmp_path / f"c{n}-{max_steps}-{child_steps}-{endless}-{crash[0]}-{crash[1]}.db")
        params = {"max_steps": max_steps, "child_steps": child_steps, "endless": endless}
        dying = Runtime.open(url, agents=family.registry(), faults=_DiesAt(*crash), lease=family.LEASE)
        with contextlib.suppress(SystemExit):
            dying.start(dying.agents.create("triage", params), goal="refund", run_id="root")
        dying.close()
        rt = _runtime(url)
        for _ in range(20):
            if rt.get("root").status.is_terminal:
                break
            time.sleep(family.LEASE.ttl_s)
            Worker(rt, poll_s=0.02, expire_every_s=0.05).run(idle_exit_s=0.3)
        root = rt.get("root")
        assert root.status.is_terminal
        assert root.usage.steps <= max_steps and root.usage.tool_attempts <= max_steps
        kids = _children(rt, "root")
        assert len({k.goal for k in kids}) == len(kids)  # one child per call
        for kid in kids:
            assert kid.budget.max_steps is not None and kid.usage.steps <= kid.budget.max_steps <= child_steps
        rt.close()

    check()


def test_a_call_with_a_blank_goal_is_refused_by_the_gateway_and_starts_nothing(tmp_path: Path) -> None:
    from stateward import Agent, ReActController, ToolRegistry
    from stateward.testing import ScriptedModel
    from stateward.tools import agent_tool

    def blank(request: Any) -> dict[str, Any]:
        if request.observations:
            return {"type": "FINISH", "reason": str(request.observations[-1]["error_code"])}
        return {"type": "EXECUTE_TOOL", "action": "refund_agent", "args": {"goal": "   ", "max_steps": 2}}

    parent = Agent(
        name="blank",
        controller=ReActController(ScriptedModel(blank)),
        tools=ToolRegistry([agent_tool("refund-agent")]),
        budget=Budget(max_steps=5),
    )
    rt = _runtime(str(tmp_path / "b.db"))
    run = rt.start(parent, goal="call with nothing to do")
    assert run.status is RunStatus.COMPLETED and rt.children(run.run_id) == []
    attempted = [e.payload for e in rt.events(run.run_id) if e.type is EventType.TOOL_ATTEMPTED]
    assert [a["observation"]["error_code"] for a in attempted] == [ErrorCode.INVALID_ARGUMENT.value]
    rt.close()
