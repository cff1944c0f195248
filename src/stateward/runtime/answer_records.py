"""What an answer to a request becomes in the run's state, as data: the ``Answer`` its controller reads
next, and the ``PersonOutcome`` a reconciliation hands the gateway to record. Nothing here moves a status:
``transition.resume_on_answer`` does, with these values.
"""

from __future__ import annotations

from stateward.core.state import Answer, AnswerVerdict, PendingRequest, PersonOutcome, Reconciles
from stateward.store.records import RequestAnswer


def remembered_answer(answer: RequestAnswer, pending: PendingRequest) -> Answer:
    """The answer as the run keeps it (``RunState.last_answer``): with the request's action, kind and the
    request it replaced, so the controller reads what was answered, not only how."""
    return Answer(
        request_id=answer.request_id,
        verdict=answer.verdict,
        text=answer.text,
        by=answer.by,
        at=answer.at,
        guarded_action=pending.guarded_action,
        replaces=pending.replaces,
        kind=pending.kind,
    )


def person_outcome(answer: RequestAnswer, target: Reconciles) -> PersonOutcome:
    """A person's word on a call whose outcome was unknown: approved means it happened, under the call's key."""
    return PersonOutcome(
        happened=answer.verdict is AnswerVerdict.APPROVED,
        by=answer.by,
        at=answer.at,
        comment=answer.text,
        request_id=answer.request_id,
        idempotency_key=target.idempotency_key,
        key_step=target.key_step,
        retry_spent=target.retry_spent,
    )
