"""Answers over HTTP record the key's principal and return at once; runs, events, streams and control."""

from __future__ import annotations

from typing import Any

from tests.api.conftest import Service

from stateward.core.events import EventType
from stateward.runtime.runtime import Runtime

APPROVE = "/v1/runs/{run}/requests/approval_001/approve"


def answered_events(service: Service, run: str) -> list[dict[str, Any]]:
    return [e.payload for e in service.runtime.events(run) if e.type is EventType.REQUEST_ANSWERED]


def test_an_approval_records_the_keys_principal_and_leaves_the_run_for_a_worker(service: Service) -> None:
    submitter = service.key("acme", "submitter", name="sam")
    approver = service.key("acme", "approver", "finance", name="alice")
    run = service.waiting_run(service.key("acme", "admin", name="root"))
    assert service.client.get(f"/v1/runs/{run}", headers=submitter).status_code == 200  # every role reads
    digest = service.client.get(f"/v1/runs/{run}", headers=approver).json()
    response = service.client.post(
        APPROVE.format(run=run),
        json={"comment": "ok", "digest": digest["pending"]["guarded_action"]["digest"]},
        headers=approver,
    )
    assert response.status_code == 200, response.text
    outcome = response.json()
    key_id = approver["Authorization"].split("_", 1)[1].split(".")[0]
    assert outcome["by"] == f"alice [{key_id}]"
    assert (outcome["verdict"], outcome["already_answered"], outcome["status"]) == ("approved", False, "RUNNING")
    [event] = answered_events(service, run)
    assert (event["by"], event["roles"]) == (f"alice [{key_id}]", ["approver", "finance"])
    # The answer returned at once: the worker (here, drive) runs the approved call, once.
    assert service.runtime.drive(run).status.value == "COMPLETED"


def test_a_replay_with_the_same_idempotency_key_returns_the_first_outcome(service: Service) -> None:
    approver = service.key("acme", "approver")
    run = service.waiting_run(service.key("acme", "admin", name="root"))
    headers = approver | {"Idempotency-Key": "k-1"}
    first = service.client.post(APPROVE.format(run=run), json={"comment": "ok"}, headers=headers)
    service.runtime.drive(run)  # the run moved on
    again = service.client.post(APPROVE.format(run=run), json={"comment": "ok"}, headers=headers)
    assert first.status_code == again.status_code == 200
    assert again.json() == first.json()
    assert again.json()["status"] == "RUNNING"  # the first outcome, not today's COMPLETED
    assert len(answered_events(service, run)) == 1
    other = service.client.post(APPROVE.format(run=run), json={"comment": "changed"}, headers=headers)
    assert other.status_code == 409
    assert other.json()["error"]["code"] == "IDEMPOTENCY_KEY_REUSED"


def test_answers_keep_the_clis_semantics_and_named_errors(service: Service) -> None:
    approver = service.key("acme", "approver")
    run = service.waiting_run(service.key("acme", "admin", name="root"))
    url = APPROVE.format(run=run)
    wrong_digest = service.client.post(url, json={"digest": "0" * 64}, headers=approver)
    assert (wrong_digest.status_code, wrong_digest.json()["error"]["code"]) == (409, "ACTION_DIGEST_MISMATCH")
    huge = service.client.post(url, json={"comment": "x" * 9000}, headers=approver)
    assert (huge.status_code, huge.json()["error"]["code"]) == (413, "ANSWER_TOO_LARGE")
    too_big_body = service.client.post(url, content=b'{"comment": "' + b"x" * 20_000 + b'"}', headers=approver)
    assert (too_big_body.status_code, too_big_body.json()["error"]["code"]) == (413, "BODY_TOO_LARGE")
    unknown = service.client.post(url.replace("approval_001", "approval_009"), json={}, headers=approver)
    assert (unknown.status_code, unknown.json()["error"]["code"]) == (404, "UNKNOWN_REQUEST")
    assert answered_events(service, run) == []
    assert service.client.post(url, json={"comment": "ok"}, headers=approver).status_code == 200
    same = service.client.post(url, json={"comment": "ok"}, headers=approver)
    assert same.json()["already_answered"] is True
    different = service.client.post(url, json={"comment": "other"}, headers=approver)
    assert (different.status_code, different.json()["error"]["code"]) == (409, "REQUEST_ALREADY_ANSWERED")
    rejected = service.client.post(url.replace("approve", "reject"), json={}, headers=approver)
    assert (rejected.status_code, rejected.json()["error"]["code"]) == (409, "REQUEST_ALREADY_ANSWERED")
    assert len(answered_events(service, run)) == 1


