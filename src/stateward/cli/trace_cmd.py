"""``stateward trace``: a run's events in order, long payloads cut with a marker."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from stateward.cli import DEFAULT_DB
from stateward.cli.output import CELL_CHARS, emit_json_lines, print_table, reported_errors
from stateward.cli.plugins import DbOpt, JsonOpt
from stateward.cli.stores import open_backend

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
        runtime = open_backend(db)
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
