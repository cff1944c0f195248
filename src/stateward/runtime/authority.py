"""Who may resume a run: the check the source makes before a resume takes the run's lease
(``authorize_resume(principal, checkpoint)``), so a refused resume changes nothing."""

from __future__ import annotations

from stateward.core.errors import ErrorCode, RunError, RunNotFoundError
from stateward.core.state import RunState

# The service's roles (stateward.api.identity.Role values) that carry the right to resume a run.
RESUME_ROLES: frozenset[str] = frozenset({"operator", "admin"})


def authorize_resume(state: RunState, *, tenant: str | None, roles: frozenset[str] | None) -> None:
    """Refuse a resume by an authenticated principal without the right to it; ``None`` is the operator's path.

    Another tenant's run is reported exactly like a missing one (RUN_NOT_FOUND); a principal of the run's
    tenant without an operator or admin role is refused as RESUME_NOT_ALLOWED.
    """
    if tenant is not None and tenant != state.tenant:
        raise RunNotFoundError(f"no run {state.run_id!r}", details={"run_id": state.run_id})
    if roles is not None and not roles & RESUME_ROLES:
        raise RunError(
            f"resuming run {state.run_id} needs one of the roles {sorted(RESUME_ROLES)}",
            code=ErrorCode.RESUME_NOT_ALLOWED,
            details={"run_id": state.run_id, "roles": sorted(roles)},
        )