def test_the_inbox_shows_only_requests_the_caller_may_answer_with_the_guarded_action(service: Service) -> None:
    root = service.key("acme", "admin", name="root")
    open_run = service.waiting_run(root, invoice="INV-7", amount_cents=1200)
    finance_run = service.waiting_run(root, invoice="INV-8", approver_role="finance")
    plain = service.client.get("/v1/inbox", headers=service.key("acme", "approver")).json()
    assert [i["run_id"] for i in plain["items"]] == [open_run]
    [item] = plain["items"]
    action = item["request"]["guarded_action"]
    assert (action["tool"], action["args"]) == ("pay", {"invoice": "INV-7", "amount_cents": 1200})
    assert len(action["digest"]) == 64 and "plan_version" in action
    assert item["request"]["asked_by"] == "runtime" and "expires_at" in item["request"]
    finance = service.key("acme", "approver", "finance", name="fin")
    assert {i["run_id"] for i in service.client.get("/v1/inbox", headers=finance).json()["items"]} == {
        open_run,
        finance_run,
    }
    assert len(service.client.get("/v1/inbox", headers=root).json()["items"]) == 2

    def inbox_runs(**params: str) -> list[str]:
        got = service.client.get("/v1/inbox", params=params, headers=root)
        assert got.status_code == 200, got.text
        return [i["run_id"] for i in got.json()["items"]]

    assert inbox_runs(role="finance") == [finance_run] and inbox_runs(agent="payer", kind="approval") != []
    assert inbox_runs(kind="input") == [] and inbox_runs(agent="asker") == []
    bogus = service.client.get("/v1/inbox", params={"kind": "bogus"}, headers=root)
    assert bogus.status_code in (400, 422), bogus.text
    # Answering a request whose role the key lacks is refused, and changes nothing.
    refused = service.client.post(APPROVE.format(run=finance_run), json={}, headers=service.key("acme", "approver"))
    assert (refused.status_code, refused.json()["error"]["code"]) == (403, "ROLE_NOT_ALLOWED")
    assert answered_events(service, finance_run) == []
    assert service.client.post(APPROVE.format(run=finance_run), json={}, headers=finance).status_code == 200


def test_a_started_run_is_left_for_workers_and_listed_paged_and_shown(service: Service) -> None:
    submitter = service.key("acme", "submitter", "viewer")
    created = [
        service.client.post("/v1/runs", json={"agent": "payer", "goal": f"g{i}"}, headers=submitter) for i in range(3)
    ]
    assert [r.status_code for r in created] == [201] * 3
    assert {r.json()["status"] for r in created} == {"RUNNING"}
    assert {r.json()["tenant"] for r in created} == {"acme"}
    first = service.client.get("/v1/runs", params={"limit": 2}, headers=submitter).json()
    rest = service.client.get("/v1/runs", params={"limit": 2, "cursor": first["next_cursor"]}, headers=submitter)
    ids = [r["run_id"] for r in first["runs"] + rest.json()["runs"]]
    assert sorted(ids) == sorted(r.json()["run_id"] for r in created)
    assert rest.json()["next_cursor"] is None
    bad = service.client.get("/v1/runs", params={"status": "NOPE"}, headers=submitter)
    assert (bad.status_code, bad.json()["error"]["code"]) == (422, "INVALID_FILTER")
    unknown = service.client.post("/v1/runs", json={"agent": "nobody", "goal": "g"}, headers=submitter)
    assert (unknown.status_code, unknown.json()["error"]["code"]) == (404, "AGENT_NOT_REGISTERED")
    shown = service.client.get(f"/v1/runs/{ids[0]}", headers=submitter).json()
    assert shown["run_id"] == ids[0] and shown["suspended"] is False


