"""``stateward runs``: inspect runs, and move one to another agent version or fork it."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from stateward.cli import DEFAULT_DB
from stateward.cli.output import answer_hint, emit_json, print_summary, print_table, reported_errors
from stateward.cli.plugins import DbOpt, JsonOpt, ModelOpt, open_runtime
from stateward.cli.stores import open_backend


def runs_show(run_id: str, db: DbOpt = DEFAULT_DB, as_json: JsonOpt = False) -> None:
    """One run: status, the computed suspension criterion, pending request, counters, artifacts, and its
    place in its tree (the runs above it, the child runs its calls started)."""
    from stateward.runtime.summary import family_summary, run_summary

    with reported_errors(as_json):
        runtime = open_backend(db)
        state = runtime.get(run_id)
        summary = {**run_summary(runtime.store, state), **family_summary(runtime.store, state)}
    if as_json:
        emit_json(summary)
        return
    print_summary(summary)


def runs_list(
    db: DbOpt = DEFAULT_DB,
    as_json: JsonOpt = False,
    status: Annotated[
        str | None, typer.Option("--status", help="Only runs in this status (e.g. WAITING_FOR_USER).")
    ] = None,
    tenant: Annotated[str | None, typer.Option("--tenant", help="Only this tenant's runs.")] = None,
    agent: Annotated[str | None, typer.Option("--agent", help="Only runs of this registered agent name.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="Runs per page (1-1000).")] = 100,
    cursor: Annotated[str | None, typer.Option("--cursor", help="next_cursor of the previous page.")] = None,
    tree: Annotated[
        bool, typer.Option("--tree", help="Each run under the run whose call started it (within the page).")
    ] = False,
) -> None:
    """Runs in the store, newest first, a page at a time (filters combine; --cursor continues a listing).

    JSON: {"runs": [...], "next_cursor": "..." | null}; pass next_cursor back with the same filters. With
    --tree each row also names its parent_run_id, and the table shows each child under its parent.
    """
    with reported_errors(as_json):
        runtime = open_backend(db)
        page = runtime.list_runs(status=status, tenant=tenant, agent=agent, limit=limit, cursor=cursor)
        rows = [r.model_dump(mode="json") for r in page.items]
        if tree:
            rows = _as_tree(runtime, rows)
    if as_json:
        emit_json({"runs": rows, "next_cursor": page.next_cursor})
        return
    if tree:
        rows = [{**r, "run_id": "  " * r["depth"] + r["run_id"]} for r in rows]
    print_table("runs", ("run_id", "tenant", "agent", "agent_version", "status", "terminal_reason", "updated_at"), rows)
    if page.next_cursor is not None:
        typer.echo(f"more: --cursor {page.next_cursor}")


def _as_tree(runtime: Any, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The page's rows, each child right after its parent (indented by depth in ``run_id`` for the table,
    named in ``parent_run_id``); a child whose parent is not on the page stays where it was."""
    parents = {}
    for row in rows:
        link = runtime.get(row["run_id"]).parent
        parents[row["run_id"]] = None if link is None else link.run_id
    on_page = {row["run_id"] for row in rows}
    below: dict[str | None, list[dict[str, Any]]] = {}
    for row in rows:
        parent = parents[row["run_id"]]
        below.setdefault(parent if parent in on_page else None, []).append(row)
    ordered: list[dict[str, Any]] = []

    def place(row: dict[str, Any], depth: int) -> None:
        ordered.append({**row, "parent_run_id": parents[row["run_id"]], "depth": depth})
        for child in reversed(below.get(row["run_id"], [])):  # the page is newest first; calls in order
            place(child, depth + 1)

    for top in below.get(None, []):
        place(top, 0)
    return ordered


def runs_migrate(
    run_id: str,
    to: Annotated[str, typer.Option("--to", help="The version to move the run to: the one this process builds.")],
    by: Annotated[str, typer.Option("--by", help="Who migrates it (recorded).")] = "operator",
    db: DbOpt = DEFAULT_DB,
    as_json: JsonOpt = False,
) -> None:
    """Move a WAITING_FOR_USER or PAUSED run to another version of its agent, through the migration that
    version registers from the run's (recorded with who, from, to). An approval whose action the new
    version no longer has, or has changed, is closed as stale and the run decides again; a worker of the
    new version drives it on. Refused by name, the run unchanged: RUN_NOT_MIGRATABLE,
    AGENT_MIGRATION_NOT_REGISTERED, AGENT_VERSION_UNAVAILABLE, INVALID_MIGRATION, MIGRATION_NOT_NEEDED."""
    with reported_errors(as_json):
        runtime = open_runtime(db, writes=True)
        before, seq = runtime.store.load_run_at(run_id)
        state = runtime.migrate(run_id, to, by=by)
        recorded = [e for e in runtime.events(run_id, after=seq) if e.type == "agent_migrated"]
    stale = recorded[0].payload.get("stale", []) if recorded else []
    out = {
        "run_id": run_id,
        "agent": state.agent.name,
        "from_version": before.agent.version,
        "to_version": state.agent.version,
        "by": by,
        "status": state.status.value,
        "stale": stale,
    }
    if as_json:
        emit_json(out)
        return
    typer.echo(f"run {run_id}: agent {state.agent.name} {before.agent.version} -> {state.agent.version} (by {by})")
    for item in stale:
        typer.echo(
            f"  stale: {item.get('request_id') or item.get('grant') or item.get('approved_call')} ({item['reason']})"
        )
    typer.echo(f"  status: {state.status.value}")


def runs_fork(
    run_id: str,
    at: Annotated[int, typer.Option("--at", min=1, help="The event the fork shares the run's history up to.")],
    agent_version: Annotated[
        str | None, typer.Option("--agent-version", help="Run the fork under this version (through its migration).")
    ] = None,
    model: ModelOpt = None,
    param: Annotated[
        list[str] | None, typer.Option("--param", help="k=v (repeatable): a factory param the fork is built with.")
    ] = None,
    by: Annotated[str, typer.Option("--by", help="Who forks it (recorded).")] = "operator",
    drive: Annotated[bool, typer.Option("--drive", help="Drive the fork to its next stop here.")] = False,
    db: DbOpt = DEFAULT_DB,
    as_json: JsonOpt = False,
) -> None:
    """A new run whose history up to event --at is RUN's (shared, not copied): side effects RUN journalled are
    replayed from the journal, never run again; usage is carried; grants and answers after --at are not (a
    guarded call asks again); the request open at --at is re-opened under a new id. --at must be a fork point
    (any event between steps; one inside a step is FORK_POINT_UNAVAILABLE naming the event to use)."""
    from stateward.cli.run_cmd import parse_params
    from stateward.runtime.summary import run_summary

    with reported_errors(as_json):
        runtime = open_runtime(db, writes=True)
        state = runtime.fork(
            run_id,
            at=at,
            by=by,
            agent_version=agent_version,
            model_spec=model,
            params=parse_params(param or []) or None,
            drive=drive,
        )
        out = run_summary(runtime.store, state)
    out["pending_request_id"] = None if state.pending is None else state.pending.request_id
    if as_json:
        emit_json(out)
        return
    typer.echo(f"forked {run_id} at event {at}: {state.run_id}")
    print_summary(out)
    if state.pending is not None:
        typer.echo(f"  answer with: {answer_hint(state.run_id, state.pending, db, state.tenant)}")
