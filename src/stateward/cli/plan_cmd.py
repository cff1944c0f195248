"""``stateward plan ...``: judge a plan document before anything executes it.

Exit codes are part of the interface so scripts can gate on them: 0 ACCEPT, 1 REVISE, 2 REJECT,
3 the input could not be read as a plan (missing file, not JSON, schema errors).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from stateward.core.errors import StatewardError
from stateward.planning.goal import GoalContract, Scope, read_goal_file
from stateward.planning.plan import Plan, RemainingBudget, read_plan_file
from stateward.planning.validator import ValidationReport, Verdict, validate_plan

app = typer.Typer(help="Work with plan documents.", rich_markup_mode=None, no_args_is_help=True, add_completion=False)

EXIT_FOR_VERDICT = {Verdict.ACCEPT: 0, Verdict.REVISE: 1, Verdict.REJECT: 2}
EXIT_BAD_INPUT = 3


@app.callback()
def _plan() -> None:
    """Work with plan documents (a plan is a proposal until it is validated)."""


def _split(value: str | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    return tuple(part.strip() for part in value.split(",") if part.strip())


def _scope(goal: GoalContract | None, in_scope: str | None, out_of_scope: str | None) -> Scope | None:
    """Command-line scope tags override the goal's; without either, scope is not checked."""
    if goal is None and in_scope is None and out_of_scope is None:
        return None
    base = goal.scope if goal is not None else Scope()
    update: dict[str, Any] = {}
    if (tags := _split(in_scope)) is not None:
        update["in_scope"] = tags
    if (tags := _split(out_of_scope)) is not None:
        update["out_of_scope"] = tags
    return base.model_copy(update=update)


def _print_report(plan: Plan, report: ValidationReport) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    colour = {Verdict.ACCEPT: "green", Verdict.REVISE: "yellow", Verdict.REJECT: "red"}[report.verdict]
    console.print(
        f"[bold {colour}]{report.verdict.value}[/] plan {plan.plan_id} v{plan.version}: "
        f"{len(plan.work_items)} work items, {len(report.issues)} issue(s)"
    )
    if report.issues:
        table = Table("code", "work item", "message")
        for issue in report.issues:
            table.add_row(issue.code.value, issue.work_item_id or "-", issue.message)
        console.print(table)


def _fail(exc: StatewardError, as_json: bool) -> typer.Exit:
    if as_json:
        typer.echo(json.dumps({"error": exc.to_dict()}, ensure_ascii=False))
    else:
        typer.echo(f"error: {exc}", err=True)
    return typer.Exit(EXIT_BAD_INPUT)


@app.command()
def validate(
    plan_file: Annotated[Path, typer.Argument(metavar="PLAN.json", help="Plan document to check.")],
    capabilities: Annotated[
        str | None, typer.Option(help="Comma-separated registered capabilities (omit: not checked).")
    ] = None,
    budget_tool_calls: Annotated[int | None, typer.Option(min=0, help="Remaining tool calls.")] = None,
    budget_model_calls: Annotated[int | None, typer.Option(min=0, help="Remaining model calls.")] = None,
    budget_tokens: Annotated[int | None, typer.Option(min=0, help="Remaining tokens.")] = None,
    scope: Annotated[str | None, typer.Option(help="Comma-separated in-scope tags.")] = None,
    out_of_scope: Annotated[str | None, typer.Option(help="Comma-separated out-of-scope tags.")] = None,
    goal_file: Annotated[
        Path | None,
        typer.Option("--goal", help="Goal contract JSON; its scope and forbidden capabilities apply."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Validate PLAN.json: exit 0 ACCEPT, 1 REVISE, 2 REJECT, 3 unreadable input."""
    try:
        plan = read_plan_file(plan_file)
        goal = read_goal_file(goal_file) if goal_file is not None else None
    except StatewardError as exc:
        raise _fail(exc, as_json) from None
    budget = None
    if (budget_tool_calls, budget_model_calls, budget_tokens) != (None, None, None):
        budget = RemainingBudget(tool_calls=budget_tool_calls, model_calls=budget_model_calls, tokens=budget_tokens)
    report = validate_plan(
        plan,
        capabilities=_split(capabilities),
        budget=budget,
        scope=_scope(goal, scope, out_of_scope),
        goal=goal,
    )
    if as_json:
        typer.echo(json.dumps(report.to_dict(), ensure_ascii=False))
    else:
        _print_report(plan, report)
    raise typer.Exit(EXIT_FOR_VERDICT[report.verdict])