def test_events_page_after_a_number(service: Service) -> None:
    root = service.key("acme", "admin")
    run = service.waiting_run(root)
    every = service.client.get(f"/v1/runs/{run}/events", headers=root).json()
    seqs = [e["seq"] for e in every["events"]]
    assert seqs == list(range(1, len(seqs) + 1)) and every["next_after"] == seqs[-1]
    page = service.client.get(f"/v1/runs/{run}/events", params={"after": 3, "limit": 2}, headers=root).json()
    assert [e["seq"] for e in page["events"]] == [4, 5] and page["next_after"] == 5


def sse_ids(text: str) -> list[int]:
    return [int(line[4:]) for line in text.splitlines() if line.startswith("id: ")]


def test_the_event_stream_resumes_after_last_event_id_and_ends_by_itself(service: Service) -> None:
    root = service.key("acme", "admin")
    run = service.waiting_run(root)
    last = service.runtime.store.last_seq(run)
    waiting = service.client.get(f"/v1/runs/{run}/events/stream", headers=root | {"Last-Event-ID": "3"})
    assert waiting.headers["content-type"].startswith("text/event-stream")
    assert sse_ids(waiting.text) == list(range(4, last + 1))
    assert waiting.text.rstrip().endswith(f'"reason": "idle", "last_event_id": {last}}}')
    service.client.post(APPROVE.format(run=run), json={}, headers=root)
    service.runtime.drive(run)
    done = service.client.get(f"/v1/runs/{run}/events/stream", headers=root | {"Last-Event-ID": str(last)})
    end = service.runtime.store.last_seq(run)
    assert sse_ids(done.text) == list(range(last + 1, end + 1))
    assert '"reason": "terminal"' in done.text
    bad = service.client.get(f"/v1/runs/{run}/events/stream", headers=root | {"Last-Event-ID": "x"})
    assert (bad.status_code, bad.json()["error"]["code"]) == (422, "INVALID_CURSOR")


def test_pause_resume_and_cancel_need_an_operator_and_record_who(service: Service) -> None:
    operator = service.key("acme", "operator", name="ops")
    subject = "ops [" + operator["Authorization"].split("_", 1)[1].split(".")[0] + "]"
    started = service.client.post(
        "/v1/runs", json={"agent": "payer", "goal": "g"}, headers=service.key("acme", "admin")
    )
    run = started.json()["run_id"]
    paused = service.client.post(f"/v1/runs/{run}/pause", headers=operator)
    assert paused.status_code == 200 and paused.json()["status"] == "PAUSED"
    resumed = service.client.post(f"/v1/runs/{run}/resume", headers=operator)
    assert resumed.json()["status"] == "WAITING_FOR_USER"
    assert any(
        (e.payload.get("by"), e.payload.get("roles")) == (subject, ["operator"])
        for e in service.runtime.events(run)
        if e.type is EventType.RUN_RESUMED
    )
    cancelled = service.client.post(f"/v1/runs/{run}/cancel", headers=operator)
    assert cancelled.json()["status"] == "CANCELLED"
    assert service.runtime.events(run)[-2].payload["by"] == subject
    again = service.client.post(f"/v1/runs/{run}/cancel", headers=operator)
    assert (again.status_code, again.json()["error"]["code"]) == (409, "RUN_ENDED")


def test_a_pause_or_cancel_a_worker_applies_later_records_the_callers_principal(service: Service) -> None:
    operator = service.key("acme", "operator", name="ops")
    subject = "ops [" + operator["Authorization"].split("_", 1)[1].split(".")[0] + "]"
    admin = service.key("acme", "admin")
    store = service.runtime.store
    worker = Runtime(store, agents=service.runtime.agents, owner="worker-b")
    for action, final in (("pause", "PAUSED"), ("cancel", "CANCELLED")):
        run = service.client.post("/v1/runs", json={"agent": "payer", "goal": "g"}, headers=admin).json()["run_id"]
        held = store.acquire_lease(run, "worker-b", 30)  # a worker is driving it: the request waits for it
        asked = service.client.post(f"/v1/runs/{run}/{action}", headers=operator)
        assert asked.status_code == 200 and asked.json()["status"] == "RUNNING", asked.text
        store.release_lease(held)
        assert worker.drive(run).status.value == final  # the worker honours it at its next step
        transitions = [e.payload for e in service.runtime.events(run) if e.type is EventType.STATE_TRANSITION]
        assert transitions[-1]["state_after"] == final
        assert (transitions[-1]["by"], transitions[-1]["roles"]) == (subject, ["operator"]), transitions[-1]
