"""A child's handoff is answered by whom the call declares: the child's own approvers, or (escalated) the
parent's. Either way the answer is bound to the exact request, single-use and tenant-checked."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.runtime import handoff_family as family

from stateward import RequestRefusedError, RunState, RunStatus, Runtime
from stateward.core.errors import ErrorCode
from stateward.core.state import RequestKind
from stateward.tools import ChildHandoff


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "handoffs.db")
    return str(request.getfixturevalue("pg_url"))


def _tree(url: str, on_handoff: ChildHandoff) -> tuple[Runtime, RunState]:
    rt = Runtime.open(url, agents=family.registry())
    agent = rt.agents.create("escalating-parent", {"on_handoff": on_handoff.value})
    root = rt.start(agent, goal="refund A-1", tenant="acme", run_id="root")
    assert root.status is RunStatus.WAITING_FOR_USER
    (child,) = rt.children("root")
    assert child.status is RunStatus.WAITING_FOR_USER and child.pending is not None
    assert child.pending.kind is RequestKind.HANDOFF
    return rt, child


def _refused(call: Callable[[], object]) -> ErrorCode:
    with pytest.raises(RequestRefusedError) as caught:
        call()
    return caught.value.code


def test_an_escalated_handoff_is_answered_by_the_parents_approvers_only(url: str) -> None:
    rt, child = _tree(url, ChildHandoff.ESCALATE_TO_PARENT)
    pending = child.pending
    assert pending is not None
    # The request says it is escalated, to whom, and whose it was.
    assert pending.approver_role == "triage"
    assert pending.escalation is not None and pending.escalation.parent_run_id == "root"
    assert pending.escalation.child_role == "refunds"
    (row,) = rt.list_requests(tenant="acme", role="triage").items
    assert row.run_id == child.run_id and row.request.escalation == pending.escalation
    rid = pending.request_id

    def answer(roles: set[str], tenant: str = "acme", text: str = "refund_in_full", request_id: str = rid) -> None:
        rt.reply(child.run_id, request_id, by="tom", text=text, tenant=tenant, roles=frozenset(roles))

    assert _refused(lambda: answer({"refunds"})) is ErrorCode.ROLE_NOT_ALLOWED  # the child's own role: no longer
    # Another tenant's request does not exist for it; nor does any request but this exact one.
    assert _refused(lambda: answer({"triage"}, tenant="globex")) is ErrorCode.UNKNOWN_REQUEST
    assert _refused(lambda: answer({"triage"}, request_id="handoff_999")) is ErrorCode.UNKNOWN_REQUEST
    assert rt.get(child.run_id).pending == pending  # nothing refused changed anything
    answer({"triage"})
    assert rt.get(child.run_id).status is RunStatus.COMPLETED
    root = rt.get("root")
    assert root.status is RunStatus.COMPLETED and root.terminal_reason == "completed"
    # Single use: a second, different answer to the same request is refused.
    assert _refused(lambda: answer({"triage"}, text="cancel")) is ErrorCode.REQUEST_ALREADY_ANSWERED
    rt.close()


def test_a_handoff_answered_in_the_child_needs_the_childs_own_role(url: str) -> None:
    rt, child = _tree(url, ChildHandoff.ANSWER_IN_CHILD)
    pending = child.pending
    assert pending is not None and pending.approver_role == "refunds" and pending.escalation is None
    assert rt.list_requests(tenant="acme", role="triage").items == []
    rid = pending.request_id
    refused = _refused(
        lambda: rt.reply(child.run_id, rid, by="tom", text="cancel", tenant="acme", roles=frozenset({"triage"}))
    )
    assert refused is ErrorCode.ROLE_NOT_ALLOWED  # the parent's approvers are not the child's
    rt.reply(child.run_id, rid, by="ana", text="cancel", tenant="acme", roles=frozenset({"refunds"}))
    assert rt.get(child.run_id).status is RunStatus.COMPLETED
    assert rt.get("root").status is RunStatus.COMPLETED
    rt.close()


def test_the_cli_inbox_says_a_handoff_is_escalated_and_to_whom(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from stateward.cli.app import app

    db = str(tmp_path / "handoffs.db")
    rt, child = _tree(db, ChildHandoff.ESCALATE_TO_PARENT)
    rt.close()
    listed = CliRunner().invoke(app, ["requests", "list", "--db", db, "--role", "triage", "--json"])
    assert listed.exit_code == 0, listed.output
    (row,) = json.loads(listed.output)
    assert row["run_id"] == child.run_id and row["escalation"] == {"parent_run_id": "root", "child_role": "refunds"}
    text = CliRunner().invoke(app, ["requests", "list", "--db", db]).output
    assert "escalated:      to the approvers of parent run root (the child's role: refunds)" in text
    shown = CliRunner().invoke(app, ["runs", "show", child.run_id, "--db", db, "--json"])
    assert json.loads(shown.output)["pending"]["escalation"]["parent_run_id"] == "root"
