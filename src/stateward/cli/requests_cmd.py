"""``stateward requests``: the approval inbox, and the sweep that applies expiry policies."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from stateward.cli import DEFAULT_DB
from stateward.cli.output import emit_json, reported_errors
from stateward.cli.plugins import DbOpt, JsonOpt, open_runtime
from stateward.cli.stores import open_backend


def requests_list(
    db: DbOpt = DEFAULT_DB,
    as_json: JsonOpt = False,
    run_id: Annotated[str | None, typer.Option("--run")] = None,
    tenant: Annotated[str | None, typer.Option("--tenant", help="Only requests of this tenant's runs.")] = None,
    role: Annotated[
        str | None, typer.Option("--role", help="Only requests this approver role answers (the tool's or agent's).")
    ] = None,
) -> None:
    """Open pending requests (the approval inbox): each guarded action, and what an answer to it does."""
    from stateward.cli.output import pending_lines
    from stateward.store.paging import MAX_PAGE_SIZE, RequestRow

    with reported_errors(as_json):
        runtime = open_backend(db)
        records: list[RequestRow] = []
        cursor: str | None = None
        while True:  # the whole inbox, read a bounded page at a time
            page = runtime.list_requests(run_id=run_id, tenant=tenant, limit=MAX_PAGE_SIZE, cursor=cursor, role=role)
            records += page.items
            cursor = page.next_cursor
            if cursor is None:
                break
    rows: list[dict[str, Any]] = [
        {
            "run_id": r.run_id,
            "request_id": r.request.request_id,
            "kind": r.request.kind,
            "question": r.request.question,
            "guarded_action": None
            if r.request.guarded_action is None
            else r.request.guarded_action.model_dump(mode="json"),
            "approver_role": r.request.approver_role,
            "approval_scope": r.request.approval_scope.value,
            "asked_by": r.request.asked_by,
            "model_text": r.request.model_text,
            "reconciles": None if r.request.reconciles is None else r.request.reconciles.model_dump(mode="json"),
            "escalation": None if r.request.escalation is None else r.request.escalation.model_dump(mode="json"),
            "expires_at": None if r.request.expires_at is None else r.request.expires_at.isoformat(),
            "tenant": r.tenant,
            "created_at": r.request.created_at.isoformat(),
        }
        for r in records
    ]
    if as_json:
        emit_json(rows)
        return
    from stateward.core.inert import inert

    typer.echo(f"open requests: {len(rows)}")
    for row in rows:
        typer.echo(f"run {inert(str(row['run_id']))}  tenant {inert(str(row['tenant']))}  created {row['created_at']}")
        typer.echo("\n".join(pending_lines(row)))


def requests_expire(db: DbOpt = DEFAULT_DB, as_json: JsonOpt = False) -> None:
    """Apply each agent's expiry policy (fail / cancel / escalate) to expired requests."""
    with reported_errors(as_json):
        expired = open_runtime(db, writes=True).expire_requests()
    if as_json:
        emit_json({"expired": expired})
    else:
        typer.echo(f"expired: {', '.join(expired) or 'none'}")
