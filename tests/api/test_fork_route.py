"""``POST /v1/runs/{id}/fork``: a submitter forks a run of its own tenant; the fork waits on a re-opened request."""

from __future__ import annotations

from tests.api.conftest import Service


def test_a_submitter_forks_a_waiting_run_at_its_wait(service: Service) -> None:
    admin = service.key("acme", "admin")
    run = service.waiting_run(admin)
    at = service.runtime.store.last_seq(run)
    submitter = service.key("acme", "submitter", name="sam")
    response = service.client.post(f"/v1/runs/{run}/fork", json={"at": at}, headers=submitter)
    assert response.status_code == 201, response.text
    fork = response.json()
    assert fork["run_id"] != run and fork["tenant"] == "acme" and fork["status"] == "WAITING_FOR_USER"
    assert fork["pending"]["request_id"] != "approval_001"  # re-opened under a new id
    assert fork["lineage"] == {"forked_from": run, "at_seq": at, "forks": []}
    assert fork["agent_version"] == service.runtime.get(run).agent.version
    source = service.client.get(f"/v1/runs/{run}", headers=admin).json()
    assert source["lineage"]["forks"] == [fork["run_id"]]
    forked = [e for e in service.runtime.events(fork["run_id"]) if e.type == "run_forked"]
    assert forked[0].payload["by"] != "" and forked[0].payload["at_seq"] == at


def test_a_fork_point_without_a_state_and_an_operator_param_are_refused(service: Service) -> None:
    admin = service.key("acme", "admin")
    run = service.waiting_run(admin)
    refused = service.client.post(f"/v1/runs/{run}/fork", json={"at": 2}, headers=admin)
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "FORK_POINT_UNAVAILABLE"
    model = service.client.post(
        f"/v1/runs/{run}/fork", json={"at": 1, "params": {"model_spec": "scripted:x"}}, headers=admin
    )
    assert model.status_code == 422 and model.json()["error"]["code"] == "PARAM_NOT_ALLOWED"
    assert service.runtime.lineage(run)["forks"] == []
