"""The ``stateward`` command line as one Typer app (answers also have a Typer-free path: cli/answers.py).

This module builds the app and mounts its groups; each command lives in the module of its job
(``cli/<group>_cmd.py``) and is registered here, in the order ``stateward --help`` lists them.
"""

from __future__ import annotations

import typer

from stateward.cli import (
    agents_cmd,
    answer_cmd,
    audit_cmd,
    fleet_cmd,
    lifecycle_cmd,
    replay_cmd,
    requests_cmd,
    run_cmd,
    runs_cmd,
    trace_cmd,
)
from stateward.cli.fleet_cmd import worker as worker  # re-exported: tests read the command's options
from stateward.cli.output import emit_json, reported_errors
from stateward.cli.plugins import load_group, plugin_groups

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


# Top-level commands, in the order `stateward --help` lists them (heavy imports happen inside each).
app.command("replay")(replay_cmd.replay)
app.command("run")(run_cmd.run_agent)
app.command("trace")(trace_cmd.trace)
app.command("approve")(answer_cmd.approve)
app.command("reject")(answer_cmd.reject)
app.command("reply")(answer_cmd.reply)
app.command("pause")(lifecycle_cmd.pause)
app.command("resume")(lifecycle_cmd.resume)
app.command("cancel")(lifecycle_cmd.cancel)
app.command("worker")(fleet_cmd.worker)
app.command("stats")(audit_cmd.stats)
app.command("serve")(fleet_cmd.serve)
app.command("chaos")(audit_cmd.chaos)
app.command("gates")(audit_cmd.gates)

agents_app.command("list")(agents_cmd.agents_list)
runs_app.command("show")(runs_cmd.runs_show)
runs_app.command("list")(runs_cmd.runs_list)
runs_app.command("migrate")(runs_cmd.runs_migrate)
runs_app.command("fork")(runs_cmd.runs_fork)
requests_app.command("list")(requests_cmd.requests_list)
requests_app.command("expire")(requests_cmd.requests_expire)


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
