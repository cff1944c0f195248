"""What a request page explains beyond the exact action: who asked (agent and version, the run's goal, the
work item or node in flight), the evidence the decision saw (the observations recorded before the request,
offloaded values resolved — the content is what the gateway kept after its truncation and redaction), what
each answer does next, and who else may answer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stateward.api.backend import RunBackend
from stateward.api.web.dag import plan_of
from stateward.core.events import Event, EventType
from stateward.core.state import PendingRequest, RequestKind, RunState
from stateward.planning.patch import WorkItemState

EVIDENCE_EVENTS = 8  # the most recent observations shown as the request's evidence
SCAN_EVENTS = 400  # how far back before the request the page looks for them
_OBSERVED = (EventType.TOOL_ATTEMPTED, EventType.ACTION_REFUSED)


@dataclass(frozen=True)
class Explanation:
    """The context of one request, for its page."""

    work_item: str | None  # the plan item in flight when the run asked, if a plan run
    node: str | None  # the workflow node, if a workflow run
    evidence: tuple[Event, ...]  # observations before the request, content resolved
    on_approve: str
    on_reject: str
    answerers: str


def consequences(req: PendingRequest) -> tuple[str, str]:
    """What the two answers do next, phrased for the kind of request."""
    action = req.guarded_action
    if req.kind is RequestKind.HANDOFF:
        return "The option you pick is recorded as your decision and the run continues with it.", ""
    if action is not None:
        once = "once" if req.approval_scope.value == "once" else "for the rest of the run"
        return (
            f"The run resumes and the gateway runs {action.tool} with exactly these arguments, {once}; "
            "any other call still needs its own approval.",
            f"{action.tool} is not run; the run resumes and is told you refused, so its controller proposes "
            "something else or ends.",
        )
    return (
        "The run resumes from where it stopped, with your answer recorded.",
        "The run resumes with your refusal recorded; its controller decides what follows.",
    )


def explain(runtime: RunBackend, state: RunState, req: PendingRequest, tenant: str) -> Explanation:
    """Read the events up to the request once: the item or node in flight and the observations."""
    last = runtime.store.last_seq(state.run_id)
    events = runtime.events(state.run_id, max(0, last - SCAN_EVENTS), limit=SCAN_EVENTS, tenant=tenant, content=True)
    cut = next(
        (i for i, e in enumerate(events) if e.type is EventType.PENDING_RECORDED and _names(e, req.request_id)),
        len(events),
    )
    before = events[:cut]
    work_item = _item_in_question(state, before)
    node = next((_str(e.payload.get("node")) for e in reversed(before) if "node" in e.payload), None)
    evidence = tuple(e for e in before if e.type in _OBSERVED)[-EVIDENCE_EVENTS:]
    approve, reject = consequences(req)
    role = req.approver_role
    answerers = (
        f"any key of tenant {state.tenant} holding the role {role} (or admin)"
        if role
        else f"any key of tenant {state.tenant} holding the approver role"
    )
    return Explanation(work_item, node, evidence, approve, reject, answerers)


def _names(event: Event, request_id: str) -> bool:
    return event.payload.get("pending_request_id") == request_id or event.payload.get("request_id") == request_id


def _item_in_question(state: RunState, before: list[Event]) -> str | None:
    """The plan item waiting for this approval, else the one started and not yet ended when the run asked."""
    plan = plan_of(state.memo)
    if plan is not None:
        waiting = [w for w, s in plan[1].items() if s is WorkItemState.WAITING_FOR_APPROVAL]
        if len(waiting) == 1:
            return waiting[0]
    open_items: list[str] = []
    for e in before:
        wid = _str(e.payload.get("work_item_id"))
        if wid is None:
            continue
        if e.type is EventType.WORK_ITEM_STARTED:
            open_items.append(wid)
        elif e.type is EventType.WORK_ITEM_ENDED and wid in open_items:
            open_items.remove(wid)
    return open_items[-1] if open_items else None


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


__all__ = ["Explanation", "consequences", "explain"]
