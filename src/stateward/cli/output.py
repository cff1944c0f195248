"""Printing results and errors the same way in every command."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NoReturn

from stateward.core.errors import StatewardError

# Exit codes: 0 success; 1 a request was refused or a run/request was not found (named error code);
# 2 bad command-line usage (Typer's own); 3 bad input file or configuration; 4 an answer was
# recorded but this process could not drive the run (it stays RUNNING for a worker or a resume);
# 5 a worker stopped because of runs that crashed or could not be driven (see ``worker --help``).
EXIT_REFUSED = 1
EXIT_BAD_INPUT = 3
EXIT_NOT_DRIVEN = 4
EXIT_RUNS_TROUBLED = 5


def emit_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False, default=str) + "\n")


@contextmanager
def reported_errors(as_json: bool) -> Iterator[None]:
    """Turn a StatewardError into a one-line reason (or a JSON error object) and a non-zero exit."""
    try:
        yield
    except StatewardError as exc:
        _report(exc, as_json)
    except Exception as exc:
        failure = _store_failure(exc)
        if failure is None:
            raise
        _report(failure, as_json)


def _report(exc: StatewardError, as_json: bool) -> NoReturn:
    from stateward.core.errors import UserError

    code = EXIT_BAD_INPUT if isinstance(exc, UserError) else EXIT_REFUSED
    if as_json:
        emit_json({"error": exc.to_dict()})
    else:
        sys.stderr.write(f"error: {exc.code}: {exc.message}\n")
    raise SystemExit(code) from None


def _store_failure(exc: Exception) -> StatewardError | None:
    """A SQLite error met after the store opened (a page found corrupt, a lock never released)."""
    sqlite3 = sys.modules.get("sqlite3")  # loaded if a SQLite store was opened; never imported here
    if sqlite3 is None or not isinstance(exc, sqlite3.Error):
        return None
    from stateward.store.sqlite import store_error

    return store_error(exc)


def print_table(
    title: str,
    columns: Sequence[str],
    rows: Sequence[dict[str, Any]],
    fmt: Callable[[Any], str] = lambda v: "null" if v is None else str(v).lower() if isinstance(v, bool) else str(v),
) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for col in columns:
        table.add_column(col, overflow="fold")
    for row in rows:
        table.add_row(*(fmt(row.get(c)) for c in columns))
    # Piped output has no terminal width to fit: print the table whole rather than cut every cell.
    Console(width=None if sys.stdout.isatty() else 300).print(table)


def print_summary(summary: dict[str, object]) -> None:
    """The few lines a person reads after a command moved or inspected a run."""
    print(
        f"run {summary['run_id']}: {summary['status']} ({summary['terminal_reason']})"
        f"  suspended={str(summary['suspended']).lower()}"
    )
    pending = summary.get("pending")
    if isinstance(pending, dict):
        print(f"  waiting on {pending['request_id']}: {pending['question']}")
    setback = summary.get("setback")
    if isinstance(setback, dict):
        retry = f"retry at {setback['retry_at']}" if setback["retry_at"] else "waiting for an operator (resume)"
        print(f"  setback: {setback['kind']} ({setback['error']}), {setback['counts']}; {retry}")
    print(f"  counters: {summary['counters']}")
    print(f"  artifacts: {summary['artifacts']}")
