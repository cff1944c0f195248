"""``stateward run NAME``: start a run of any registered agent, with JSON params and an optional model.

How ``--param`` and ``--model`` reach the agent (see also ``runtime/agent_registry.py``)::

    --param k=v      v is read as strict JSON where it parses (k=5 -> 5, k=true -> true,
                     k='"5"' -> "5", k='{"a": 1}' -> {"a": 1}), else taken as text (k=x -> "x").
                     A key given twice, duplicate keys inside a value, NaN or an infinity are refused.
    --model SPEC     the reserved param ``model_spec`` (e.g. openai:gpt-4o-mini, replay:rec.jsonl), given
                     only to a factory that declares ``model_spec`` (or takes ``**params`` / a ``params``
                     dict); any other agent refuses it with MODEL_NOT_SUPPORTED.

The factory is called once here to validate the params (INVALID_AGENT_PARAMS if it refuses them)
before anything is written; the run stores exactly those params, so a worker or an ``approve`` in
another process rebuilds the same agent.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from stateward.cli import DEFAULT_DB
from stateward.cli.output import answer_hint, emit_json, print_summary, reported_errors
from stateward.cli.plugins import DbOpt, JsonOpt, ModelOpt
from stateward.cli.stores import open_backend
from stateward.core.errors import DecisionParseError, ErrorCode, RunError


def parse_params(pairs: list[str]) -> dict[str, Any]:
    """``["k=v", ...]`` as a params dict (INVALID_AGENT_PARAMS for a malformed or repeated pair)."""
    from stateward.core.decision import read_json

    params: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise _bad(f"--param needs key=value, not {pair[:80]!r}")
        key = key.strip()
        if key in params:
            raise _bad(f"--param {key} is given twice")
        try:
            params[key] = read_json(raw)
        except DecisionParseError as exc:
            if exc.code != ErrorCode.NOT_JSON:  # JSON, but not a value a run may hold
                raise _bad(f"--param {key}: {exc.message}") from None
            params[key] = raw
    return params


def _bad(message: str) -> RunError:
    return RunError(message, code=ErrorCode.INVALID_AGENT_PARAMS)


def run_agent(
    name: Annotated[str, typer.Argument(help="A registered agent name (see `stateward agents list`).")],
    goal: Annotated[str, typer.Option("--goal", help="What the run is to achieve.")],
    param: Annotated[
        list[str] | None,
        typer.Option(
            "--param",
            help="k=v (repeatable): a factory param, v read as JSON where it parses (5, true, null, '\"x\"', {...}),"
            " else as text.",
        ),
    ] = None,
    model: ModelOpt = None,
    db: DbOpt = DEFAULT_DB,
    tenant: Annotated[str, typer.Option("--tenant", help="The tenant the run belongs to.")] = "default",
    no_drive: Annotated[bool, typer.Option("--no-drive", help="Only submit the run; a worker drives it.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Start a run of any registered agent; returns when it stops (e.g. waiting for an approval).

    The agent is built here from its params first (INVALID_AGENT_PARAMS, MODEL_NOT_SUPPORTED or
    AGENT_NOT_REGISTERED before anything is written); the run stores its name and exactly these params.
    """
    from stateward.runtime.agent_registry import process_agents
    from stateward.runtime.summary import run_summary

    with reported_errors(as_json):
        registry = process_agents()
        agent = registry.create(name, parse_params(param or []), model_spec=model)
        runtime = open_backend(db, create=True, writes=True, agents=registry)
        state = runtime.submit(agent, goal, tenant=tenant) if no_drive else runtime.start(agent, goal, tenant=tenant)
        out = run_summary(runtime.store, state)
    out["pending_request_id"] = None if state.pending is None else state.pending.request_id
    out["agent_ref"] = state.agent.model_dump(mode="json")
    if as_json:
        emit_json(out)
        return
    print_summary(out)
    if state.pending is not None:
        typer.echo(f"  answer with: {answer_hint(state.run_id, state.pending, db, state.tenant)}")
