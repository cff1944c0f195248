"""The operator's payload codec: what every payload this process sends to Temporal, or reads from it, passes
through (encryption or compression of the run's data at rest in the cluster, as a platform team may require).

It is named like the agents, by the operator: ``STATEWARD_TEMPORAL_CODEC=module:attr`` for the CLI, ``serve``
and the workers, or ``codec=`` in code. Every process of a namespace must use the same one: a payload encoded
with a codec this process lacks is refused by name (CONFIGURATION_ERROR), never misread. Run data never names
a codec; only the operator's environment does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter, PayloadCodec

from stateward.core.entry_points import load_named
from stateward.core.errors import ErrorCode, UserError

CODEC_ENV = "STATEWARD_TEMPORAL_CODEC"


def load_codec(spec: str) -> PayloadCodec:
    """The ``module:attr`` the operator named: a ``PayloadCodec``, or a callable of no arguments that returns one;
    CONFIGURATION_ERROR for anything else."""
    value = load_named(spec, "the payload codec", ErrorCode.CONFIGURATION_ERROR)
    if not isinstance(value, PayloadCodec) and callable(value):
        value = value()
    if not isinstance(value, PayloadCodec):
        raise UserError(
            f"{spec} is a {type(value).__name__}, not a temporalio PayloadCodec", code=ErrorCode.CONFIGURATION_ERROR
        )
    return value


def codec_from_env(env: Mapping[str, str]) -> PayloadCodec | None:
    """The codec ``env`` names, or None when it names none."""
    spec = env.get(CODEC_ENV, "").strip()
    return load_codec(spec) if spec else None


def data_converter(codec: PayloadCodec | None) -> DataConverter:
    """pydantic models in and out (every message is one), through ``codec`` when there is one."""
    if codec is None:
        return pydantic_data_converter
    return dataclasses.replace(pydantic_data_converter, payload_codec=codec)


__all__ = ["CODEC_ENV", "codec_from_env", "data_converter", "load_codec"]
