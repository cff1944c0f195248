"""Expired requests: what happens is the agent's declared policy (fail, cancel, or escalate)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stateward.core.errors import RunError
from stateward.core.events import EventType, NewEvent
from stateward.core.status import RunStatus, TransitionKind
from stateward.runtime.driver import cancel_write, ended, exit_event, transition_event
from stateward.store.records import RequestAnswer, StepWrite

if TYPE_CHECKING:
    from stateward.runtime.runtime import Runtime


def expire_due(runtime: Runtime) -> list[str]:
    """Apply each expired request's policy; returns the ids of the requests that expired."""
    store, now = runtime.store, runtime.clock()
    expired: list[str] = []
    for record in store.list_requests(None, open_only=True):
        request = record.request
        if request.expires_at is None or now < request.expires_at:
            continue
        state, seq = store.load_run_at(record.run_id)
        if state.status is not RunStatus.WAITING_FOR_USER or state.pending != request:
            continue
        agent = runtime.agent_for(state)
        closed = RequestAnswer(request_id=request.request_id, verdict="closed", text="expired", by="stateward", at=now)
        note = NewEvent(
            type=EventType.REQUEST_ANSWERED,
            payload={"request_id": request.request_id, "verdict": "expired", "policy": agent.on_request_expiry},
        )
        if agent.on_request_expiry == "cancel":
            write = cancel_write(state, by="stateward:expiry", now=now)
            write = write.model_copy(update={"events": [note, *write.events]})
        elif agent.on_request_expiry == "escalate":
            escalated = request.model_copy(
                update={
                    "request_id": f"approval_{state.requests_issued + 1:03d}",
                    "approver_role": agent.escalation_role,
                    "created_at": now,
                    "expires_at": None if agent.request_ttl is None else now + agent.request_ttl,
                }
            )
            new = state.model_copy(update={"pending": escalated, "requests_issued": state.requests_issued + 1})
            write = StepWrite(
                state=new,
                close_request=closed,
                open_request=escalated,
                events=[
                    note,
                    NewEvent(
                        type=EventType.PENDING_RECORDED,
                        payload={
                            "pending_request_id": escalated.request_id,
                            "escalated_from": request.request_id,
                            "approver_role": agent.escalation_role,
                        },
                    ),
                ],
            )
        else:
            new = ended(state, TransitionKind.FAIL, "request_expired").model_copy(update={"pending": None})
            write = StepWrite(
                state=new,
                close_request=closed,
                checkpoint="terminal",
                events=[note, transition_event(state, new), exit_event(new)],
            )
        try:
            store.commit_step(record.run_id, seq, write)
        except RunError as exc:
            if exc.code in {"CONCURRENT_UPDATE", "LEASE_HELD"}:
                continue  # answered or moved on meanwhile: the next sweep looks again
            raise
        expired.append(request.request_id)
    return expired
