"""The ``stateward`` command line as one Typer app (answers also have a Typer-free path: cli/answers.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    pass

from stateward.cli import DEFAULT_DB, replay_cmd
from stateward.cli.output import (
    CELL_CHARS,
    answer_hint,
    emit_json,
    emit_json_lines,
    print_summary,
    print_table,
    reported_errors,
)
from stateward.cli.plugins import DbOpt, JsonOpt, ModelOpt, load_group, open_runtime, plugin_groups
from stateward.cli.prefork import MAX_PROCESSES
from stateward.core.errors import ErrorCode, UserError

app = typer.Typer(
    rich_markup_mode=None,  # help texts are plain text: "[serve]" must print as written
    no_args_is_help=True,
    add_completion=False,
    help=(
        "stateward: the model proposes, the runtime decides.\n\n"
        "Every command accepts --agents module:attr (repeatable; also STATEWARD_AGENTS, comma-separated):"
        " agent registries this process may build runs of, besides the built-in agents and the"
        " `stateward.agents` entry points. A run whose agent is not registered is refused, never imported."
    ),
)
runs_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="Inspect runs.")
requests_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="Pending requests waiting for a person.")
app.add_typer(runs_app, name="runs")
app.add_typer(requests_app, name="requests")
agents_app = typer.Typer(
    no_args_is_help=True, rich_markup_mode=None, help="Agents this process may build (by registered name)."
)
app.add_typer(agents_app, name="agents")


# Sub-command groups whose imports are heavy are mounted only when asked for (or for --help), so
# `stateward approve` does not pay for the planner or the model SDKs.
LAZY_GROUPS = {
    "plan": ("stateward.cli.plan_cmd", "Validate plan documents."),
    "keys": ("stateward.cli.keys_cmd", "API keys of the HTTP service (stored hashed; secrets shown once)."),
}


def _builtin_names() -> set[str]:
    commands = {
        c.name or (c.callback.__name__.replace("_", "-") if c.callback else "") for c in app.registered_commands
    }
    return commands | {g.name or "" for g in app.registered_groups} | set(LAZY_GROUPS)


def _mount(first: str | None) -> None:
    """Mount the lazy group or the plugin group (see :mod:`stateward.cli.plugins`) that ``first`` names;
    every one of them when no command is named (``stateward --help``)."""
    import importlib

    builtin = _builtin_names()
    if first is not None and first in builtin and first not in LAZY_GROUPS:
        return
    for name in sorted(LAZY_GROUPS if first is None else {first} & set(LAZY_GROUPS)):
        module, help_text = LAZY_GROUPS[name]
        app.add_typer(importlib.import_module(module).app, name=name, help=help_text)
    if first in LAZY_GROUPS:
        return
    for name, entry_point in sorted(plugin_groups(builtin).items()):
        if first is None or name == first:
            app.add_typer(load_group(entry_point), name=name)


app.command("replay")(replay_cmd.replay)  # its heavy imports happen inside the command


# -- agents ---------------------------------------------------------------------------------------
@agents_app.command("list")
def agents_list(as_json: JsonOpt = False) -> None:
    """The agents this process would build: built-ins, entry points, STATEWARD_AGENTS and --agents."""
    from stateward.runtime.agent_registry import process_agents

    with reported_errors(as_json):
        rows = [
            {
                "name": e.name,
                "version": _version_of(e),
                "compatible_with": list(e.compatible_with),
                "migrates_from": sorted(e.migrations),
                "source": e.source,
                "description": e.description,
            }
            for e in process_agents()
        ]
    if as_json:
        emit_json(rows)
    else:
        print_table("agents", ["name", "version", "compatible_with", "migrates_from", "source", "description"], rows)


def _version_of(entry: Any) -> str | None:
    """The version an agent's runs record here (given, or its fingerprint); None when its factory cannot
    be loaded in this process (its runs are refused at build, by name)."""
    from stateward.core.errors import StatewardError

    try:
        return str(entry.resolved_version())
    except StatewardError:
        return None


@app.command("run")
def run_agent(
    name: Annotated[str, typer.Argument(help="A registered agent name (see `stateward agents list`).")],
    goal: Annotated[str, typer.Option("--goal", help="What the run is to achieve.")],
    param: Annotated[
        list[str] | None,
        typer.Option(
            "--param",
            help="k=v (repeatable): a factory param, v read as JSON where it parses (5, true, null, '\"x\"', {...}),"
            " else as text.",
        ),
    ] = None,
    model: ModelOpt = None,
    db: DbOpt = DEFAULT_DB,
    tenant: Annotated[str, typer.Option("--tenant", help="The tenant the run belongs to.")] = "default",
    no_drive: Annotated[bool, typer.Option("--no-drive", help="Only submit the run; a worker drives it.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Start a run of any registered agent; returns when it stops (e.g. waiting for an approval).

    The agent is built here from its params first (INVALID_AGENT_PARAMS, MODEL_NOT_SUPPORTED or
    AGENT_NOT_REGISTERED before anything is written); the run stores its name and exactly these params.
    """
    from stateward.cli.run_cmd import parse_params
    from stateward.runtime.agent_registry import process_agents
    from stateward.runtime.summary import run_summary

    with reported_errors(as_json):
        registry = process_agents()
        agent = registry.create(name, parse_params(param or []), model_spec=model)
        runtime = open_runtime(db, create=True, writes=True, agents=registry)
        state = runtime.submit(agent, goal, tenant=tenant) if no_drive else runtime.start(agent, goal, tenant=tenant)
        out = run_summary(runtime.store, state)
    out["pending_request_id"] = None if state.pending is None else state.pending.request_id
    out["agent_ref"] = state.agent.model_dump(mode="json")
    if as_json:
        emit_json(out)
        return
    print_summary(out)
    if state.pending is not None:
        typer.echo(f"  answer with: {answer_hint(state.run_id, state.pending, db, state.tenant)}")


