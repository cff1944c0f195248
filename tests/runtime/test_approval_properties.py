"""Property: every execution of a guarded tool is preceded by exactly one approval consumed for exactly
that call, whatever the model proposes, whatever people answer, wherever the process dies."""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stateward import Agent, AgentRegistry, ReActController, RunStatus, Runtime, ToolRegistry, tool
from stateward.models.base import ModelRequest
from stateward.runtime.leases import LeasePolicy
from stateward.store.sqlite import SQLiteStore
from stateward.testing import ScriptedModel


class Crash(Exception):
    """The process dies here (the lease is released by the drive's cleanup, as a lapsed TTL would)."""


class CrashAt:
    def __init__(self, boundary: str | None, nth: int):
        self.boundary, self.nth, self.seen = boundary, nth, 0

    def point(self, name: str) -> None:
        if name == self.boundary:
            self.seen += 1
            if self.seen == self.nth:
                raise Crash(name)


ALL_JOURNAL_STATUSES = ("STARTED", "SUCCEEDED", "FAILED", "UNKNOWN_OUTCOME", "COMPLETED_INVALID")
BOUNDARIES = (
    "after_tool_before_record",
    "before_commit",
    "after_commit",
    "approval_before_commit",
    "approval_after_commit",
)


def make_registry(executed: list[str], intents: list[str]) -> AgentRegistry:
    @tool(requires_approval=True)
    def publish(post_id: str) -> dict[str, str]:
        """A real effect."""
        executed.append(post_id)
        return {"published": post_id}

    def policy(req: ModelRequest) -> dict[str, Any]:
        # Deterministic in the recorded history only, so a run resumed in another process goes on alike.
        position = len(req.observations)
        if position >= len(intents):
            return {"type": "FINISH", "reason": "done"}
        return {"type": "EXECUTE_TOOL", "action": "publish", "args": {"post_id": intents[position]}}

    registry = AgentRegistry()
    registry.register(
        "publisher",
        lambda: Agent(
            name="publisher", controller=ReActController(ScriptedModel(policy)), tools=ToolRegistry([publish])
        ),
    )
    return registry


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    intents=st.lists(st.sampled_from(["a", "b"]), min_size=1, max_size=5),
    verdicts=st.lists(st.booleans(), min_size=12, max_size=12),
    crashes=st.lists(st.tuples(st.sampled_from((None, *BOUNDARIES)), st.integers(1, 3)), min_size=12, max_size=12),
)
def test_each_guarded_execution_consumes_exactly_one_approval_for_exactly_that_call(
    intents: list[str], verdicts: list[bool], crashes: list[tuple[str | None, int]]
) -> None:
    executed: list[str] = []
    registry = make_registry(executed, intents)
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "p.db"
        faults = iter(crashes)

        def runtime() -> Runtime:
            boundary, nth = next(faults, (None, 1))
            return Runtime(
                SQLiteStore(db),
                agents=registry,
                faults=CrashAt(boundary, nth),
                lease=LeasePolicy(ttl_s=3, heartbeat_s=1),
            )

        rt = runtime()
        try:
            run_id = rt.start(registry.build(registry.ref("publisher")), "publish").run_id
        except Crash:
            run_id = rt.store.list_runs()[0].run_id
        answers = iter(verdicts)
        approved: list[tuple[str, str]] = []  # (request id, post id) of every approval recorded
        for _ in range(40):
            state = rt.get(run_id)
            if state.status.is_terminal:
                break
            try:
                if state.status is RunStatus.WAITING_FOR_USER:
                    pending = state.pending
                    assert pending is not None and pending.guarded_action is not None
                    if next(answers, True):
                        rt.approve(run_id, pending.request_id, by="ann")
                    else:
                        rt.reject(run_id, pending.request_id, by="ann", comment="no")
                else:
                    rt.resume(run_id)
            except Crash:
                rt.close()
                rt = runtime()
        final = rt.get(run_id)
        for record in rt.store.list_requests(run_id, open_only=False):
            answer = record.answer
            if answer is not None and answer.verdict == "approved":
                action = record.request.guarded_action
                assert action is not None
                approved.append((record.request.request_id, action.args["post_id"]))
        journal = rt.store.side_effects_of(run_id, ALL_JOURNAL_STATUSES)
        rt.close()

    assert final.status.is_terminal, final
    # Each real effect ran once per approval, and for exactly the post that approval named.
    grants = [r.grant_id for r in journal]
    assert len(executed) == len(journal) == len(set(grants)) and None not in grants
    by_request = dict(approved)
    assert Counter(executed) == Counter(by_request[g] for g in grants if g is not None)
    assert final.usage.approvals_consumed == len(executed)
    assert len(executed) <= len(approved)
