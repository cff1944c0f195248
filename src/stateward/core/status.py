"""Run statuses and the one table of legal moves between them."""

from __future__ import annotations

from enum import StrEnum

from stateward.core.errors import IllegalTransitionError


class RunStatus(StrEnum):
    """A run's status. Only the Runtime changes it, through the one transition table (next_status)."""

    RUNNING = "RUNNING"
    WAITING_FOR_USER = "WAITING_FOR_USER"
    PAUSING = "PAUSING"
    PAUSED = "PAUSED"
    COMPLETED = "COMPLETED"
    PARTIALLY_COMPLETED = "PARTIALLY_COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def is_terminal(self) -> bool:
        """True for statuses a run never leaves (completed, failed, cancelled, ...)."""
        return self in TERMINAL_STATUSES

    @property
    def is_suspended(self) -> bool:
        """True for statuses in which the run is stopped until someone resumes it: a wait for an answer, or a pause."""
        return self in SUSPENDED_STATUSES


TERMINAL_STATUSES = frozenset(
    {RunStatus.COMPLETED, RunStatus.PARTIALLY_COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED}
)
SUSPENDED_STATUSES = frozenset({RunStatus.WAITING_FOR_USER, RunStatus.PAUSED})


class TransitionKind(StrEnum):
    """Why a status changes. The first four come from decisions, the rest from outside the loop."""

    CONTINUE = "CONTINUE"
    SUSPEND = "SUSPEND"
    COMPLETE = "COMPLETE"
    PARTIAL = "PARTIAL"
    FAIL = "FAIL"
    PAUSE = "PAUSE"
    PAUSED = "PAUSED"
    RESUME = "RESUME"
    CANCEL = "CANCEL"


_S = RunStatus
_K = TransitionKind
_NON_TERMINAL = (_S.RUNNING, _S.WAITING_FOR_USER, _S.PAUSING, _S.PAUSED)

TRANSITIONS: dict[tuple[RunStatus, TransitionKind], RunStatus] = {
    (_S.RUNNING, _K.CONTINUE): _S.RUNNING,
    (_S.RUNNING, _K.SUSPEND): _S.WAITING_FOR_USER,
    (_S.RUNNING, _K.COMPLETE): _S.COMPLETED,
    (_S.RUNNING, _K.PARTIAL): _S.PARTIALLY_COMPLETED,
    (_S.RUNNING, _K.FAIL): _S.FAILED,
    (_S.RUNNING, _K.PAUSE): _S.PAUSING,
    # While PAUSING the step in flight may still finish, which can end or suspend the run.
    (_S.PAUSING, _K.CONTINUE): _S.PAUSING,
    (_S.PAUSING, _K.PAUSED): _S.PAUSED,
    (_S.PAUSING, _K.SUSPEND): _S.WAITING_FOR_USER,
    (_S.PAUSING, _K.COMPLETE): _S.COMPLETED,
    (_S.PAUSING, _K.PARTIAL): _S.PARTIALLY_COMPLETED,
    (_S.PAUSING, _K.FAIL): _S.FAILED,
    (_S.WAITING_FOR_USER, _K.RESUME): _S.RUNNING,
    # An expired request can fail or hand the run off without it ever running again.
    (_S.WAITING_FOR_USER, _K.FAIL): _S.FAILED,
    (_S.PAUSED, _K.RESUME): _S.RUNNING,
    **{(status, _K.CANCEL): _S.CANCELLED for status in _NON_TERMINAL},
}


def next_status(current: RunStatus, kind: TransitionKind) -> RunStatus:
    """The status after ``kind`` from ``current``, or IllegalTransitionError."""
    try:
        return TRANSITIONS[(current, kind)]
    except KeyError:
        raise IllegalTransitionError(
            f"no transition {kind.value} from {current.value}",
            details={"from": current.value, "kind": kind.value},
        ) from None