# -- runs -----------------------------------------------------------------------------------------
@runs_app.command("show")
def runs_show(run_id: str, db: DbOpt = DEFAULT_DB, as_json: JsonOpt = False) -> None:
    """One run: status, the computed suspension criterion, pending request, counters, artifacts, and its
    place in its tree (the runs above it, the child runs its calls started)."""
    from stateward.runtime.summary import family_summary, run_summary

    with reported_errors(as_json):
        runtime = open_runtime(db)
        state = runtime.get(run_id)
        summary = {**run_summary(runtime.store, state), **family_summary(runtime.store, state)}
    if as_json:
        emit_json(summary)
        return
    print_summary(summary)


@runs_app.command("list")
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
        runtime = open_runtime(db)
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


@runs_app.command("migrate")
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


@runs_app.command("fork")
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


@requests_app.command("list")
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
        runtime = open_runtime(db)
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


_TRACE_FIELDS = {"seq", "type", "at", "payload"}


def _trace_row(event: dict[str, Any]) -> dict[str, Any]:
    return {"seq": event["seq"], "type": event["type"], "at": event["at"], "payload": event["payload"]}


TRACE_WIDTH = 120


def _cut(payload: Any, width: int) -> tuple[str, bool]:
    """The payload as text, cut at ``width`` characters (0: whole) with a marker saying how much is left out."""
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    if width <= 0 or len(text) <= width:
        return text, False
    return f"{text[:width]}…[{len(text) - width} more chars]", True


@app.command("trace")
def trace(
    run_id: str,
    db: DbOpt = DEFAULT_DB,
    as_json: JsonOpt = False,
    width: Annotated[
        int, typer.Option("--width", min=0, help="Characters of each payload shown (0: all of it).")
    ] = TRACE_WIDTH,
) -> None:
    """A run's events in order (``--json``: one event per line, as the API writes them). Payloads longer
    than --width are cut with a marker, and a last line says how many were cut and how to see them whole."""
    with reported_errors(as_json):
        runtime = open_runtime(db)
        runtime.get(run_id)
        events = runtime.store.read_events(run_id)
    rows = [_trace_row(e.model_dump(mode="json", include=_TRACE_FIELDS)) for e in events]
    if as_json:
        emit_json_lines(rows)
        return
    shown = [(r, *_cut(r["payload"], width)) for r in rows]
    cells = [{**r, "payload": text} for r, text, _ in shown]
    longest = max((len(text) for _, text, _ in shown), default=0)
    print_table(f"trace of {run_id}", ("seq", "type", "payload"), cells, cell_chars=max(longest * 8, CELL_CHARS))
    cut = sum(1 for _, _, was_cut in shown if was_cut)
    if cut:
        typer.echo(
            f"{cut} of {len(rows)} payloads cut at {width} characters; see them whole with"
            f" `stateward trace {run_id} --db {db} --width 0` or `--json`"
        )


