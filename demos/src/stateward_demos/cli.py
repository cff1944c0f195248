"""``stateward demo ...``: the demonstrations, mounted into the ``stateward`` command by entry point."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer

from stateward import inert
from stateward.cli.plugins import (
    DEFAULT_DB,
    DbOpt,
    JsonOpt,
    ModelOpt,
    answer_hint,
    emit_json,
    open_runtime,
    print_table,
    reported_errors,
)

app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="Runnable demonstrations on offline fixtures.")


@app.command("stop-signal")
def demo_stop_signal(
    as_json: JsonOpt = False,
    materials: Annotated[str, typer.Option(help="Fixture set: default | no_clue.")] = "default",
    model: ModelOpt = None,
) -> None:
    """Naive loops vs the Runtime, for ReAct, plan-and-execute and workflow (scripted models, or --model)."""
    from stateward_demos.stop_signal import COLUMNS, compare

    with reported_errors(as_json), tempfile.TemporaryDirectory() as tmp:
        rows = compare(Path(tmp), materials, model_spec=model)
    if as_json:
        emit_json(rows)
    else:
        print_table("Who stops the run? (naive rows are counter-examples)", COLUMNS, rows)


@app.command("blog")
def demo_blog(
    controller: Annotated[str, typer.Option(help="react | plan_and_execute | workflow")] = "react",
    db: DbOpt = DEFAULT_DB,
    max_steps: Annotated[int, typer.Option(min=1, help="Step budget of the run.")] = 12,
    materials: Annotated[str, typer.Option(help="Fixture set: default | no_clue.")] = "default",
    no_drive: Annotated[bool, typer.Option("--no-drive", help="Only submit the run; a worker drives it.")] = False,
    model: ModelOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Start the blog-brief agent; returns when the run stops (normally waiting for approval)."""
    from stateward_demos.blog import build_agent
    from stateward_demos.blog_fixtures import GOAL

    with reported_errors(as_json):
        agent = build_agent(controller, max_steps=max_steps, materials=materials, model_spec=model)
        runtime = open_runtime(db, create=True)
        state = runtime.submit(agent, GOAL) if no_drive else runtime.start(agent, GOAL)
    out = {
        "run_id": state.run_id,
        "status": state.status.value,
        "pending_request_id": None if state.pending is None else state.pending.request_id,
    }
    if as_json:
        emit_json(out)
        return
    typer.echo(f"run {out['run_id']} stopped: {out['status']}")
    if state.pending is not None:
        who = "stateward asks" if state.pending.asked_by == "runtime" else "model says"
        typer.echo(f"  {state.pending.request_id}: {who}: {inert(state.pending.question)}")
        typer.echo(f"  answer with: {answer_hint(state.run_id, state.pending, db, state.tenant)}")


