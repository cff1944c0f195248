"""Command-line plugins: installed packages add command groups to ``stateward``.

A package declares a Typer app under the entry-point group ``stateward.cli``; its name is the group's
name on the command line (``stateward demo ...`` comes from the ``stateward-demos`` package this
repository ships beside the library). A group is imported only when its name is the command being run
(or for ``--help``), so a plugin never slows ``stateward approve``. A name that a built-in command
already uses is refused (``CLI_PLUGIN_CONFLICT``) rather than shadowed.

The helpers below are what a plugin command needs to behave like the built-in ones: the same
``--db`` / ``--json`` / ``--model`` options, the same JSON and table output, the same error reporting.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from stateward.cli import DEFAULT_DB
from stateward.cli.output import answer_hint, emit_json, print_summary, print_table, reported_errors
from stateward.core.entry_points import load_entry_point
from stateward.core.errors import ErrorCode, UserError

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

    from stateward.runtime.runtime import Runtime

__all__ = [
    "DEFAULT_DB",
    "ENTRY_POINT_GROUP",
    "DbOpt",
    "JsonOpt",
    "ModelOpt",
    "answer_hint",
    "emit_json",
    "load_group",
    "open_runtime",
    "plugin_groups",
    "print_summary",
    "print_table",
    "reported_errors",
]

ENTRY_POINT_GROUP = "stateward.cli"

DbOpt = Annotated[
    str, typer.Option("--db", envvar="STATEWARD_DB", help="SQLite path or postgresql:// URL (default ./stateward.db).")
]
"""``--db``: the store a command works on (also ``STATEWARD_DB``)."""

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
"""``--json``: machine-readable output, errors included."""

ModelOpt = Annotated[
    str | None,
    typer.Option(
        "--model",
        help="Model spec (openai[+json]:<name>, anthropic[+json|+json_schema]:<name>, replay:<path>); reaches the"
        " agent as its model_spec param. Default: the agent's own (the demos' scripted models).",
    ),
]
"""``--model``: a model spec (see :func:`stateward.models.parse_spec`), passed to agents as ``model_spec``."""


def open_runtime(db: str, *, create: bool = False, writes: bool = False, **kwargs: Any) -> Runtime:
    """A Runtime on ``db`` (see :func:`stateward.cli.stores.open_runtime`): only commands that start
    runs create a database (``STORE_NOT_FOUND`` otherwise); one that ``writes`` refuses a damaged store."""
    from stateward.cli import stores

    return stores.open_runtime(db, create=create, writes=writes, **kwargs)


def plugin_groups(taken: set[str]) -> dict[str, EntryPoint]:
    """The installed command groups by name; ``taken`` are the names built-in commands use."""
    from importlib.metadata import entry_points  # only for a command that is not built in, or --help

    found: dict[str, EntryPoint] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in taken:
            raise UserError(
                f"the command-line plugin {ep.value!r} wants the name {ep.name!r}, which a built-in command uses",
                code=ErrorCode.CLI_PLUGIN_CONFLICT,
            )
        found[ep.name] = ep
    return found


def load_group(entry_point: EntryPoint) -> typer.Typer:
    """Import one plugin's Typer app; a plugin that fails to import or is not a Typer app is named."""
    group = load_entry_point(entry_point, "the command-line plugin", ErrorCode.CLI_PLUGIN_BROKEN)
    if not isinstance(group, typer.Typer):
        raise UserError(
            f"{entry_point.value} is a {type(group).__name__}, not a typer.Typer", code=ErrorCode.CLI_PLUGIN_BROKEN
        )
    return group
