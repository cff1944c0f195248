"""Golden event logs of the demos: a change in behaviour shows up here as a diff of the recorded events.

Each demo is run as a user would (in-process, SQLite, scripted models) and its event log reduced to
what behaviour is made of: event types in order, transitions, decisions, tool outcomes, requests,
answers and artifacts (ids, times and run-specific hashes left out). ``STATEWARD_UPDATE_GOLDEN=1``
rewrites the files after an intended change; review the diff like code.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from stateward import Runtime
from stateward.core.events import Event
from stateward.observability.payloads import with_defaults
from stateward.testing import temporary_runtime
from stateward_demos import blog_fixtures as fx
from stateward_demos.blog import MODES, build_agent
from stateward_demos.payment.agent import build_agent as build_payment_agent
from stateward_demos.payment.agent import goal as payment_goal
from stateward_demos.refund import run_refund_scenarios

HERE = Path(__file__).parent
UPDATE = os.environ.get("STATEWARD_UPDATE_GOLDEN") == "1"

# Per event type, the payload paths that carry behaviour (dotted); every event keeps its type.
KEEP: dict[str, tuple[str, ...]] = {
    "state_transition": ("state_before", "state_after", "reason"),
    "signal_received": ("signal_source", "step", "model_calls"),
    "runtime_validated": ("runtime_decision", "decision_type", "transition", "code"),
    "tool_attempted": (
        "observation.action",
        "observation.args",
        "observation.status",
        "observation.error_code",
        "runtime_action",
        "handler_calls",
    ),
    "action_refused": ("observation.action", "observation.status"),
    "pending_recorded": ("pending_request_id", "kind", "asked_by", "guarded_action.tool", "guarded_action.args"),
    "artifact_written": ("name", "version", "sha256"),
    "request_answered": ("request_id", "verdict"),
    "run_exited": ("status", "terminal_reason"),
    "budget_exhausted": ("dimension",),
    "work_item_started": ("work_item_id",),
    "work_item_ended": ("work_item_id", "state"),
    "verification_recorded": ("artifact", "outcome"),
    "plan_recorded": ("plan_version",),
}


def _pick(payload: dict[str, Any], path: str) -> Any:
    value: Any = payload
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


# Artifacts whose content names the run or the moment (a delivery receipt): their hash is not behaviour.
RUN_SPECIFIC_ARTIFACTS = frozenset({"delivery-receipt"})


def reduce(events: list[Event]) -> list[dict[str, Any]]:
    out = []
    for event in events:
        payload = with_defaults(event.type, event.payload)  # behaviour, not how compactly it is stored
        kept = {p: _pick(payload, p) for p in KEEP.get(event.type.value, ())}
        if kept.get("name") in RUN_SPECIFIC_ARTIFACTS:
            kept.pop("sha256", None)
        out.append({"type": event.type.value, **{k: v for k, v in kept.items() if v is not None}})
    return out


def check(name: str, actual: Any) -> None:
    path = HERE / f"{name}.json"
    text = json.dumps(actual, indent=1, ensure_ascii=False, sort_keys=True) + "\n"
    if UPDATE or not path.exists():
        if not UPDATE:
            pytest.fail(f"no golden file {path.name}; run with STATEWARD_UPDATE_GOLDEN=1 and review it")
        path.write_text(text)
    assert json.loads(text) == json.loads(path.read_text()), f"{name} changed; see the diff above"


@pytest.fixture
def runtime(tmp_path: Path) -> Runtime:
    rt = temporary_runtime(tmp_path)
    yield rt
    rt.close()


@pytest.mark.parametrize("mode", MODES)
def test_the_blog_run_rejected_then_approved(runtime: Runtime, mode: str) -> None:
    state = runtime.start(build_agent(mode), fx.GOAL)
    state = runtime.reject(state.run_id, "approval_001", by="reviewer", comment="add the circuit breaker").state
    assert state.pending is not None
    runtime.approve(state.run_id, state.pending.request_id, by="reviewer")
    check(f"blog_{mode}", reduce(runtime.store.read_events(state.run_id)))


def test_the_payment_migration_run_approved(runtime: Runtime) -> None:
    state = runtime.start(build_payment_agent(delivery_log={}), payment_goal().objective)
    assert state.pending is not None
    runtime.approve(state.run_id, state.pending.request_id, by="reviewer")
    check("payment_migration", reduce(runtime.store.read_events(state.run_id)))


def test_the_refund_scenarios() -> None:
    check("refund", run_refund_scenarios())
