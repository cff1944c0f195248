"""The checks a resume makes before it moves a run: that the run may resume, that its snapshot and
artifacts are what was stored, and what became of the side effects left in flight.

None of these moves a status: ``transition.resume`` does, with what they return.
"""

from __future__ import annotations

from stateward.core.canonical import sha256_hex
from stateward.core.errors import ErrorCode, RunError
from stateward.core.journal import SideEffectStatus
from stateward.core.state import RunState
from stateward.core.status import RunStatus
from stateward.runtime.agent import Agent
from stateward.store.base import Store
from stateward.tools.gateway import ToolGateway

IN_FLIGHT = (SideEffectStatus.STARTED.value, SideEffectStatus.UNKNOWN_OUTCOME.value)


def check_resumable(state: RunState) -> None:
    """Only a PAUSED run, or a RUNNING one whose process died, resumes: NOT_RESUMABLE otherwise."""
    if state.status not in (RunStatus.PAUSED, RunStatus.RUNNING):
        raise RunError(
            f"run {state.run_id} is {state.status.value}; only a PAUSED or abandoned RUNNING run resumes",
            code=ErrorCode.NOT_RESUMABLE,
            details={"run_id": state.run_id, "status": state.status.value},
        )


def verify_checkpoint(store: Store, state: RunState, seq: int) -> None:
    """CHECKPOINT_INVALID if the snapshot at ``seq`` disagrees with its checkpoint; ARTIFACT_CORRUPTED if an
    artifact no longer matches its hash (a resume never continues from damaged state)."""
    checkpoint = store.latest_checkpoint(state.run_id)
    if checkpoint is not None and checkpoint.seq == seq and checkpoint.state != state:
        raise RunError(f"run {state.run_id}: snapshot and checkpoint {seq} disagree", code=ErrorCode.CHECKPOINT_INVALID)
    for art in store.list_artifacts(state.run_id):
        if sha256_hex(art.content) != art.sha256:
            raise RunError(
                f"artifact {art.ref} of run {state.run_id} does not match its hash",
                code=ErrorCode.ARTIFACT_CORRUPTED,
                details={"artifact": art.ref},
            )


def reconcile_in_flight(store: Store, agent: Agent, state: RunState, fencing_token: int) -> list[dict[str, str]]:
    """Each side effect left STARTED or UNKNOWN_OUTCOME, looked up through the gateway's idempotency lookup."""
    gateway = ToolGateway(agent.tools, store)
    return [
        {
            "idempotency_key": rec.idempotency_key,
            "tool": rec.tool,
            "was": rec.status,
            "lookup": gateway.reconcile(rec, fencing_token).value,
        }
        for rec in store.side_effects_of(state.run_id, IN_FLIGHT)
    ]
