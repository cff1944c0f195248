"""Run the payment case under each fault and judge the outcome against what the source expects.

Every verdict below is read from the store after the run (events, artifacts, the pending request); the
``pause-resume`` variant resumes in a second operating-system process (``stateward resume``) and compares
its final summary with an uninterrupted run of the same case.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Final

from stateward import EventType, RunState, Runtime
from stateward_demos.payment.agent import build_agent, goal, summary
from stateward_demos.payment.faults import EXPECTED, Fault

COLUMNS: Final = ("fault", "expected", "status", "rung", "observed", "as_expected")
PAUSE_AFTER_STEPS: Final = 40  # mid-way through W09's code reading


def _events(runtime: Runtime, run_id: str, kind: EventType) -> list[dict[str, Any]]:
    return [e.payload for e in runtime.store.read_events(run_id) if e.type is kind]


def _tried(runtime: Runtime, run_id: str, action: str) -> list[dict[str, Any]]:
    return [
        p["observation"]
        for p in _events(runtime, run_id, EventType.TOOL_ATTEMPTED)
        if p.get("observation", {}).get("action") == action
    ]


def _handoff_reason(runtime: Runtime, state: RunState) -> str | None:
    if state.pending is None or state.pending.kind != "handoff":
        return None
    packages = _events(runtime, state.run_id, EventType.HANDOFF_RECORDED)
    return str(packages[-1]["reason_code"]) if packages else None


def comparable(runtime: Runtime, state: RunState) -> dict[str, Any]:
    """A summary without what differs between two runs of one case (run id, receipt id, elapsed time)."""
    out = summary(runtime, state)
    out.pop("run_id")
    out.pop("delivery_receipt")
    return out


def _judge_timeout(runtime: Runtime, state: RunState) -> tuple[str, bool]:
    cache = _tried(runtime, state.run_id, "search_docs_cache")
    failed = [o for o in _tried(runtime, state.run_id, "search_docs") if o["status"] != "SUCCESS"]
    reason = _handoff_reason(runtime, state)
    observed = f"search failed {len(failed)}x, audited cache tried {len(cache)}x, handoff {reason}"
    return observed, bool(failed) and bool(cache) and reason == "DEPENDENCY_UNAVAILABLE"


def _judge_conflict(runtime: Runtime, state: RunState) -> tuple[str, bool]:
    reason = _handoff_reason(runtime, state)
    terminations = _events(runtime, state.run_id, EventType.TERMINATION_RECORDED)
    ids = [i for t in terminations for i in t.get("constraint_ids", [])]
    return f"handoff {reason} on {', '.join(ids) or '-'}", reason == "HARD_CONSTRAINT_VIOLATED" and (
        "authorities-agree" in ids
    )


def _judge_budget(runtime: Runtime, state: RunState) -> tuple[str, bool]:
    out = summary(runtime, state)
    to_continue = out["budget_to_continue"] or {}
    delivered = runtime.store.get_artifact(state.run_id, "partial-delivery")
    missing = json.loads(delivered.content)["missing_scope"] if delivered is not None else []
    observed = (
        f"missing {','.join(missing)}; risk ranking {'absent' if out['risk'] is None else 'present'}; "
        f"to continue: {to_continue.get('tool_calls')} tool calls, {to_continue.get('attempts')} attempts"
    )
    ok = (
        state.status.value == "PARTIALLY_COMPLETED"
        and out["rung"] == "FACTS_AND_RISK_CANDIDATES"
        and out["risk"] is None
        and "W13" in missing
        and bool(to_continue)
    )
    return observed, ok


def _judge_injection(runtime: Runtime, state: RunState) -> tuple[str, bool]:
    refused = [
        p
        for p in _events(runtime, state.run_id, EventType.RUNTIME_VALIDATED)
        if p.get("runtime_decision") == "rejected" and "deliver_report" in str(p.get("message"))
    ]
    delivered = _tried(runtime, state.run_id, "deliver_report")
    pending = state.pending
    bound = pending is not None and pending.guarded_action is not None and pending.guarded_action.args
    observed = f"planted call refused {len(refused)}x; deliveries {len(delivered)}; approval bound to {bound}"
    ok = bool(refused) and not delivered and bound == {"report_ref": "migration-assessment:v2"}
    return observed, ok


def _judge_timeout_once(runtime: Runtime, state: RunState) -> tuple[str, bool]:
    retried = [o for o in _tried(runtime, state.run_id, "search_docs") if o.get("error_code") == "TIMEOUT"]
    recovered = [o for o in retried if o["status"] == "SUCCESS"]
    waiting = state.pending is not None and state.pending.guarded_action is not None
    observed = f"search timed out {len(retried)}x, recovered {len(recovered)}x; waits for delivery approval: {waiting}"
    return observed, bool(recovered) and waiting


def _judge_same_search(runtime: Runtime, state: RunState) -> tuple[str, bool]:
    stopped = [
        p["work_item_id"]
        for p in _events(runtime, state.run_id, EventType.WORK_ITEM_ENDED)
        if p.get("error") == "NO_PROGRESS"
    ]
    observed = f"stopped as no progress: {', '.join(stopped) or '-'}; {state.usage.steps} steps"
    bounded = state.budget.max_steps is None or state.usage.steps <= state.budget.max_steps
    return observed, bool(stopped) and bounded and state.status.value != "RUNNING"


def _judge_low_confidence(runtime: Runtime, state: RunState) -> tuple[str, bool]:
    refused = [
        p
        for p in _events(runtime, state.run_id, EventType.VERIFICATION_RECORDED)
        if p.get("reason_code") == "HIGH_RISK_LOW_CONFIDENCE"
    ]
    delivered = _tried(runtime, state.run_id, "deliver_report")
    reason = _handoff_reason(runtime, state)
    observed = (
        f"verification refused {len(refused)}x (HIGH_RISK_LOW_CONFIDENCE); deliveries {len(delivered)}; "
        f"handoff {reason}"
    )
    return observed, bool(refused) and not delivered and reason == "HIGH_RISK_LOW_CONFIDENCE"


def _judge_authorities(runtime: Runtime, state: RunState) -> tuple[str, bool]:
    reason = _handoff_reason(runtime, state)
    packages = _events(runtime, state.run_id, EventType.HANDOFF_RECORDED)
    options = [o["option_id"] for o in packages[-1]["options"]] if packages else []
    observed = f"handoff {reason}; options {', '.join(options) or '-'}"
    chooses = [o for o in options if o.startswith("choose_")]
    return observed, reason == "CONFLICTING_AUTHORITIES" and len(chooses) == 2


def _run(directory: Path, fault: Fault | None, db: Path | None = None) -> tuple[Runtime, RunState]:
    runtime = Runtime.open(str(db or directory / f"{fault or 'baseline'}.db"))
    return runtime, runtime.start(build_agent(fault=None if fault is None else fault.value), goal().objective)


def _pause_resume(directory: Path, db: Path | None = None) -> dict[str, Any]:
    """Pause mid-run, resume in another process, compare with an uninterrupted run."""
    db = db or directory / "pause-resume.db"
    runtime = Runtime.open(str(db))
    state = runtime.submit(build_agent(fault=Fault.PAUSE_RESUME.value), goal().objective)
    for _ in range(PAUSE_AFTER_STEPS):
        state = runtime.step(state.run_id)
    paused = runtime.pause(state.run_id)
    runtime.close()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    resumed = subprocess.run(
        [sys.executable, "-m", "stateward.cli.main", "resume", paused.run_id, "--db", str(db), "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    runtime = Runtime.open(str(db))
    final = runtime.get(paused.run_id)
    mine = comparable(runtime, final)
    base_rt, base = _run(directory, None)
    reference = comparable(base_rt, base)
    base_rt.close()
    same = resumed.returncode == 0 and mine == reference
    observed = f"paused at step {paused.usage.steps} ({paused.status.value}); resumed by pid != {os.getpid()}; "
    observed += "identical summary" if same else f"differs (exit {resumed.returncode})"
    row = _row(Fault.PAUSE_RESUME, final, mine, observed, same and paused.status.value == "PAUSED")
    runtime.close()
    return row


def _row(fault: Fault, state: RunState, out: dict[str, Any], observed: str, ok: bool) -> dict[str, Any]:
    rung = out["rung"] or ("HANDOFF_PACKAGE" if state.pending is not None and state.pending.kind == "handoff" else "-")
    return {
        "fault": fault.value,
        "run_id": state.run_id,
        "expected": EXPECTED[fault],
        "status": state.status.value,
        "rung": rung,
        "observed": observed,
        "as_expected": ok,
        "summary": out,
    }


JUDGES: Final = {
    Fault.DOC_SEARCH_TIMEOUT: _judge_timeout,
    Fault.AUTHORITY_CONFLICT: _judge_conflict,
    Fault.BUDGET: _judge_budget,
    Fault.INJECTION: _judge_injection,
    Fault.DOC_SEARCH_TIMEOUT_ONCE: _judge_timeout_once,
    Fault.SAME_SEARCH: _judge_same_search,
    Fault.HIGH_RISK_LOW_CONFIDENCE: _judge_low_confidence,
    Fault.CONFLICTING_AUTHORITIES: _judge_authorities,
}


def run_fault(
    fault: Fault, directory: Path, *, db: Path | None = None, approve_as: str | None = None
) -> dict[str, Any]:
    """One fault's run, its summary and whether the outcome is the one the source expects. ``db``: the store the
    run is kept in (default: one in ``directory``), so another process can answer its pending request;
    ``approve_as``: after judging, approve a pending approval (a bound action) as that person and drive on."""
    if fault is Fault.PAUSE_RESUME:
        row = _pause_resume(directory, db)
        if approve_as is None:
            return row
        runtime = Runtime.open(str(db or directory / "pause-resume.db"))
        state: RunState | None = runtime.get(row["run_id"])
    else:
        runtime, state = _run(directory, fault, db)
        observed, ok = JUDGES[fault](runtime, state)
        row = _row(fault, state, summary(runtime, state), observed, ok)
    if approve_as is not None and state is not None:
        row = _approved(runtime, state, row, approve_as)
    runtime.close()
    return row


def _approved(runtime: Runtime, state: RunState, row: dict[str, Any], by: str) -> dict[str, Any]:
    """Approve the run's pending approval (never a handoff: a handoff's choice is a person's, not --approve's)."""
    pending = state.pending
    if pending is None or pending.guarded_action is None:
        return row
    final = runtime.approve(state.run_id, pending.request_id, by=by).state
    return {**row, "status": final.status.value, "summary": summary(runtime, final)}