@app.command("payment-migration")
def demo_payment_migration(
    db: DbOpt = DEFAULT_DB,
    approve: Annotated[
        bool, typer.Option("--approve", help="Approve the delivery in-process (as demo-reviewer) and finish.")
    ] = False,
    model: ModelOpt = None,
    fault: Annotated[
        str | None,
        typer.Option(
            help="Run under one of the case's faults (doc-search-timeout | authority-conflict | budget | "
            "pause-resume | injection | doc-search-timeout-once | same-search | high-risk-low-confidence | "
            "conflicting-authorities), "
            "or 'all' for the table of every fault. The run is kept in --db; --approve approves its delivery."
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Run the 18-item payment SDK migration plan; it stops for approval before delivering the report."""
    from stateward_demos.payment.agent import build_agent, goal, summary

    if fault is not None:
        _payment_faults(fault, as_json, db, approve)
        return
    with reported_errors(as_json):
        agent = build_agent(model_spec=model)
        runtime = open_runtime(db, create=True)
        state = runtime.start(agent, goal().objective)
        if approve and state.pending is not None:
            state = runtime.approve(state.run_id, state.pending.request_id, by="demo-reviewer").state
        out = summary(runtime, state)
    if as_json:
        emit_json(out)
        return
    _print_payment(out, db)


def _payment_faults(name: str, as_json: bool, db: str, approve: bool) -> None:
    """Each fault's run, judged against the source's expected outcome, kept in ``--db`` (``all``: one store per
    fault beside it, ``<db>.<fault>.db``) so another process can answer a pending request; ``--approve``
    approves a pending delivery as demo-reviewer after judging (a handoff is left to a person)."""
    from stateward_demos.payment.fault_runs import COLUMNS, run_fault
    from stateward_demos.payment.faults import Fault, parse

    by = "demo-reviewer" if approve else None
    with reported_errors(as_json), tempfile.TemporaryDirectory() as tmp:
        try:
            chosen = list(Fault) if name == "all" else [parse(name)]
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
        path = Path(db)
        stores = {f: path if name != "all" else path.with_name(f"{path.name}.{f}.db") for f in chosen if f}
        rows = [run_fault(f, Path(tmp), db=stores[f], approve_as=by) for f in chosen if f is not None]
    if as_json:
        emit_json(rows if name == "all" else rows[0])
        return
    print_table("The payment case under its faults", COLUMNS, [{c: r[c] for c in COLUMNS} for r in rows])
    if name != "all":
        row = rows[0]
        _print_payment({"run_id": row["run_id"], **row["summary"], "delivery_receipt": None}, db)
        request = row["summary"].get("pending_request_id")
        if row["rung"] == "HANDOFF_PACKAGE" and request is not None:
            typer.echo(
                f"  a handoff: stateward reply {row['run_id']} {request} "
                f"--text continue_authorized|accept_partial|cancel --by <you> --db {db}"
            )


def _print_payment(out: dict[str, Any], db: str) -> None:
    """The source's final summary, then how to answer a pending request."""
    cov = out["coverage"]
    typer.echo(f"run {out['run_id']} stopped: {out['status']}, completion_mode {out['completion_mode']}")
    typer.echo(f"  plan v{out['plan_version']}; delivered as {out['rung']}; final artifact {out['final_artifact']}")
    typer.echo(f"  coverage: expected {cov['expected']}, accessible {cov['accessible']}, analysed {cov['analysed']}")
    typer.echo(
        f"  breaking changes {out['breaking_changes']}, call sites {out['call_sites']}, risk modules {out['risk']}"
    )
    typer.echo("  report versions: " + (", ".join(out["report_versions"]) or "none"))
    for issue in out["unresolved_issues"]:
        typer.echo(f"  unresolved: {inert(issue)}")
    if out["budget_to_continue"] is not None:
        typer.echo(f"  budget to continue: {out['budget_to_continue']}")
    typer.echo("  verification: " + " -> ".join(f"{v['artifact']} {v['outcome']}" for v in out["verifications"]))
    typer.echo("  budget used: " + ", ".join(f"{k}={v}" for k, v in out["budget_used"].items()))
    if out["pending_request_id"] is not None and out["pending_action"] is not None:  # a handoff is no approval
        action = out["pending_action"]
        typer.echo(f"  pending {out['pending_request_id']}: {action.get('tool')} {action.get('args')}")
        typer.echo(f"  answer with: stateward approve {out['run_id']} {out['pending_request_id']} --db {db}")
    if out["delivery_receipt"] is not None:
        typer.echo(f"  delivery-receipt: {out['delivery_receipt']}")


@app.command("conflicting-rules")
def demo_conflicting_rules(as_json: JsonOpt = False) -> None:
    """Two rules that contradict each other (wait for confirmation / never stop), under all three controllers."""
    from stateward_demos.conflicting_rules import COLUMNS, run_conflicting_rules

    rows = run_conflicting_rules()
    if as_json:
        emit_json(rows)
    else:
        print_table("Conflicting rules: which one wins is the Runtime's call", COLUMNS, rows)


@app.command("refund")
def demo_refund(as_json: JsonOpt = False) -> None:
    """refund_order through the Tool Gateway: refusals, timeouts and reconciliation.

    No model is involved, so there is no --model: each scenario makes one fixed call and breaks the payment
    system in one way, because what is shown is what the gateway does with the call (refuse, time out, look the
    refund up, replay it, never repeat it), whatever proposed it.
    """
    from stateward_demos.refund import COLUMNS, run_refund_scenarios

    rows = run_refund_scenarios()
    if as_json:
        emit_json(rows)
    else:
        print_table("Refund through the Tool Gateway", COLUMNS, rows)
