"""A resume is authorized before it takes the run's lease: who may resume, checked against the run itself."""

from __future__ import annotations

from typing import Any

import pytest

from stateward import RunError, RunStatus, Runtime
from stateward.core.events import EventType
from stateward.models.base import ModelRequest
from stateward.models.scripted import ScriptedModel
from stateward_demos import blog_fixtures as fx
from stateward_demos.blog import build_agent


def _paused_run(runtime: Runtime) -> str:
    calls = {"n": 0}

    def policy(req: ModelRequest) -> dict[str, Any]:
        calls["n"] += 1
        if calls["n"] == 2:
            for row in runtime.store.list_runs():
                runtime.store.set_control(row.run_id, "pause")
        return fx.react_policy(req)

    state = runtime.start(build_agent("react", max_steps=12, model=ScriptedModel(policy)), fx.GOAL)
    assert state.status is RunStatus.PAUSED
    return state.run_id


def test_a_principal_without_an_operator_role_cannot_resume_and_nothing_changes(runtime: Runtime) -> None:
    run_id = _paused_run(runtime)
    before = runtime.store.read_events(run_id)
    with pytest.raises(RunError) as refused:
        runtime.resume(run_id, by="vera", tenant="default", roles=frozenset({"viewer", "approver"}))
    assert refused.value.code == "RESUME_NOT_ALLOWED"
    assert runtime.get(run_id).status is RunStatus.PAUSED
    assert runtime.store.read_events(run_id) == before
    assert runtime.store.lease_of(run_id) is None


def test_another_tenant_s_principal_sees_the_run_as_missing(runtime: Runtime) -> None:
    run_id = _paused_run(runtime)
    with pytest.raises(RunError) as refused:
        runtime.resume(run_id, by="mallory", tenant="other", roles=frozenset({"admin"}))
    assert refused.value.code == "RUN_NOT_FOUND"
    assert runtime.get(run_id).status is RunStatus.PAUSED


def test_an_operator_of_the_run_s_tenant_resumes_and_the_event_names_who_and_with_which_roles(
    runtime: Runtime,
) -> None:
    run_id = _paused_run(runtime)
    resumed = runtime.resume(run_id, by="olga", tenant="default", roles=frozenset({"operator"}))
    assert resumed.status is RunStatus.WAITING_FOR_USER
    event = next(e for e in runtime.store.read_events(run_id) if e.type is EventType.RUN_RESUMED)
    assert (event.payload["by"], event.payload["roles"]) == ("olga", ["operator"])
