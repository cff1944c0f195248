"""Inspection from Python: the Runtime lists runs, requests, events and artifacts as typed, bounded pages."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from stateward import (
    ArtifactRecord,
    Event,
    RequestPage,
    RunError,
    RunPage,
    RunStatus,
    Runtime,
    UserError,
)
from stateward_demos.blog import build_agent
from stateward_demos.blog_fixtures import GOAL


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[Runtime]:
    rt = Runtime.open(str(tmp_path / "runs.db"))
    yield rt
    rt.close()


def _waiting(runtime: Runtime, tenant: str) -> str:
    state = runtime.start(build_agent("react"), GOAL, tenant=tenant)
    assert state.status is RunStatus.WAITING_FOR_USER
    return state.run_id


def test_runs_are_listed_by_filter_a_typed_page_at_a_time(runtime: Runtime) -> None:
    acme = [_waiting(runtime, "acme") for _ in range(3)]
    globex = _waiting(runtime, "globex")
    runtime.approve(acme[0], "approval_001", by="alice")

    page = runtime.list_runs(tenant="acme", limit=2)
    assert isinstance(page, RunPage) and len(page.items) == 2 and page.next_cursor is not None
    rest = runtime.list_runs(tenant="acme", limit=2, cursor=page.next_cursor)
    assert [r.run_id for r in page.items + rest.items] == acme[::-1] and rest.next_cursor is None
    waiting = runtime.list_runs(status=RunStatus.WAITING_FOR_USER, agent="blog")
    assert {r.run_id for r in waiting.items} == {acme[1], acme[2], globex}
    assert [r.run_id for r in runtime.list_runs(status="COMPLETED").items] == [acme[0]]
    assert runtime.list_runs(agent="payer").items == []


def test_open_requests_are_listed_by_tenant_and_run(runtime: Runtime) -> None:
    first, second = _waiting(runtime, "acme"), _waiting(runtime, "globex")
    page = runtime.list_requests()
    assert isinstance(page, RequestPage)
    assert sorted((r.run_id, r.request.request_id, r.tenant) for r in page.items) == sorted(
        [(first, "approval_001", "acme"), (second, "approval_001", "globex")]
    )
    assert [r.run_id for r in runtime.list_requests(tenant="globex").items] == [second]
    runtime.approve(first, "approval_001", by="alice")
    assert runtime.list_requests(run_id=first).items == []
    answered = runtime.list_requests(run_id=first, open_only=False).items
    assert [(r.request.request_id, r.answer is not None and r.answer.by) for r in answered] == [
        ("approval_001", "alice")
    ]


@pytest.mark.parametrize(
    "read",
    [
        lambda rt, run_id: rt.events(run_id),
        lambda rt, run_id: rt.artifacts(run_id),
        lambda rt, run_id: rt.artifact(run_id, "brief"),
        lambda rt, run_id: rt.list_requests(run_id=run_id),
    ],
    ids=["events", "artifacts", "artifact", "requests"],
)
def test_reading_an_unknown_run_is_run_not_found(runtime: Runtime, read: Callable[[Runtime, str], object]) -> None:
    _waiting(runtime, "acme")
    with pytest.raises(RunError) as unknown:
        read(runtime, "run_nope")
    assert unknown.value.code == "RUN_NOT_FOUND"


def test_a_run_is_read_only_by_its_own_tenant_when_one_is_named(runtime: Runtime) -> None:
    run_id = _waiting(runtime, "acme")
    assert runtime.events(run_id, tenant="acme")
    errors: list[tuple[str, str]] = []
    for call in (
        lambda: runtime.events(run_id, tenant="globex"),
        lambda: runtime.artifacts(run_id, tenant="globex"),
        lambda: runtime.artifact(run_id, "brief", tenant="globex"),
        lambda: runtime.list_requests(run_id=run_id, tenant="globex"),
        lambda: runtime.events("run_nope", tenant="globex"),
    ):
        with pytest.raises(RunError) as err:
            call()
        errors.append((err.value.code, err.value.message.replace(run_id, "ID").replace("run_nope", "ID")))
    assert set(errors) == {("RUN_NOT_FOUND", "no run 'ID'")}


def test_events_continue_after_a_sequence_number(runtime: Runtime) -> None:
    run_id = _waiting(runtime, "acme")
    everything = runtime.events(run_id)
    assert all(isinstance(e, Event) for e in everything)
    assert [e.seq for e in everything] == list(range(1, len(everything) + 1))
    first = runtime.events(run_id, limit=3)
    rest = runtime.events(run_id, after=first[-1].seq)
    assert first + rest == everything
    assert runtime.events(run_id, after=everything[-1].seq) == []
    for bad, code in (({"after": -1}, "INVALID_CURSOR"), ({"limit": 0}, "INVALID_PAGE_SIZE")):
        with pytest.raises(UserError) as err:
            runtime.events(run_id, **bad)  # type: ignore[arg-type]
        assert err.value.code == code


def test_artifacts_are_typed_and_one_is_fetched_by_name_and_version(runtime: Runtime) -> None:
    run_id = _waiting(runtime, "acme")
    runtime.approve(run_id, "approval_001", by="alice")
    listed = runtime.artifacts(run_id)
    assert all(isinstance(a, ArtifactRecord) for a in listed)
    assert [a.ref for a in listed] == ["brief:v1", "draft:v1"]
    assert runtime.artifact(run_id, "draft") == listed[1]
    assert runtime.artifact(run_id, "brief", version=1) == listed[0]
    for name, version in (("brief", 2), ("nothing", None)):
        with pytest.raises(RunError) as err:
            runtime.artifact(run_id, name, version)
        assert err.value.code == "ARTIFACT_NOT_FOUND"
