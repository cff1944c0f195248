"""What an agent's params may be, apart from any one agent: the model spec only the operator sets, the
refusal a factory's bad params get, and how a factory that takes one ``params`` dict is recognised."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from stateward.core.errors import ErrorCode, RunError

MODEL_PARAM = "model_spec"  # the param a model spec (``--model``) reaches a factory as


def takes_params_dict(factory: Callable[..., Any]) -> bool:
    """Whether ``factory`` takes one ``params`` dict; remembered per factory (a worker builds an agent per run)."""
    try:
        return _params_dict_cached(factory)
    except TypeError:  # an unhashable callable: inspect it every time
        return _inspect_params_dict(factory)


def _inspect_params_dict(factory: Callable[..., Any]) -> bool:
    try:
        parameters = list(inspect.signature(factory).parameters.values())
    except (TypeError, ValueError):
        return False
    return (
        len(parameters) == 1
        and parameters[0].name == "params"
        and parameters[0].kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    )


_params_dict_cached = functools.lru_cache(maxsize=256)(_inspect_params_dict)


OPERATOR_PARAMS = frozenset({MODEL_PARAM})  # params only the operator sets (CLI --model), never a tenant


def refuse_operator_params(params: Mapping[str, Any]) -> None:
    """Refuse, by name, params a tenant may not send (``POST /v1/runs``): the model a run uses is the
    operator's choice (``stateward run NAME --model SPEC``, an agent's own default), never a request's."""
    refused = sorted(OPERATOR_PARAMS.intersection(params))
    if refused:
        raise RunError(
            f"param {refused[0]!r} is chosen by the operator, not by a request",
            code=ErrorCode.PARAM_NOT_ALLOWED,
            details={"params": refused},
        )


def invalid_params(name: str, why: str) -> RunError:
    """INVALID_AGENT_PARAMS for agent ``name``, saying why (bounded: ``why`` may quote what was sent)."""
    return RunError(
        f"agent {name!r} does not take these params: {why}"[:1000],
        code=ErrorCode.INVALID_AGENT_PARAMS,
        details={"agent": name},
    )
