"""``stateward agents``: the agents this process may build, by registered name."""

from __future__ import annotations

from typing import Any

from stateward.cli.output import emit_json, print_table, reported_errors
from stateward.cli.plugins import JsonOpt


def agents_list(as_json: JsonOpt = False) -> None:
    """The agents this process would build: built-ins, entry points, STATEWARD_AGENTS and --agents."""
    from stateward.runtime.agent_registry import process_agents

    with reported_errors(as_json):
        rows = [
            {
                "name": e.name,
                "version": _version_of(e),
                "compatible_with": list(e.compatible_with),
                "migrates_from": sorted(e.migrations),
                "source": e.source,
                "description": e.description,
            }
            for e in process_agents()
        ]
    if as_json:
        emit_json(rows)
    else:
        print_table("agents", ["name", "version", "compatible_with", "migrates_from", "source", "description"], rows)


def _version_of(entry: Any) -> str | None:
    """The version an agent's runs record here (given, or its fingerprint); None when its factory cannot
    be loaded in this process (its runs are refused at build, by name)."""
    from stateward.core.errors import StatewardError

    try:
        return str(entry.resolved_version())
    except StatewardError:
        return None
