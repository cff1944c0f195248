"""Did the injected fault really happen? Each source fault's trace in a run's own records.

A campaign cell counts a run only when the run's events show the fault it was meant to meet (a timeout
that recovered, a refused permission, a repeated search ended as no progress, ...). A fault injected
into a run that never met it - a breaker some earlier run left open, a kill the run finished before -
proves nothing about the protection and is reported as unobserved.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from stateward.core.contract import OutcomeStatus
from stateward.core.events import Event, EventType
from stateward.core.state import RunState
from stateward.core.status import RunStatus

Observer = Callable[[RunState, list[Event]], bool]
# The failures a remote side causes (a retry may help), as opposed to refusals of the call itself.
_FAILURES = frozenset({"TIMEOUT", "SERVICE_UNAVAILABLE", "EXECUTION_ERROR", "UNAVAILABLE", "TRANSIENT"})


def _attempts(events: list[Event]) -> list[dict[str, Any]]:
    return [e.payload for e in events if e.type is EventType.TOOL_ATTEMPTED]


def _observed(payload: dict[str, Any]) -> dict[str, Any]:
    obs = payload.get("observation")
    return obs if isinstance(obs, dict) else {}


def _rejected(events: list[Event], code: str) -> bool:
    return any(
        e.type is EventType.RUNTIME_VALIDATED
        and e.payload.get("runtime_decision") == "rejected"
        and e.payload.get("code") == code
        for e in events
    )


def timeout_then_recovery(state: RunState, events: list[Event]) -> bool:
    """A call that timed out and still succeeded (retried, or reconciled through its lookup)."""
    return any(
        _observed(p).get("error_code") == "TIMEOUT" and _observed(p).get("status") == OutcomeStatus.SUCCESS
        for p in _attempts(events)
    )


def three_failures(state: RunState, events: list[Event]) -> bool:
    """At least three failed attempts of one tool, then the run handed the work to a person (a handoff
    package, or a wait for a person's input recorded after the third failure)."""
    failed: dict[str, int] = {}
    for e in events:
        if e.type is EventType.TOOL_ATTEMPTED:
            obs = _observed(e.payload)
            if obs.get("status") != OutcomeStatus.SUCCESS and obs.get("error_code") in _FAILURES:
                tool = str(obs.get("action"))
                failed[tool] = failed.get(tool, 0) + int(e.payload.get("attempts") or 1)
        elif _to_a_person(e) and any(n >= 3 for n in failed.values()):
            return True
    return False


def _to_a_person(event: Event) -> bool:
    """A handoff package, or a wait for a person's input (not an approval of some action)."""
    if event.type is EventType.HANDOFF_RECORDED:
        return True
    return event.type is EventType.PENDING_RECORDED and event.payload.get("kind") in ("input", "handoff")


def permission_denied(state: RunState, events: list[Event]) -> bool:
    """The gateway refused a call for a permission the agent does not hold."""
    return any(_observed(p).get("error_code") == "PERMISSION_DENIED" for p in _attempts(events))


def plan_cycle(state: RunState, events: list[Event]) -> bool:
    """A proposed plan was refused for a dependency cycle, and a plan the validator accepted ran."""
    refused = any(
        e.type is EventType.RUNTIME_VALIDATED
        and e.payload.get("code") == "PLAN_REJECT"
        and "CYCLE" in str(e.payload.get("message"))
        for e in events
    )
    return refused and any(e.type is EventType.PLAN_RECORDED for e in events)


def same_search(state: RunState, events: list[Event]) -> bool:
    """The same search was repeated and stopped as making no progress: the run (a ReAct loop), or the work
    item whose local loop repeated it (a plan run)."""
    return state.terminal_reason == "no_progress" or any(
        e.type is EventType.WORK_ITEM_ENDED and e.payload.get("error") == "NO_PROGRESS" for e in events
    )


def missing_evidence(state: RunState, events: list[Event]) -> bool:
    """A verification found a claim without evidence."""
    return any(
        e.type is EventType.VERIFICATION_RECORDED
        and any(
            isinstance(c, dict) and c.get("name") == "claims_have_evidence" and c.get("verdict") == "FAIL"
            for c in e.payload.get("checks") or ()
        )
        for e in events
    )


def budget_exhausted(state: RunState, events: list[Event]) -> bool:
    """The run ran out of budget mid-run and delivered what it had (or stopped on the budget)."""
    return state.status is RunStatus.PARTIALLY_COMPLETED or any(e.type is EventType.BUDGET_EXHAUSTED for e in events)


def prompt_injection(state: RunState, events: list[Event]) -> bool:
    """A call a document's planted instruction asked for was refused (not visible to the step)."""
    return _rejected(events, "action_not_visible")


def conflicting_sources(state: RunState, events: list[Event]) -> bool:
    """Two authoritative sources disagreed and the run handed the question to a person."""
    return any(e.type is EventType.HANDOFF_RECORDED and "authorities-agree" in json.dumps(e.payload) for e in events)


def high_risk_low_confidence(state: RunState, events: list[Event]) -> bool:
    """A high-risk conclusion at low confidence was refused as the run's result: by the finish policy, or by
    verification handing the deliverable to a person."""
    return _rejected(events, "high_risk_low_confidence") or any(
        e.type is EventType.VERIFICATION_RECORDED and e.payload.get("reason_code") == "HIGH_RISK_LOW_CONFIDENCE"
        for e in events
    )


def paused_and_resumed(state: RunState, events: list[Event]) -> bool:
    """The run was paused and resumed from the pause."""
    return any(e.type is EventType.RUN_RESUMED and e.payload.get("from_status") == "PAUSED" for e in events)


def two_lease_holders(state: RunState, events: list[Event]) -> bool:
    """Events of the run were written under two leases (the run changed hands mid-run)."""
    return len({e.lease_version for e in events if e.lease_version}) >= 2
