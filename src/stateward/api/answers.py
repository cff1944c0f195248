"""What every surface of the service (JSON routes, the web inbox) shares about answering a request: whose
runs a caller sees, who may answer what, and recording an answer as the caller's principal."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stateward.api.backend import RunBackend
from stateward.api.identity import AuthError, Principal, Role, require
from stateward.api.schemas import AnswerOutcome
from stateward.core.errors import ErrorCode, RequestRefusedError, RunNotFoundError, UserError
from stateward.core.state import RunState
from stateward.runtime.continuation import AnswerResult
from stateward.store.base import Store
from stateward.store.keys import KeyStore


def key_store(source: RunBackend | Store) -> KeyStore:
    """The keys of ``source``: a store (both stores keep keys, from schema 4), or a runtime on one."""
    store: object = source if isinstance(source, KeyStore) else getattr(source, "store", None)
    if not isinstance(store, KeyStore):
        raise UserError(f"{type(store).__name__} keeps no API keys", code=ErrorCode.STORE_UNSUPPORTED)
    return store


def visible_run(runtime: RunBackend, run_id: str, tenant: str) -> RunState:
    """The run if it is the tenant's; otherwise the very error an unknown id gets."""
    state = runtime.get(run_id)
    if state.tenant != tenant:
        raise RunNotFoundError(f"no run {run_id!r}", details={"run_id": run_id})
    return state


def may_answer(principal: Principal, approver_role: str | None) -> bool:
    """An approver answers requests needing no role or a role the key holds; admin answers any."""
    if Role.ADMIN.value in principal.roles:
        return True
    return principal.has(Role.APPROVER) and (approver_role is None or approver_role in principal.roles)


@dataclass(frozen=True)
class Asked:
    """One answer as the caller sent it: who is the key's principal, never a field of the body."""

    run_id: str
    request_id: str
    verdict: str
    who: Principal
    text: str | None
    digest: str | None


def answerable_role(runtime: RunBackend, a: Asked) -> str | None:
    """The request's approver role, after checking the run is the caller's and the caller may answer it."""
    require(a.who, Role.APPROVER)
    visible_run(runtime, a.run_id, a.who.tenant)
    record = runtime.store.get_request(a.run_id, a.request_id)
    if record is None:
        raise RequestRefusedError(
            f"run {a.run_id} has no request {a.request_id!r}",
            code=ErrorCode.UNKNOWN_REQUEST,
            details={"run_id": a.run_id, "request_id": a.request_id},
        )
    role = record.request.approver_role
    if not may_answer(a.who, role):
        raise AuthError(f"{a.request_id} needs an answerer with role {role!r}", code=ErrorCode.ROLE_NOT_ALLOWED)
    return role


def record_answer(runtime: RunBackend, a: Asked, role: str | None) -> AnswerOutcome:
    """Record the answer as the caller's (never driving the run: workers do); the outcome as the API returns it."""
    # An admin vouches for any role; everyone else only for the roles their key holds.
    roles = a.who.roles | ({role} if role is not None and Role.ADMIN.value in a.who.roles else set())
    common: dict[str, Any] = {"by": a.who.subject, "tenant": a.who.tenant, "roles": frozenset(roles), "drive": False}
    result: AnswerResult
    if a.verdict == "approved":
        result = runtime.approve(a.run_id, a.request_id, comment=a.text, digest=a.digest, **common)
    elif a.verdict == "rejected":
        result = runtime.reject(a.run_id, a.request_id, comment=a.text, digest=a.digest, **common)
    else:
        result = runtime.reply(a.run_id, a.request_id, text=a.text or "", **common)
    return AnswerOutcome(
        run_id=a.run_id,
        request_id=a.request_id,
        verdict=result.answer.verdict,
        by=result.answer.by,
        at=result.answer.at,
        text=result.answer.text,
        already_answered=result.already_answered,
        status=result.state.status,
    )
