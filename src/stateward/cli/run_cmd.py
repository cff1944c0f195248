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

from typing import Any

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
