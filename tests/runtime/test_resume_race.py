"""Two resumers of one paused run: the one that loses the race is refused, never resumes what the winner
left waiting (a wait resumed without its answer would skip the person it waits for)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.observability.agents_for_metrics import AGENTS, refunder

from stateward import RunStatus, Runtime
from stateward.core.errors import ErrorCode, RunError
from stateward.runtime.agent_registry import AgentRegistry
from stateward.runtime.faults import RESUME_BEFORE_LEASE
from stateward.store.backends import open_store


class OtherResumerFirst:
    """At the window between a resume's check and its lease, another process resumes the run first."""

    def __init__(self, other: Runtime, run_id: str):
        self.other, self.run_id, self.done = other, run_id, False

    def point(self, name: str) -> None:
        if name == RESUME_BEFORE_LEASE and not self.done:
            self.done = True
            assert self.other.resume(self.run_id, by="winner").status is RunStatus.WAITING_FOR_USER


def paused_run(db: Path, agents: AgentRegistry) -> tuple[Runtime, str]:
    runtime = Runtime.open(str(db), agents=agents)
    run_id = runtime.submit(refunder(), "refund c-1").run_id
    assert runtime.step(run_id).status is RunStatus.RUNNING  # the lookup; the refund's approval comes next
    assert runtime.pause(run_id).status is RunStatus.PAUSED
    return runtime, run_id


def test_the_resumer_that_lost_the_race_is_refused_and_the_wait_stands(tmp_path: Path) -> None:
    winner, run_id = paused_run(tmp_path / "runs.db", AGENTS)
    loser = Runtime(open_store(str(tmp_path / "runs.db")), agents=AGENTS, faults=OtherResumerFirst(winner, run_id))
    with pytest.raises(RunError) as refused:
        loser.resume(run_id, by="loser")
    assert refused.value.code == ErrorCode.NOT_RESUMABLE
    state = winner.get(run_id)
    assert state.status is RunStatus.WAITING_FOR_USER and state.pending is not None
    assert state.pending.request_id == "approval_001"
    resumed = [e.payload for e in winner.store.read_events(run_id) if e.type.value == "run_resumed"]
    assert [(r["by"], r["from_status"]) for r in resumed] == [("winner", "PAUSED")]
    loser.close()
    winner.close()
