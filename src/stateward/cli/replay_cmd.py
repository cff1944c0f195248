"""``stateward replay RUN --model SPEC``: would another model (or prompt) have decided as the recorded run did?

The run is re-driven offline against its own record (see :mod:`stateward.runtime.replay`): nothing is
written to the operator's store and no tool handler is called. Exit 0 when no divergence was found, 6 when
one was (so a deploy can gate on it), 1 for an unknown run (RUN_NOT_FOUND) or an agent this process cannot
build, 3 for bad input.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from stateward.cli import DEFAULT_DB
from stateward.cli.output import EXIT_DIVERGED, EXIT_REFUSED, emit_json, print_table, reported_errors
from stateward.cli.plugins import DbOpt, JsonOpt, open_runtime
from stateward.core.errors import ErrorCode, StatewardError, UserError

if TYPE_CHECKING:
    from stateward.runtime.agent import Agent
    from stateward.runtime.agent_registry import AgentRegistry
    from stateward.runtime.replay import ReplayReport
    from stateward.store.base import Store

MAX_RUNS = 1000  # runs one --runs table replays at most: nothing unbounded by default
COLUMNS = ("run_id", "compared", "matched", "divergence", "seq", "unrecorded_calls", "model_calls", "error")

ModelSpecOpt = Annotated[
    str | None,
    typer.Option(
        "--model",
        help="The model to replay with (openai[+json]:<name>, anthropic[+json|+json_schema]:<name>, replay:<path>);"
        " it reaches the agent as its model_spec param. Default: the run's own agent as recorded (the demos'"
        " scripted models).",
    ),
]


def agent_for(registry: AgentRegistry, store: Store, run_id: str, model: str | None) -> Agent:
    """The run's registered agent rebuilt from its recorded params, with ``model`` in place of its own."""
    ref = store.load_run(run_id).agent
    if model is None:
        return registry.build(ref)
    params = {k: v for k, v in ref.params.items() if k != "model_spec"}
    return registry.create(ref.name, params, model_spec=model)


def read_run_ids(source: str) -> list[str]:
    """Run ids from ``source`` (a file, or ``-`` for stdin): ``stateward runs list --json`` output, a JSON
    list of ids or rows, or one id a line (INVALID_ARGUMENT for anything else or more than MAX_RUNS)."""
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"--runs {source}: {exc.strerror or exc}", code=ErrorCode.INVALID_ARGUMENT) from None
    try:
        data: Any = json.loads(text)
    except ValueError:
        data = [line.strip() for line in text.splitlines() if line.strip()]
    if isinstance(data, dict):
        data = data.get("runs")
    if not isinstance(data, list):
        raise UserError(
            f"--runs {source}: expected a runs listing, a JSON list or one id a line", code=ErrorCode.INVALID_ARGUMENT
        )
    ids = [row.get("run_id") if isinstance(row, dict) else row for row in data]
    if not all(isinstance(i, str) and i for i in ids):
        raise UserError(f"--runs {source}: every entry must name a run_id", code=ErrorCode.INVALID_ARGUMENT)
    if len(ids) > MAX_RUNS:
        raise UserError(f"--runs {source}: {len(ids)} runs, at most {MAX_RUNS}", code=ErrorCode.INVALID_ARGUMENT)
    return [str(i) for i in ids]


def row(run_id: str, report: ReplayReport | None, error: StatewardError | None) -> dict[str, Any]:
    """One line of the table over many runs."""
    first = None if report is None else report.first_divergence
    return {
        "run_id": run_id,
        "compared": None if report is None else report.compared,
        "matched": None if report is None else report.matched,
        "divergence": None if first is None else first.kind.value,
        "seq": None if first is None else first.seq,
        "unrecorded_calls": None if report is None else len(report.unrecorded_calls),
        "model_calls": None if report is None else report.model_calls,
        "error": None if error is None else error.to_dict(),
    }


