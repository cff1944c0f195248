"""What the chaos harness checks after the storm: each count must be 0 (but the ratio)."""

from __future__ import annotations

import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stateward.chaos.agent import build_agent
from stateward.chaos.ledger import ledger_for
from stateward.core.events import EventType
from stateward.core.status import TRANSITIONS, RunStatus
from stateward.runtime.agent_registry import process_agents
from stateward.runtime.runtime import Runtime
from stateward.store.backends import open_store

if TYPE_CHECKING:
    from stateward.chaos.config import ChaosConfig

# What the storm must leave at zero, and the share of runs that must end finished or waiting.
MUST_BE_ZERO = (
    "lost_runs",
    "duplicate_side_effects",
    "double_executions",
    "stale_writes_accepted",
    "illegal_transitions",
    "budget_resets",
    "mismatched_final_states",
)
MIN_FINISHED_OR_WAITING = 0.95


def broken(report: dict[str, Any]) -> list[str]:
    """The invariants a harness report breaks (empty when the storm broke nothing)."""
    out = [k for k in MUST_BE_ZERO if report[k]]
    if report["finished_or_waiting_ratio"] < MIN_FINISHED_OR_WAITING:
        out.append("finished_or_waiting_ratio")
    # Liveness of the storm itself: a child that hung past its deadline, a storm that never finished.
    out += [k for k in ("hung_children", "timed_out") if report.get(k)]
    return out


LEGAL_MOVES = {(before.value, after.value) for (before, _), after in TRANSITIONS.items()}
FinalState = tuple[str, tuple[tuple[int, int], ...]]


@dataclass
class Reference:
    """Final states of the same runs, driven once without any fault on a private SQLite file."""

    finals: dict[str, FinalState]

    @classmethod
    def build(cls, cfg: ChaosConfig, run_ids: list[str]) -> Reference:
        with tempfile.TemporaryDirectory(prefix="stateward-chaos-ref-") as tmp:
            db = str(Path(tmp) / "reference.db")
            runtime = Runtime(
                open_store(db), agents=process_agents(with_test_agents=True)
            )  # first: the store refuses a file that already has other tables
            ledger = ledger_for(db)
            ledger.setup()
            for i, run_id in enumerate(run_ids):
                state = runtime.start(build_agent(db, cfg.seed, i), "post three entries", run_id=run_id)
                while state.status is RunStatus.WAITING_FOR_USER and state.pending is not None:
                    state = runtime.approve(run_id, state.pending.request_id, by="reference").state
            finals = {run_id: _final(runtime, db, run_id) for run_id in run_ids}
            runtime.close()
            ledger.close()
        return cls(finals)


def _final(runtime: Runtime, db: str, run_id: str) -> FinalState:
    status = runtime.get(run_id).status.value
    posted = ledger_for(db).rows("SELECT op, amount FROM chaos_ledger WHERE run_id=? ORDER BY op", (run_id,))
    return status, tuple((int(op), int(amount)) for op, amount in posted)


def verify(cfg: ChaosConfig, run_ids: list[str], reference: Reference) -> dict[str, Any]:
    runtime = Runtime(open_store(cfg.db))
    ledger = ledger_for(cfg.db)
    counts = Counter[str]()
    statuses = Counter[str]()
    try:
        present = {r.run_id for r in runtime.store.list_runs(limit=len(run_ids) + 1000)}
        for run_id in run_ids:
            if run_id not in present:
                counts["lost_runs"] += 1
                continue
            state = runtime.get(run_id)
            statuses[state.status.value] += 1
            if state.status in (RunStatus.RUNNING, RunStatus.PAUSING):
                counts["lost_runs"] += 1
            counts.update(_check_events(runtime, run_id, state.usage.illegal_transitions))
            if _final(runtime, cfg.db, run_id) != reference.finals[run_id]:
                counts["mismatched_final_states"] += 1
        dup = ledger.rows("SELECT run_id, op, COUNT(*) FROM chaos_ledger GROUP BY run_id, op HAVING COUNT(*) > 1")
        counts["duplicate_side_effects"] = sum(int(n) - 1 for _, _, n in dup)
        calls = dict(ledger.rows("SELECT outcome, COUNT(*) FROM chaos_calls GROUP BY outcome"))
        counts["double_executions"] = int(calls.get("duplicate_key", 0))
        stale_logged = ledger.rows("SELECT COUNT(*) FROM chaos_log WHERE kind='stale_lease'")[0][0]
        counts["stale_writes_rejected"] = int(stale_logged) + int(calls.get("stale_token", 0))
    finally:
        runtime.close()
        ledger.close()
    finished = statuses[RunStatus.COMPLETED.value] + statuses[RunStatus.WAITING_FOR_USER.value]
    keys = (
        "lost_runs",
        "duplicate_side_effects",
        "double_executions",
        "stale_writes_accepted",
        "stale_writes_rejected",
        "illegal_transitions",
        "budget_resets",
        "mismatched_final_states",
    )
    return {
        "runs": len(run_ids),
        **{k: counts[k] for k in keys},
        "finished_or_waiting_ratio": round(finished / len(run_ids), 4) if run_ids else 0.0,
        "final_statuses": dict(sorted(statuses.items())),
        "handler_calls": {str(k): int(v) for k, v in calls.items()},
    }


def _check_events(runtime: Runtime, run_id: str, illegal_recorded: int) -> Counter[str]:
    """Fencing, legality and budget continuity, read back from the run's own event log."""
    found = Counter[str]()
    found["illegal_transitions"] += illegal_recorded
    highest_lease = 0
    last_usage: dict[str, int] = {}
    signals = 0
    for ev in runtime.store.read_events(run_id):
        if ev.lease_version and ev.lease_version < highest_lease:
            found["stale_writes_accepted"] += 1  # a superseded holder's event got into the log
        highest_lease = max(highest_lease, ev.lease_version)
        if ev.type is EventType.STATE_TRANSITION:
            move = (ev.payload.get("state_before"), ev.payload.get("state_after"))
            if move not in LEGAL_MOVES:
                found["illegal_transitions"] += 1
        if ev.type is EventType.SIGNAL_RECEIVED:
            signals += 1
        usage = ev.payload.get("usage")
        if isinstance(usage, dict):
            if any(int(usage.get(k, 0)) < v for k, v in last_usage.items()):
                found["budget_resets"] += 1
            last_usage = {k: int(v) for k, v in usage.items() if isinstance(v, int)}
    final = runtime.get(run_id).usage
    if final.steps < signals:
        found["budget_resets"] += 1  # fewer steps counted than decisions taken
    return found
