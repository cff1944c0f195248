"""Printing results and errors the same way in every command.

Text views show what the store holds made inert (:func:`stateward.core.inert.inert`): control and
bidirectional characters escaped, lengths bounded, and Rich cells built as plain ``Text`` so markup in
a model's words (``[red]``, ``[link=...]``) prints literally. JSON output is data: raw, JSON-escaped.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NoReturn

from stateward.core.errors import StatewardError
from stateward.core.inert import inert

# Exit codes: 0 success; 1 a request was refused or a run/request was not found (named error code);
# 2 bad command-line usage (Typer's own); 3 bad input file or configuration; 4 an answer was
# recorded but this process could not drive the run (it stays RUNNING for a worker or a resume);
# 5 a worker stopped because of runs that crashed or could not be driven (see ``worker --help``);
# 6 a replay found a divergence from the recorded run (see ``replay --help``).
EXIT_REFUSED = 1
EXIT_BAD_INPUT = 3
EXIT_NOT_DRIVEN = 4
EXIT_RUNS_TROUBLED = 5
EXIT_DIVERGED = 6


def say(line: str) -> None:
    """Write one status line on stderr at once (a worker's start and stop lines, read as they happen)."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def emit_json(value: Any) -> None:
    """Print ``value`` as indented JSON on stdout (what every ``--json`` prints)."""
    sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False, default=str) + "\n")


def emit_json_lines(rows: list[dict[str, Any]]) -> None:
    """Print ``rows`` as one JSON array with one compact row per line: a long listing (a run's trace) stays
    a JSON document, readable line by line, without indentation outweighing its content."""
    lines = [json.dumps(row, ensure_ascii=False, separators=(",", ":"), default=str) for row in rows]
    sys.stdout.write("[\n" + ",\n".join(lines) + ("\n]\n" if lines else "]\n"))


@contextmanager
def reported_errors(as_json: bool) -> Iterator[None]:
    """Turn a StatewardError into a one-line reason (or a JSON error object) and a non-zero exit."""
    try:
        yield
    except StatewardError as exc:
        _report(exc, as_json)


def _report(exc: StatewardError, as_json: bool) -> NoReturn:
    from stateward.core.errors import UserError

    code = EXIT_BAD_INPUT if isinstance(exc, UserError) else EXIT_REFUSED
    if as_json:
        emit_json({"error": exc.to_dict()})
    else:
        sys.stderr.write(f"error: {exc.code}: {exc.message}\n")
    raise SystemExit(code) from None


