"""What one recorded event says about the run's health, as counter increments.

One function reads an event's type and payload and names the operational figures it moves (the
source's observability list: plan quality, execution, tool reliability, result quality, recovery,
control). The live metrics (``metrics.py``) and ``stateward stats`` (``stats.py``) both count
through it, so a figure means the same thing whether it came from a metrics stack or the event log.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from enum import StrEnum
from typing import Any

from stateward.core.contract import OutcomeStatus
from stateward.core.errors import ErrorCode
from stateward.core.events import EventType


class Signal(StrEnum):
    """A counter a recorded event can move (each also a Prometheus counter, ``stateward_<value>_total``)."""

    PLAN_VALIDATED = "plan_validations"  # attr outcome: accepted | refused
    REPLAN = "replans"
    CYCLE_BLOCKED = "cycles_blocked"
    WORK_ITEM_ENDED = "work_items_ended"  # attr outcome
    TOOL_CALL = "tool_calls"  # attrs tool, status
    TOOL_DUPLICATE = "tool_duplicate_calls"  # answered from the journal: a repeat of a call already made
    TOOL_TIMEOUT = "tool_timeouts"
    TOOL_RETRIED = "tool_retried_calls"  # attr outcome: success | failure
    BREAKER_OPEN = "breaker_rejections"  # calls refused because a circuit was open
    UNKNOWN_OUTCOME = "unknown_outcomes"
    VERIFICATION = "verifications"  # attr outcome
    CLAIM_WITHOUT_EVIDENCE = "claims_without_evidence"
    RESUME = "resumes"  # attr from_status: PAUSED (a pause) | RUNNING (a recovery after a crash)
    BUDGET_EXHAUSTED = "budget_exhaustions"  # attr dimension
    NO_PROGRESS_STOP = "no_progress_stops"
    DEGRADED = "degradations"
    HANDOFF = "handoffs"
    RUN_ENDED = "runs_ended"  # attr status
    RUN_STARTED = "runs_started"
    ILLEGAL_TRANSITION = "illegal_transitions"
    STEP_CRASHED = "steps_crashed"
    REFUSED_SIGNAL = "refused_signals"  # attr code


Facts = Iterator[tuple[Signal, Mapping[str, str]]]
_NONE: Mapping[str, str] = {}


def signals_of(kind: EventType, payload: Mapping[str, Any]) -> Facts:
    """The counters one event moves, each with its attributes (low-cardinality values only)."""
    reader = _READERS.get(kind)
    if reader is not None:
        yield from reader(payload)


def counts(kind: EventType) -> bool:
    """Whether an event of this type can move a counter at all (most of a step's events move none: the
    live metrics skip them without asking :func:`signals_of`)."""
    return kind in _READERS


def _plan(p: Mapping[str, Any]) -> Facts:
    if "refused_patch" in p:
        yield Signal.PLAN_VALIDATED, {"outcome": "refused"}
        return
    yield Signal.PLAN_VALIDATED, {"outcome": "accepted"}
    if p.get("base_version") is not None:
        yield Signal.REPLAN, _NONE


def _validated(p: Mapping[str, Any]) -> Facts:
    if p.get("runtime_decision") != "rejected":
        return
    code = str(p.get("code") or "UNKNOWN")
    yield Signal.REFUSED_SIGNAL, {"code": code}
    if code.startswith("PLAN_"):
        yield Signal.PLAN_VALIDATED, {"outcome": "refused"}
        if "CYCLE" in str(p.get("message") or ""):
            yield Signal.CYCLE_BLOCKED, _NONE


def _tool(p: Mapping[str, Any]) -> Facts:
    obs = p.get("observation") or {}
    status = str(obs.get("status") or "UNKNOWN")
    code = obs.get("error_code")
    yield Signal.TOOL_CALL, {"tool": str(obs.get("action") or ""), "status": status}
    if p.get("runtime_action") == "REPLAY_SUCCESS" or p.get("idempotency_status") == "REPLAYED":
        yield Signal.TOOL_DUPLICATE, _NONE
    if code == ErrorCode.TIMEOUT:
        yield Signal.TOOL_TIMEOUT, _NONE
    elif code == ErrorCode.CIRCUIT_OPEN:
        yield Signal.BREAKER_OPEN, _NONE
    if status == OutcomeStatus.PENDING_VERIFICATION:
        yield Signal.UNKNOWN_OUTCOME, _NONE
    if int(p.get("attempts") or 0) > 1:
        yield Signal.TOOL_RETRIED, {"outcome": "success" if status == OutcomeStatus.SUCCESS else "failure"}


def _verification(p: Mapping[str, Any]) -> Facts:
    yield Signal.VERIFICATION, {"outcome": str(p.get("outcome") or "UNKNOWN")}
    checks = p.get("checks")
    for check in checks if isinstance(checks, list) else ():
        if isinstance(check, dict) and check.get("name") == "claims_have_evidence" and check.get("verdict") == "FAIL":
            yield Signal.CLAIM_WITHOUT_EVIDENCE, _NONE


def _item(p: Mapping[str, Any]) -> Facts:
    yield Signal.WORK_ITEM_ENDED, {"outcome": str(p.get("outcome") or "UNKNOWN")}
    if p.get("error") == "NO_PROGRESS":
        yield Signal.NO_PROGRESS_STOP, _NONE


def _termination(p: Mapping[str, Any]) -> Facts:
    if p.get("decision") == "DEGRADE":
        yield Signal.DEGRADED, _NONE
    if p.get("reason") == "NO_PROGRESS" and p.get("decision") != "CONTINUE":
        yield Signal.NO_PROGRESS_STOP, _NONE


def _exited(p: Mapping[str, Any]) -> Facts:
    status = str(p.get("status") or "")
    if status in ("COMPLETED", "PARTIALLY_COMPLETED", "FAILED", "CANCELLED"):
        yield Signal.RUN_ENDED, {"status": status}


def _budget(p: Mapping[str, Any]) -> Facts:
    yield Signal.BUDGET_EXHAUSTED, {"dimension": str(p.get("dimension") or "")}
    yield Signal.RUN_ENDED, {"status": "FAILED"}  # a budget ending has no run_exited


def _resumed(p: Mapping[str, Any]) -> Facts:
    yield Signal.RESUME, {"from_status": str(p.get("from_status") or "")}


def _one(signal: Signal) -> Any:
    def read(_: Mapping[str, Any]) -> Facts:
        yield signal, _NONE

    return read


_READERS = {
    EventType.RUN_STARTED: _one(Signal.RUN_STARTED),
    EventType.PLAN_RECORDED: _plan,
    EventType.RUNTIME_VALIDATED: _validated,
    EventType.TOOL_ATTEMPTED: _tool,
    EventType.VERIFICATION_RECORDED: _verification,
    EventType.WORK_ITEM_ENDED: _item,
    EventType.TERMINATION_RECORDED: _termination,
    EventType.HANDOFF_RECORDED: _one(Signal.HANDOFF),
    EventType.RUN_EXITED: _exited,
    EventType.BUDGET_EXHAUSTED: _budget,
    EventType.RUN_RESUMED: _resumed,
    EventType.ILLEGAL_TRANSITION: _one(Signal.ILLEGAL_TRANSITION),
    EventType.STEP_CRASHED: _one(Signal.STEP_CRASHED),
}
