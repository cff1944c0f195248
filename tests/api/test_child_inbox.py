"""One inbox: a child run's request is listed with the chain of runs above it, and only the child's own
approvers may answer it (a parent's approvers are not the child's: approvals are not inherited)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from fastapi.testclient import TestClient
from tests.runtime import child_family as family

from stateward.api import ApiSettings, create_app, mint_key
from stateward.api.app import key_store
from stateward.core.status import RunStatus
from stateward.runtime.runtime import Runtime
from stateward.store.sqlite import SQLiteStore


def _key(runtime: Runtime, *roles: str) -> dict[str, str]:
    _, token = mint_key(key_store(runtime), tenant="default", name="alice", roles=roles, now=datetime.now(UTC))
    return {"Authorization": f"Bearer {token}"}


def test_a_grandchilds_approval_is_in_the_inbox_with_its_chain_for_its_own_approvers(tmp_path: Path) -> None:
    runtime = Runtime(SQLiteStore(tmp_path / "api.db"), agents=family.registry())
    runtime.start(runtime.agents.create("manager"), goal="refunds", run_id="root")
    (triage,) = runtime.children("root")
    (refunder,) = runtime.children(triage.run_id)
    assert runtime.chain(refunder.run_id) == ["root", triage.run_id] and runtime.chain("root") == []
    with TestClient(create_app(runtime, ApiSettings())) as client:
        # The parents' waits on their children are nobody's to answer: only the grandchild's approval shows.
        listed = client.get("/v1/inbox", headers=_key(runtime, "approver", "refunds")).json()["items"]
        assert [(i["run_id"], i["chain"]) for i in listed] == [(refunder.run_id, ["root", triage.run_id])]
        assert listed[0]["request"]["approver_role"] == "refunds"
        # The triage agent's approvers are not the refund agent's.
        assert client.get("/v1/inbox", headers=_key(runtime, "approver", "triage")).json()["items"] == []
        request_id = listed[0]["request"]["request_id"]
        path = f"/v1/runs/{refunder.run_id}/requests/{request_id}/approve"
        refused = client.post(path, json={}, headers=_key(runtime, "approver", "triage"))
        assert refused.status_code == 403, refused.text
        done = client.post(path, json={}, headers=_key(runtime, "approver", "refunds"))
        assert done.status_code == 200, done.text
    runtime.drive(refunder.run_id)  # the service leaves driving to workers; here, the library drives the tree
    assert runtime.get(refunder.run_id).status is RunStatus.COMPLETED
    assert len(runtime.children(triage.run_id)) == 2  # the triage agent went on to its next child
    runtime.close()