def print_table(
    title: str,
    columns: Sequence[str],
    rows: Sequence[dict[str, Any]],
    fmt: Callable[[Any], str] = lambda v: "null" if v is None else str(v).lower() if isinstance(v, bool) else str(v),
    cell_chars: int | None = None,
) -> None:
    """Print ``rows`` as a Rich table with these ``columns`` (booleans and None as JSON spells them); a cell
    longer than ``cell_chars`` (default CELL_CHARS) is cut with a marker saying how much is left out."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(title=inert(title))
    for col in columns:
        table.add_column(col, overflow="fold")
    for row in rows:  # Text, not str: a cell is never read as markup
        table.add_row(*(Text(inert(fmt(row.get(c)), cell_chars or CELL_CHARS)) for c in columns))
    # Piped output has no terminal width to fit: print the table whole rather than cut every cell.
    Console(width=None if sys.stdout.isatty() else 300).print(table)


CELL_CHARS = 2000
ARGS_CHARS = 2000


def pending_lines(pending: dict[str, Any], indent: str = "  ") -> list[str]:
    """What a person must see before answering: the exact guarded action and the model's words, inert.

    ``pending`` has the keys of ``requests list --json`` / ``runs show --json``'s pending object.
    """
    guarded = pending.get("guarded_action")
    reconciling = pending.get("kind") == "reconciliation"
    lines = [f"request {inert(pending.get('request_id'))} ({inert(pending.get('kind'))})"]
    if isinstance(guarded, dict):
        args = json.dumps(guarded.get("args") or {}, ensure_ascii=False, sort_keys=True)
        plan_version = guarded.get("plan_version")
        lines += [
            f"  {'unknown call:  ' if reconciling else 'guarded action:'} {inert(guarded.get('tool'))}",
            f"    arguments:    {inert(args, ARGS_CHARS)}",
            f"    digest:       {inert(guarded.get('digest'))}",
            f"    plan version: {'none' if plan_version is None else inert(str(plan_version))}",
        ]
    else:
        lines.append("  guarded action: none (an answer admits no tool call by itself)")
    role, expires = pending.get("approver_role"), pending.get("expires_at")
    scope = pending.get("approval_scope") or "once"
    if reconciling:
        lines += _reconciliation_lines(pending)
    lines += [
        "  admits:         nothing (an answer records what became of this call)"
        if reconciling
        else f"  admits:         {'this call for the rest of the run' if scope == 'run' else 'this call, once'}"
        if isinstance(guarded, dict)
        else "  admits:         nothing by itself",
        f"  approver role:  {'any' if role is None else inert(role)}",
        *_escalation_lines(pending),
        f"  expires:        {'never' if expires is None else inert(str(expires))}",
    ]
    if pending.get("asked_by") == "runtime" or reconciling:  # a reconciliation's question is always the Runtime's
        # The Runtime wrote this question from the proposed call; the model's words, if any, come apart.
        lines.append(f"  stateward asks: {inert(pending.get('question'))}")
        if pending.get("model_text"):
            lines.append(f"  model says:     {inert(pending.get('model_text'))}")
    else:
        lines.append(f"  model says:     {inert(pending.get('question'))}")
    return [indent + line for line in lines]


def _reconciliation_lines(pending: dict[str, Any]) -> list[str]:
    """What each answer to a reconciliation does, in the words of the command that gives it."""
    target = pending.get("reconciles")
    key = target.get("idempotency_key") if isinstance(target, dict) else None
    retry = isinstance(target, dict) and not target.get("retry_spent")
    no = "NOT_EXECUTED, retried once under the same key" if retry else "NOT_EXECUTED, the step fails (no retry)"
    return [
        f"  idempotency key: {'unknown' if key is None else inert(str(key))}",
        "  approve:        it happened: recorded as succeeded, confirmed by you; the run goes on",
        f"  reject:         it did not happen: {no}",
    ]


def _escalation_lines(pending: dict[str, Any]) -> list[str]:
    """A child's handoff escalated to its parent's approvers says so: whose it was, whose it is now."""
    escalation = pending.get("escalation")
    if not isinstance(escalation, dict):
        return []
    was = escalation.get("child_role")
    parent = inert(str(escalation.get("parent_run_id")))
    return [f"  escalated:      to the approvers of parent run {parent} (the child's role: {inert(str(was))})"]


def print_summary(summary: dict[str, object]) -> None:
    """The few lines a person reads after a command moved or inspected a run."""
    print(
        f"run {inert(str(summary['run_id']))}: {summary['status']} ({inert(str(summary['terminal_reason']))})"
        f"  suspended={str(summary['suspended']).lower()}"
    )
    pending = summary.get("pending")
    if isinstance(pending, dict):
        print("\n".join(pending_lines(pending)))
    setback = summary.get("setback")
    if isinstance(setback, dict):
        retry = f"retry at {setback['retry_at']}" if setback["retry_at"] else "waiting for an operator (resume)"
        print(f"  setback: {setback['kind']} ({setback['error']}), {setback['counts']}; {retry}")
    print(f"  counters: {summary['counters']}")
    print(f"  artifacts: {inert(str(summary['artifacts']), CELL_CHARS)}")
    above = summary.get("chain")
    if isinstance(above, list) and above:
        print(f"  called by: {inert(' > '.join(str(r) for r in above))}")
    below = summary.get("children")
    if isinstance(below, list):
        for child in below:
            if isinstance(child, dict):
                ended = f" ({inert(str(child['terminal_reason']))})" if child.get("terminal_reason") else ""
                print(f"  child: {inert(str(child['run_id']))} {inert(str(child['agent']))} {child['status']}{ended}")


def answer_hint(run_id: str, pending: Any, db: str, tenant: str = "default") -> str:
    """The command that answers ``pending`` (a PendingRequest), with every flag it needs: the verb its kind
    takes (``reply --text`` for a question or a handoff, naming the options), ``--role`` when the request
    names an approver role, ``--tenant`` outside the default tenant, and ``--db``."""
    import shlex

    kind = str(getattr(pending.kind, "value", pending.kind))
    if kind == "handoff":
        choices = "|".join(pending.options) or "OPTION"
        verb = f"reply {shlex.quote(run_id)} {shlex.quote(pending.request_id)} --text {shlex.quote(choices)}"
    elif kind == "input":
        verb = f"reply {shlex.quote(run_id)} {shlex.quote(pending.request_id)} --text '...'"
    else:
        verb = f"approve {shlex.quote(run_id)} {shlex.quote(pending.request_id)}"
    flags = [f"--db {shlex.quote(db)}"]
    if pending.approver_role:
        flags.append(f"--role {shlex.quote(pending.approver_role)}")
    if tenant != "default":
        flags.append(f"--tenant {shlex.quote(tenant)}")
    return f"stateward {verb} {' '.join(flags)}"
