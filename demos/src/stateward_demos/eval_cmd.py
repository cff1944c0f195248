"""``stateward eval``: run the demo tasks against a real model and report what the runs ended in."""

from __future__ import annotations

import os
import signal
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from stateward.cli.plugins import emit_json, print_table, reported_errors

app = typer.Typer(
    no_args_is_help=True, rich_markup_mode=None, help="Live evaluation of controllers driven by a real model."
)


@app.callback()
def _eval() -> None:
    """Live evaluation of controllers driven by a real model."""


@contextmanager
def _local_server(enabled: bool) -> Iterator[None]:
    """Start the bundled local model and point both providers' base URLs at it for this process."""
    if not enabled:
        yield
        return
    from stateward.models import start_local_server

    # SIGTERM (e.g. from `timeout`) would end this process without unwinding and orphan the server.
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    server = start_local_server()
    saved = {k: os.environ.get(k) for k in ("STATEWARD_OPENAI_BASE_URL", "STATEWARD_ANTHROPIC_BASE_URL")}
    os.environ["STATEWARD_OPENAI_BASE_URL"] = server.openai_url
    os.environ["STATEWARD_ANTHROPIC_BASE_URL"] = server.url
    try:
        yield
    finally:
        server.stop()
        signal.signal(signal.SIGTERM, previous)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _distribution_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"mode": mode, "outcome": outcome, "runs": count}
        for mode, counts in report["distribution"].items()
        for outcome, count in sorted(counts.items(), key=lambda kv: -kv[1])
    ]


@app.command("stop-signal")
def stop_signal(
    model: Annotated[str, typer.Option("--model", help="Model spec, e.g. openai+json:<name> or anthropic:<name>.")],
    runs: Annotated[int, typer.Option("--runs", min=1, help="Runs per controller.")] = 10,
    db: Annotated[
        str | None,
        typer.Option("--db", help="Store for the runs (SQLite path or postgresql:// URL); default temporary."),
    ] = None,
    max_steps: Annotated[int, typer.Option("--max-steps", min=1, help="Step budget of each run.")] = 8,
    controllers: Annotated[
        str, typer.Option("--controllers", help="Comma-separated: react,plan_and_execute,workflow.")
    ] = "react,plan_and_execute,workflow",
    local_server: Annotated[
        bool, typer.Option("--local-server", help="Start the bundled SmolLM2 llama-server and use it.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
) -> None:
    """The blog task N times per controller; outcome distribution and one row per run.

    Exits 1 if the Runtime ever continued past a refused decision.
    """
    from stateward_demos.live_eval import ROW_COLUMNS, run_live_eval

    modes = [m.strip() for m in controllers.split(",") if m.strip()]
    with reported_errors(as_json), _local_server(local_server), tempfile.TemporaryDirectory() as tmp:
        report = run_live_eval(model, runs, db or str(Path(tmp) / "eval.db"), modes=modes, max_steps=max_steps)
    if as_json:
        emit_json(report)
    else:
        print_table(
            f"outcomes of {model} ({runs} runs per controller)", ("mode", "outcome", "runs"), _distribution_rows(report)
        )
        print_table("runs", ROW_COLUMNS, report["rows"])
        typer.echo(f"integrity: {report['integrity']}")
    if report["integrity"]["continued_after_rejection"]:
        raise typer.Exit(1)


@app.command("payment-migration")
def payment_migration(
    model: Annotated[
        str, typer.Option("--model", help="Model spec (as for stop-signal), or 'scripted' for the offline models.")
    ],
    runs: Annotated[int, typer.Option("--runs", min=1, max=100, help="Runs of the case.")] = 5,
    max_steps: Annotated[int, typer.Option("--max-steps", min=1, max=1000, help="Step budget of each run.")] = 200,
    db: Annotated[
        str | None,
        typer.Option("--db", help="Store for the runs (SQLite path or postgresql:// URL); default temporary."),
    ] = None,
    local_server: Annotated[
        bool, typer.Option("--local-server", help="Start the bundled SmolLM2 llama-server and use it.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
) -> None:
    """The payment case N times: the distribution of outcomes and the gate counts (each must be 0).

    Exits 1 if any gate was breached.
    """
    from stateward_demos.payment.evaluation import ROW_COLUMNS, run_payment_eval

    spec = None if model == "scripted" else model
    with reported_errors(as_json), _local_server(local_server), tempfile.TemporaryDirectory() as tmp:
        report = run_payment_eval(spec, runs, db or str(Path(tmp) / "eval.db"), max_steps=max_steps)
    if as_json:
        emit_json(report)
    else:
        rows = [{"outcome": o, "runs": n} for o, n in sorted(report["distribution"].items(), key=lambda kv: -kv[1])]
        print_table(f"outcomes of {report['model']} ({runs} runs)", ("outcome", "runs"), rows)
        print_table(
            "gates (each must be 0)",
            ("gate", "breaches"),
            [{"gate": g, "breaches": n} for g, n in report["gates"].items()],
        )
        print_table("runs", ROW_COLUMNS, report["rows"])
    if any(report["gates"].values()):
        raise typer.Exit(1)


if __name__ == "__main__":
    app()
