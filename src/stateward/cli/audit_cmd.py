"""``stateward stats``, ``chaos`` and ``gates``: figures from the event log, the crash storm, and the hard
gates audited from the record."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from stateward.cli import DEFAULT_DB
from stateward.cli.output import emit_json, print_table, reported_errors
from stateward.cli.plugins import DbOpt, JsonOpt
from stateward.cli.stores import open_backend
from stateward.core.errors import ErrorCode, UserError


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
        runtime = open_backend(db)
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


GatesDbOpt = Annotated[
    str | None,
    typer.Option("--db", help="Audit this store's runs; without it, the fault campaign on a new store first."),
]
GatesStoreOpt = Annotated[
    str | None,
    typer.Option("--store", help="Run the campaign on this new store (a SQLite path or postgresql:// URL)."),
]
GatesSizeOpt = Annotated[int, typer.Option(min=1, max=100, help="Repeats of each campaign scenario (CI: 1).")]
GatesKillsOpt = Annotated[int, typer.Option(min=0, help="Process kills of the ledger storm, per size step.")]
GatesSeedOpt = Annotated[int, typer.Option(help="Seed of the campaign.")]
GatesMaxRunsOpt = Annotated[int, typer.Option(min=1, max=1_000_000, help="Audit at most this many runs.")]
GatesOnlyOpt = Annotated[
    list[str] | None,
    typer.Option("--only", help="Run only the campaign cells of this source fault (repeatable)."),
]
GatesAgentOpt = Annotated[
    list[str] | None,
    typer.Option("--agent", help="Run only the campaign cells of this registered agent (repeatable)."),
]
GatesQuickOpt = Annotated[
    bool, typer.Option("--quick", help="Every cell, fewer rows: two boundaries per agent, one row per cell.")
]
GatesChildTimeoutOpt = Annotated[
    float,
    typer.Option(
        "--child-timeout", min=1, max=3600, help="Seconds a forked child may run before it is killed as hung."
    ),
]


def gates(
    db: GatesDbOpt = None,
    store: GatesStoreOpt = None,
    size: GatesSizeOpt = 1,
    kills: GatesKillsOpt = 15,
    seed: GatesSeedOpt = 1,
    max_runs: GatesMaxRunsOpt = 10_000,
    only: GatesOnlyOpt = None,
    agent: GatesAgentOpt = None,
    quick: GatesQuickOpt = False,
    child_timeout: GatesChildTimeoutOpt = 60.0,
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

    campaign: dict[str, Any] | None = None
    with reported_errors(as_json):
        agents = process_agents(with_test_agents=True)
        if db is None:
            import tempfile

            db = store or str(Path(tempfile.mkdtemp(prefix="stateward-gates-")) / "gates.db")
            campaign = _campaign(
                db,
                agents,
                size=size,
                seed=seed,
                storm_kills=kills,
                only=_faults(only),
                agents_only=agent or None,
                quick=quick,
                child_timeout_s=child_timeout,
            )
        runtime = open_backend(db)
        witnessed = 0 if campaign is None else campaign["witnessed_duplicates"]
        ids = _run_ids(runtime, max_runs)
        report = audit(runtime.store, ids, permissions=agent_permissions(agents), witnessed_duplicates=witnessed)
    liveness = [] if campaign is None else campaign["liveness_failures"]
    # A child that hung is a liveness failure of the campaign itself, whatever the runs' records say.
    breaches = [*report.breaches(), *(["hung_children"] if liveness else [])]
    passed = report.passed and not liveness
    data = {"db": db, **report.model_dump(mode="json"), "passed": passed, "breaches": breaches, "campaign": campaign}
    if as_json:
        emit_json(data)
    else:
        _print_gates(report, db, campaign)
    if not passed:
        raise typer.Exit(1)


def _faults(only: list[str] | None) -> list[Any] | None:
    """The campaign's source faults named by ``--only`` (None: all); an unknown name is INVALID_ARGUMENT."""
    from stateward.chaos.campaign import SourceFault

    known = {f.value: f for f in SourceFault}
    unknown = [name for name in only or () if name not in known]
    if unknown:
        raise UserError(f"unknown fault {unknown[0]!r}; known: {', '.join(known)}", code=ErrorCode.INVALID_ARGUMENT)
    return None if not only else [known[name] for name in only]


def _campaign(db: str, agents: Any, **options: Any) -> dict[str, Any]:
    """Run the fault campaign on the new store ``db``; what it ran, as the report's ``campaign`` part."""
    from stateward.chaos.campaign import Campaign

    ran = Campaign(db, agents, **options).run()
    return {
        "cells": [c.model_dump(mode="json") for c in ran.cells],
        "storm_kills": ran.storm["kills"],
        "witnessed_duplicates": ran.witnessed_duplicates,
        "errors": ran.errors,
        "liveness_failures": [f.model_dump(mode="json") for f in ran.liveness_failures],
        "quick": options["quick"],
    }


def _run_ids(runtime: Any, max_runs: int) -> list[str]:
    """The ids of at most ``max_runs`` runs of the store, newest first, read a bounded page at a time."""
    ids: list[str] = []
    cursor = None
    while len(ids) < max_runs:
        page = runtime.list_runs(limit=min(1000, max_runs - len(ids)), cursor=cursor)
        ids += [r.run_id for r in page.items]
        cursor = page.next_cursor
        if cursor is None:
            break
    return ids


def _print_gates(report: Any, db: str, campaign: dict[str, Any] | None) -> None:
    """The gates as a table, the liveness and scope lines, and the campaign's cells and failures."""
    rows = [
        {"gate": g.name, "value": g.value, "opportunities": g.opportunities, "holds": g.holds} for g in report.gates
    ]
    print_table(f"gates over {report.runs} runs ({db})", ("gate", "value", "opportunities", "holds"), rows)
    typer.echo(f"finished or waiting: {report.finished_or_waiting} (floor 0.95): {report.liveness_holds}")
    typer.echo(f"scope violations refused: {report.scope_violations_refused}")
    if campaign is not None and campaign["cells"]:
        columns = ("agent", "fault", "coverage", "runs", "unobserved", "kills", "hung", "reason")
        print_table("campaign", columns, campaign["cells"])
    for failure in [] if campaign is None else campaign["liveness_failures"]:
        typer.echo(f"liveness failure: {failure['agent']} / {failure['fault']}: {failure['detail']}", err=True)