# -- answers --------------------------------------------------------------------------------------
ByOpt = Annotated[str, typer.Option("--by", help="Who answers (recorded).")]
RoleOpt = Annotated[list[str] | None, typer.Option("--role", help="A role the answerer holds (repeatable).")]
TenantOpt = Annotated[str | None, typer.Option("--tenant", help="The answerer's tenant; must match the run's.")]
DigestOpt = Annotated[
    str | None, typer.Option("--digest", help="Digest of the guarded action you reviewed; must match the request's.")
]
NoDriveOpt = Annotated[bool, typer.Option("--no-drive", help="Record the answer only; a worker continues the run.")]


@app.command("approve")
def approve(
    run_id: str,
    request_id: str,
    db: DbOpt = DEFAULT_DB,
    by: ByOpt = os.environ.get("USER", "operator"),
    comment: Annotated[str | None, typer.Option()] = None,
    role: RoleOpt = None,
    tenant: TenantOpt = None,
    digest: DigestOpt = None,
    no_drive: NoDriveOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Approve a pending request and resume the run to its next stop.

    For a reconciliation this says "it happened": the call is recorded as succeeded, confirmed by you."""
    from stateward.cli.answers import AnswerChecks, answer

    checks = AnswerChecks(role or [], tenant, digest, not no_drive)
    answer("approved", run_id, request_id, db, by, comment, as_json, checks)


@app.command("reject")
def reject(
    run_id: str,
    request_id: str,
    db: DbOpt = DEFAULT_DB,
    by: ByOpt = os.environ.get("USER", "operator"),
    comment: Annotated[str | None, typer.Option()] = None,
    role: RoleOpt = None,
    tenant: TenantOpt = None,
    digest: DigestOpt = None,
    no_drive: NoDriveOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Reject a pending request (with a comment) and resume the run to its next stop.

    For a reconciliation this says "it did not happen": NOT_EXECUTED, then the tool's retry policy decides."""
    from stateward.cli.answers import AnswerChecks, answer

    checks = AnswerChecks(role or [], tenant, digest, not no_drive)
    answer("rejected", run_id, request_id, db, by, comment, as_json, checks)


@app.command("reply")
def reply(
    run_id: str,
    request_id: str,
    text: Annotated[str, typer.Option("--text")],
    db: DbOpt = DEFAULT_DB,
    by: ByOpt = os.environ.get("USER", "operator"),
    role: RoleOpt = None,
    tenant: TenantOpt = None,
    no_drive: NoDriveOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Answer a question with text and resume the run to its next stop."""
    from stateward.cli.answers import AnswerChecks, answer

    answer("replied", run_id, request_id, db, by, text, as_json, AnswerChecks(role or [], tenant, None, not no_drive))


# -- lifecycle ------------------------------------------------------------------------------------
def _lifecycle(action: str, run_id: str, db: str, as_json: bool, by: str) -> None:
    from stateward.runtime.control import ControlRequest
    from stateward.runtime.summary import run_summary

    with reported_errors(as_json):
        runtime = open_runtime(db, writes=True)
        if action == "pause":
            state = runtime.pause(run_id, by=by)
        elif action == "resume":
            state = runtime.resume(run_id, by=by)
        else:
            state = runtime.cancel(run_id, by=by)
        summary = run_summary(runtime.store, state)
        control = ControlRequest.decode(runtime.store.get_control(run_id))
        summary["control"] = None if control is None else control.kind
    if as_json:
        emit_json(summary)
    else:
        print_summary(summary)


@app.command("pause")
def pause(
    run_id: str, db: DbOpt = DEFAULT_DB, by: ByOpt = os.environ.get("USER", "operator"), as_json: JsonOpt = False
) -> None:
    """RUNNING -> PAUSING -> PAUSED with a checkpoint (at the driving worker's next step), recorded as ``by``'s."""
    _lifecycle("pause", run_id, db, as_json, by)


@app.command("resume")
def resume(
    run_id: str, db: DbOpt = DEFAULT_DB, by: ByOpt = os.environ.get("USER", "operator"), as_json: JsonOpt = False
) -> None:
    """Resume a PAUSED run from its checkpoint, reconciling side effects left in flight."""
    _lifecycle("resume", run_id, db, as_json, by)


@app.command("cancel")
def cancel(
    run_id: str, db: DbOpt = DEFAULT_DB, by: ByOpt = os.environ.get("USER", "operator"), as_json: JsonOpt = False
) -> None:
    """Cancel any non-terminal run; its open requests close and later answers are refused."""
    _lifecycle("cancel", run_id, db, as_json, by)


@app.command("worker")
def worker(
    db: DbOpt = DEFAULT_DB,
    concurrency: Annotated[
        int,
        typer.Option(min=1, help="Runs driven at once by this process (up to 256 threads; 10,000 tasks with --async)."),
    ] = 1,
    use_async: Annotated[
        bool,
        typer.Option("--async", help="Drive the runs as tasks of one event loop (async models and tools awaited)."),
    ] = False,
    lease_ttl: Annotated[float, typer.Option(help="Lease TTL in seconds (>= 3 x heartbeat).")] = 30.0,
    heartbeat: Annotated[float, typer.Option(help="Lease renewal interval in seconds.")] = 10.0,
    idle_exit: Annotated[float | None, typer.Option(help="Exit after this many idle seconds.")] = None,
    poll: Annotated[float, typer.Option(min=0.01, help="Seconds between looks for runnable runs when idle.")] = 0.2,
    expire_every: Annotated[
        float,
        typer.Option(min=0.1, help="Seconds between sweeps for expired requests, due timers and due model retries."),
    ] = 5.0,
    max_crashes: Annotated[
        int | None,
        typer.Option(min=1, help="Stop (exit 5) once this many steps crashed in this worker; default: never."),
    ] = None,
    crash_retries: Annotated[
        int, typer.Option(min=0, help="Retries of a run whose step crashed before it ends FAILED / step_crashed.")
    ] = 3,
    retry_delay: Annotated[
        float, typer.Option(min=0.001, help="First backoff in seconds after a crash or an unbuildable agent (doubles).")
    ] = 5.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the final counts as JSON on stdout.")] = False,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            min=0, max=65535, help="Serve Prometheus metrics on this port at /metrics (0: any free port; otel extra)."
        ),
    ] = None,
    metrics_addr: Annotated[str, typer.Option(help="Address the metrics endpoint binds.")] = "127.0.0.1",
    processes: Annotated[
        int,
        typer.Option(
            min=1,
            max=MAX_PROCESSES,
            help="Worker processes forked after importing once (each with --concurrency slots; see below).",
        ),
    ] = 1,
) -> None:
    """Claim runnable runs and drive them; SIGTERM finishes the current step and releases leases.

    A step that raises is recorded on its run (step_crashed) and retried with backoff; after its
    retries the run ends FAILED / step_crashed. A run whose agent this process cannot build backs off
    (agent_unavailable) and is then PAUSED for an operator. Neither stops the worker.

    Exit status: 0 when stopped by a signal, or on --idle-exit with nothing troubling; 5 when
    --max-crashes was reached, or on --idle-exit when this worker failed or parked a run, or its
    own loop met an unexpected error (all counted in the final line).

    --processes N: one supervisor imports once and forks N workers, each opening its own store
    connections. SIGTERM / SIGINT are forwarded and drained; a worker killed by another signal is
    replaced (more than N deaths within a minute: all stop, exit 5); one that exits by itself is not.
    The exit status is the highest of the workers'. --json sums their counts; --metrics-port needs
    one process.
    """
    from stateward.cli.worker_cmd import WorkerOptions, start_worker

    code = start_worker(
        WorkerOptions(
            db=db,
            concurrency=concurrency,
            use_async=use_async,
            lease_ttl=lease_ttl,
            heartbeat=heartbeat,
            idle_exit=idle_exit,
            poll=poll,
            expire_every=expire_every,
            max_crashes=max_crashes,
            crash_retries=crash_retries,
            retry_delay=retry_delay,
            as_json=as_json,
            metrics_port=metrics_port,
            metrics_addr=metrics_addr,
            processes=processes,
        )
    )
    if code:
        raise typer.Exit(code)


@app.command("stats")
def stats(
    db: DbOpt = DEFAULT_DB,
    since: Annotated[
        str | None, typer.Option(help="Only what happened since: a duration (30m, 24h, 7d) or an ISO time.")
    ] = None,
    max_runs: Annotated[int, typer.Option(min=1, max=1_000_000, help="Read at most this many runs.")] = 10_000,
    as_json: JsonOpt = False,
) -> None:
    """Operational figures from the event log (rates, counts, runs by status), for users without a metrics stack."""
    from datetime import UTC, datetime

    from stateward.observability.stats import compute_stats, parse_since

    with reported_errors(as_json):
        now = datetime.now(UTC)
        start = None if since is None else parse_since(since, now)
        runtime = open_runtime(db)
        report = compute_stats(runtime.store, now=now, since=start, max_runs=max_runs)
    data = report.model_dump(mode="json")
    if as_json:
        emit_json(data)
        return
    rows = []
    for key, value in data.items():
        if isinstance(value, dict) and "rate" in value:
            shown = "n/a" if value["rate"] is None else f"{value['rate']:.2%} ({value['part']}/{value['whole']})"
        elif isinstance(value, dict):
            shown = ", ".join(f"{k}={v}" for k, v in value.items() if v)
        else:
            shown = str(value)
        if key != "counts":
            rows.append({"figure": key, "value": shown})
    print_table("stats", ("figure", "value"), rows)


@app.command("serve")
def serve(
    db: DbOpt = DEFAULT_DB,
    host: Annotated[str, typer.Option("--host", help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port to bind.")] = 8080,
    metrics: Annotated[
        bool,
        typer.Option(
            "--metrics",
            help="Also serve Prometheus text at /metrics (otel extra); bearer STATEWARD_METRICS_TOKEN if set.",
        ),
    ] = False,
    webhook_allow_http: Annotated[
        bool,
        typer.Option(
            "--webhook-allow-http",
            help="Let webhooks use http:// (else https only; or STATEWARD_WEBHOOK_ALLOW_HTTP=1).",
        ),
    ] = False,
    webhook_allow_network: Annotated[
        list[str] | None,
        typer.Option(
            "--webhook-allow-network",
            help="A network (CIDR) webhooks may reach despite the target rules; repeatable"
            " (or STATEWARD_WEBHOOK_ALLOW_NETWORKS, comma-separated).",
        ),
    ] = None,
    docs: Annotated[
        bool,
        typer.Option("--docs", help="Also serve Swagger UI at /docs (local files, strict CSP); off by default."),
    ] = False,
    max_streams: Annotated[
        int | None,
        typer.Option(
            "--max-streams", min=1, help="Event streams open at once in all (default 200, STATEWARD_MAX_STREAMS)."
        ),
    ] = None,
    max_streams_per_key: Annotated[
        int | None,
        typer.Option(
            "--max-streams-per-key",
            min=1,
            help="Event streams open at once per key (default 20, STATEWARD_MAX_STREAMS_PER_KEY).",
        ),
    ] = None,
) -> None:
    """The HTTP API (OpenAPI at /openapi.json): API-key principals, tenant-scoped routes under /v1.

    Answers record and return at once; run `stateward worker` on the same store to drive runs. Needs
    the `serve` extra (pip install 'stateward[serve]'). /metrics takes no API key (a scraper is no
    tenant): keep the bind address private or set STATEWARD_METRICS_TOKEN.
    """
    with reported_errors(False):
        try:
            from stateward.api.serve import serve as run_service
            from stateward.api.serve import stream_limits
        except ImportError as exc:
            raise UserError(
                f"the HTTP service needs FastAPI and uvicorn ({exc}); pip install 'stateward[serve]'",
                code=ErrorCode.CONFIGURATION_ERROR,
            ) from None
        from stateward.api.webhook_targets import ALLOW_HTTP_ENV, ALLOW_NETWORKS_ENV, TargetPolicy

        env = dict(os.environ)
        if webhook_allow_http:
            env[ALLOW_HTTP_ENV] = "1"
        if webhook_allow_network:
            env[ALLOW_NETWORKS_ENV] = ",".join([env.get(ALLOW_NETWORKS_ENV, ""), *webhook_allow_network])
        targets = TargetPolicy.from_env(env)
        run_service(
            db,
            host=host,
            port=port,
            metrics=metrics,
            targets=targets,
            docs=docs,
            streams=stream_limits(max_streams, max_streams_per_key),
        )


@app.command("chaos")
def chaos(
    db: Annotated[
        str | None,
        typer.Option("--db", help="A new SQLite path or an empty PostgreSQL database (default: a new temporary file)."),
    ] = None,
    runs: Annotated[int, typer.Option(min=1, help="Runs to drive through the storm.")] = 20,
    kills: Annotated[int, typer.Option(min=0, help="Process kills to deliver (SIGKILL).")] = 100,
    workers: Annotated[int, typer.Option(min=1, help="Worker processes kept alive.")] = 2,
    seed: Annotated[int, typer.Option(help="Seed of every random choice (reproducible).")] = 1,
    max_seconds: Annotated[float, typer.Option(min=1, help="Give up after this long.")] = 600.0,
    as_json: JsonOpt = False,
) -> None:
    """Kill, pause and restart workers while agents run; print what broke (every count must be 0)."""
    from stateward.chaos.config import ChaosConfig
    from stateward.chaos.harness import Harness
    from stateward.chaos.verify import broken

    if db is None:
        import tempfile

        db = str(Path(tempfile.mkdtemp(prefix="stateward-chaos-")) / "chaos.db")
    with reported_errors(as_json):
        report = Harness(
            ChaosConfig(db=db, runs=runs, kills=kills, workers=workers, seed=seed, max_seconds=max_seconds)
        ).run()
    report["db"] = db
    if as_json:
        emit_json(report)
    else:
        for key, value in report.items():
            typer.echo(f"{key:28s} {value}")
    if broken(report):
        raise typer.Exit(1)


@app.command("gates")
def gates(
    db: Annotated[
        str | None,
        typer.Option("--db", help="Audit this store's runs; without it, the fault campaign on a new store first."),
    ] = None,
    store: Annotated[
        str | None,
        typer.Option("--store", help="Run the campaign on this new store (a SQLite path or postgresql:// URL)."),
    ] = None,
    size: Annotated[int, typer.Option(min=1, max=100, help="Repeats of each campaign scenario (CI: 1).")] = 1,
    kills: Annotated[int, typer.Option(min=0, help="Process kills of the ledger storm, per size step.")] = 15,
    seed: Annotated[int, typer.Option(help="Seed of the campaign.")] = 1,
    max_runs: Annotated[int, typer.Option(min=1, max=1_000_000, help="Audit at most this many runs.")] = 10_000,
    only: Annotated[
        list[str] | None,
        typer.Option("--only", help="Run only the campaign cells of this source fault (repeatable)."),
    ] = None,
    agent: Annotated[
        list[str] | None,
        typer.Option("--agent", help="Run only the campaign cells of this registered agent (repeatable)."),
    ] = None,
    quick: Annotated[
        bool, typer.Option("--quick", help="Every cell, fewer rows: two boundaries per agent, one row per cell.")
    ] = False,
    child_timeout: Annotated[
        float,
        typer.Option(
            "--child-timeout", min=1, max=3600, help="Seconds a forked child may run before it is killed as hung."
        ),
    ] = 60.0,
    as_json: JsonOpt = False,
) -> None:
    """The hard gates (each count 0, pause/resume 100%) with their opportunities and the liveness
    floor, audited from the event log and the side-effect journal; exit 1 on any breach.

    Without --db: the campaign (agent x fault x this store) runs first; its cells say which faults ran,
    which were skipped (agent not installed) and which no agent covers. A forked child of the campaign
    still running at --child-timeout is killed and reported as a liveness failure of its cell
    (``hung_children`` in the breaches): the command exits 1 instead of waiting."""
    from stateward.chaos.permissions import agent_permissions
    from stateward.observability.gates import audit
    from stateward.runtime.agent_registry import process_agents

    campaign: dict[str, object] | None = None
    cells: list[dict[str, object]] = []
    liveness: list[dict[str, object]] = []
    witnessed = 0
    with reported_errors(as_json):
        agents = process_agents(with_test_agents=True)
        if db is None:
            import tempfile

            from stateward.chaos.campaign import Campaign, SourceFault

            known = {f.value: f for f in SourceFault}
            unknown = [name for name in only or () if name not in known]
            if unknown:
                raise UserError(
                    f"unknown fault {unknown[0]!r}; known: {', '.join(known)}", code=ErrorCode.INVALID_ARGUMENT
                )
            faults = None if not only else [known[name] for name in only]
            db = store or str(Path(tempfile.mkdtemp(prefix="stateward-gates-")) / "gates.db")
            ran = Campaign(
                db,
                agents,
                size=size,
                seed=seed,
                storm_kills=kills,
                only=faults,
                agents_only=agent or None,
                quick=quick,
                child_timeout_s=child_timeout,
            ).run()
            cells = [c.model_dump(mode="json") for c in ran.cells]
            liveness = [f.model_dump(mode="json") for f in ran.liveness_failures]
            witnessed = ran.witnessed_duplicates
            campaign = {
                "cells": cells,
                "storm_kills": ran.storm["kills"],
                "witnessed_duplicates": witnessed,
                "errors": ran.errors,
                "liveness_failures": liveness,
                "quick": quick,
            }
        runtime = open_runtime(db)
        ids: list[str] = []
        cursor = None
        while len(ids) < max_runs:
            page = runtime.list_runs(limit=min(1000, max_runs - len(ids)), cursor=cursor)
            ids += [r.run_id for r in page.items]
            cursor = page.next_cursor
            if cursor is None:
                break
        report = audit(runtime.store, ids, permissions=agent_permissions(agents), witnessed_duplicates=witnessed)
    # A child that hung is a liveness failure of the campaign itself, whatever the runs' records say.
    breaches = [*report.breaches(), *(["hung_children"] if liveness else [])]
    passed = report.passed and not liveness
    data = {"db": db, **report.model_dump(mode="json"), "passed": passed, "breaches": breaches, "campaign": campaign}
    if as_json:
        emit_json(data)
    else:
        rows = [
            {"gate": g.name, "value": g.value, "opportunities": g.opportunities, "holds": g.holds} for g in report.gates
        ]
        print_table(f"gates over {report.runs} runs ({db})", ("gate", "value", "opportunities", "holds"), rows)
        typer.echo(f"finished or waiting: {report.finished_or_waiting} (floor 0.95): {report.liveness_holds}")
        typer.echo(f"scope violations refused: {report.scope_violations_refused}")
        if cells:
            columns = ("agent", "fault", "coverage", "runs", "unobserved", "kills", "hung", "reason")
            print_table("campaign", columns, cells)
        for failure in liveness:
            typer.echo(f"liveness failure: {failure['agent']} / {failure['fault']}: {failure['detail']}", err=True)
    if not passed:
        raise typer.Exit(1)


@requests_app.command("expire")
def requests_expire(db: DbOpt = DEFAULT_DB, as_json: JsonOpt = False) -> None:
    """Apply each agent's expiry policy (fail / cancel / escalate) to expired requests."""
    with reported_errors(as_json):
        expired = open_runtime(db, writes=True).expire_requests()
    if as_json:
        emit_json({"expired": expired})
    else:
        typer.echo(f"expired: {', '.join(expired) or 'none'}")


def run() -> None:
    """Run the Typer app on ``sys.argv``, mounting only the lazy group the command line names.

    A command line that asks for ``--json`` gets its usage errors as JSON too (same exit code, 2).
    """
    import sys

    first = next((a for a in sys.argv[1:] if not a.startswith("-")), None)
    with reported_errors("--json" in sys.argv[1:]):
        _mount(first)
    if "--json" not in sys.argv[1:]:
        app()
        return
    try:
        code = app(standalone_mode=False)
    except typer.Abort:
        sys.stderr.write("Aborted!\n")
        raise SystemExit(1) from None
    except Exception as exc:
        usage = _usage_error(exc)
        if usage is None:
            raise
        emit_json({"error": {"code": "USAGE_ERROR", "message": usage[1]}})
        raise SystemExit(usage[0]) from None
    raise SystemExit(code if isinstance(code, int) else 0)


def _usage_error(exc: Exception) -> tuple[int, str] | None:
    """(exit code, message) of a Click usage error. Typer vendors Click in recent releases, so the
    exception class has no one import path across the versions we support: recognise it by shape."""
    exit_code, message = getattr(exc, "exit_code", None), getattr(exc, "format_message", None)
    if isinstance(exit_code, int) and callable(message):
        return exit_code, str(message())
    return None