def _print_report(report: ReplayReport) -> None:
    typer.echo(
        f"replay of {report.run_id} with {report.model or 'its own models'}: {report.matched} of {report.compared}"
        f" decisions matched (recorded {report.recorded_decisions}, replayed {report.replayed_decisions});"
        f" replay {report.replay_status.value} after {report.replay_steps} steps, {report.model_calls} model calls,"
        f" {report.input_tokens + report.output_tokens} tokens"
    )
    first = report.first_divergence
    if first is None:
        typer.echo("no divergence")
        return
    typer.echo(f"first divergence: {first.kind.value} at decision {first.index} (recorded seq {first.seq})")
    for label, decision in (("recorded", first.recorded), ("replayed", first.replayed)):
        shown = "none" if decision is None else f"{decision.type} {decision.action or ''} {json.dumps(decision.args)}"
        typer.echo(f"  {label}: {shown[:500]}")
    for obs in first.context:
        typer.echo(f"  seen before, step {obs.get('step')}: {obs.get('action')} -> {obs.get('status')}")
    for call in report.unrecorded_calls:
        typer.echo(f"  not executed (no recorded answer): {call['tool']} {json.dumps(call['args'])[:300]}")


def replay(
    run_id: Annotated[str | None, typer.Argument(help="The recorded run (or use --runs).")] = None,
    model: ModelSpecOpt = None,
    from_seq: Annotated[
        int | None,
        typer.Option(
            "--from",
            min=1,
            help="Start from the run's state at this event (the step boundary at or before it):"
            " the decisions after it are the new model's.",
        ),
    ] = None,
    runs: Annotated[
        str | None,
        typer.Option("--runs", help="A file (or - for stdin) of run ids, e.g. `stateward runs list --json`."),
    ] = None,
    max_steps: Annotated[
        int | None, typer.Option("--max-steps", min=1, help="Bound on the replay's steps (default: the run's budget).")
    ] = None,
    db: DbOpt = DEFAULT_DB,
    as_json: JsonOpt = False,
) -> None:
    """Replay a recorded run offline with another model; every tool answered from the run's record.

    Prints where the new model's decisions diverge from the recorded ones. No handler is called and the
    store is not written. Exit 0: no divergence; 6: a divergence; 1: RUN_NOT_FOUND or an agent this process
    cannot build (with --runs: any row's error); 3: bad input.
    """
    from stateward.runtime.agent_registry import process_agents
    from stateward.runtime.replay import replay_run

    with reported_errors(as_json):
        if (run_id is None) == (runs is None):
            raise UserError("name one run, or --runs with a listing", code=ErrorCode.INVALID_ARGUMENT)
        ids = [run_id] if run_id is not None else read_run_ids(str(runs))
        runtime = open_runtime(db)
        registry = process_agents()

        def replayed(one: str) -> ReplayReport:
            agent = agent_for(registry, runtime.store, one, model)
            return replay_run(
                runtime.store, one, agent, model=model, from_seq=from_seq, max_steps=max_steps, agents=registry
            )

        if runs is None:
            report = replayed(ids[0])
    if runs is None:
        if as_json:
            emit_json(report.model_dump(mode="json"))
        else:
            _print_report(report)
        raise typer.Exit(EXIT_DIVERGED if report.diverged else 0)
    rows = []
    for one in ids:
        try:
            rows.append(row(one, replayed(one), None))
        except StatewardError as exc:
            rows.append(row(one, None, exc))
    _report_rows(rows, as_json)


def _report_rows(rows: list[dict[str, Any]], as_json: bool) -> None:
    """The table over many runs, and the exit it calls for: 1 if any row was refused, 6 if any diverged."""
    if as_json:
        emit_json(rows)
    else:
        print_table(
            "replay", COLUMNS, [{**r, "error": None if r["error"] is None else r["error"]["code"]} for r in rows]
        )
    if any(r["error"] is not None for r in rows):
        raise typer.Exit(EXIT_REFUSED)
    raise typer.Exit(EXIT_DIVERGED if any(r["divergence"] is not None for r in rows) else 0)
