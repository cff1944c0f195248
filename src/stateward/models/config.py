"""Building a Model from a ``provider[+mode]:name`` spec, as the CLI's ``--model`` and agent params carry it.

Specs::

    openai:<model>              OpenAI-compatible server, native tool calls
    openai+json:<model>         ... JSON-schema constrained replies (servers without tool calling)
    anthropic:<model>           Anthropic Messages API, native tool use
    anthropic+json:<model>      ... plain JSON text replies
    anthropic+json_schema:<model>  ... JSON text constrained by output_config.format
    replay:<path.jsonl>         a recording played back offline (see recording.py)

Only the spec travels with a run (agents are rebuilt from JSON params in any process), so everything
else comes from keyword arguments or the environment. Keys are read from the environment only:

    STATEWARD_OPENAI_BASE_URL, else OPENAI_BASE_URL          base URL (e.g. http://127.0.0.1:8080/v1)
    STATEWARD_OPENAI_API_KEY_ENV                              name of the key variable (default OPENAI_API_KEY)
    STATEWARD_OPENAI_MODE                                     tools | json_schema (a +mode in the spec wins)
    STATEWARD_ANTHROPIC_BASE_URL, else ANTHROPIC_BASE_URL
    STATEWARD_ANTHROPIC_API_KEY_ENV                           default ANTHROPIC_API_KEY
    STATEWARD_ANTHROPIC_MODE                                  tools | json | json_schema
    STATEWARD_MODEL_MAX_TOKENS (unset)  one reply limit for every contract; unset: each contract's own
    STATEWARD_MODEL_MAX_TOKENS_<CONTRACT>  the limit of one reply contract (wins over the flat one), e.g.
        STATEWARD_MODEL_MAX_TOKENS_PLAN_DOCUMENT=8000; defaults: DECISION 1024, STEP_PLAN 2048,
        PLAN_DOCUMENT 6000, PLAN_PATCH 4000, NODE_CONTENT 2048, CHECK_JUDGEMENT 512
        (stateward.models.contracts). A reply cut by its limit is refused as REPLY_TRUNCATED.
    STATEWARD_MODEL_TIMEOUT_S (60)  STATEWARD_MODEL_MAX_ATTEMPTS (3)
    STATEWARD_MODEL_TEMPERATURE (unset; OpenAI-compatible only)
    STATEWARD_MODEL_MAX_STRING (400)  maxLength of every string in JSON-schema constrained replies
    STATEWARD_MODEL_MAX_ITEMS (32)  maxItems of every array of a plan document or plan patch reply
    STATEWARD_MODEL_MAX_REPLY_BYTES (65536)  a longer reply (text + tool arguments) is refused unread
                                             as REPLY_TOO_LARGE; 0 or less means no limit
    STATEWARD_MODEL_PRICES   JSON {"<model>": [usd_per_mtok_in, usd_per_mtok_out]} -> Usage.cost_usd
    STATEWARD_MODEL_RECORD   append every exchange to this JSONL file (replay it with replay:<path>)
    STATEWARD_REPLAY_DIR     replay:<path> must resolve (symlinks followed) inside this directory
    STATEWARD_REPLAY_MAX_BYTES (16 MiB)  a larger recording, or one that is no regular file, is refused
                             unread (RECORDING_NOT_ALLOWED)

A model spec is the operator's choice (``stateward run NAME --model SPEC``): a request to the HTTP
service that names one is refused (PARAM_NOT_ALLOWED).

With a base URL set and no key in the environment (a local llama.cpp / vLLM / Ollama server), a
placeholder key is sent; without a base URL a missing key is a MISSING_API_KEY error naming the variable.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any, cast

from stateward.core.errors import ErrorCode, UserError
from stateward.core.model_io import ReplyContract
from stateward.models.base import Model
from stateward.models.mapping import DEFAULT_MAX_REPLY_BYTES, MAX_STRING
from stateward.models.provider import Prices

PROVIDERS = ("openai", "anthropic", "replay")
MODES: dict[str, tuple[str, ...]] = {
    "openai": ("tools", "json_schema"),
    "anthropic": ("tools", "json", "json_schema"),
}
_ALIASES = {"openai": {"json": "json_schema"}, "anthropic": {}}
LOCAL_PLACEHOLDER_KEY = "stateward-local-no-key"
REPLAY_DIR_ENV = "STATEWARD_REPLAY_DIR"  # replay:<path> must resolve inside this directory when set


def _spec_error(spec: str, why: str) -> UserError:
    return UserError(
        f"model spec {spec!r}: {why}; use openai[+json]:<name>, anthropic[+json|+json_schema]:<name> or replay:<path>",
        code=ErrorCode.INVALID_MODEL_SPEC,
    )


def parse_spec(spec: str) -> tuple[str, str | None, str]:
    """(provider, mode or None, model name)."""
    head, sep, name = spec.partition(":")
    provider, _, mode = head.partition("+")
    if not sep or not name or provider not in PROVIDERS:
        raise _spec_error(spec, "unknown form")
    if provider == "replay":
        if mode:
            raise _spec_error(spec, "replay takes no mode")
        return provider, None, name
    if mode:
        mode = _ALIASES[provider].get(mode, mode)
        if mode not in MODES[provider]:
            raise _spec_error(spec, f"mode {mode!r} is not one of {', '.join(MODES[provider])}")
    return provider, mode or None, name


def _number(env: Mapping[str, str], name: str, default: float | None) -> float | None:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise UserError(f"{name} must be a number", code=ErrorCode.INVALID_MODEL_CONFIG) from None


def _prices(env: Mapping[str, str]) -> Prices | None:
    raw = env.get("STATEWARD_MODEL_PRICES")
    if not raw:
        return None
    try:
        table = json.loads(raw)
        return {str(k): (float(v[0]), float(v[1])) for k, v in table.items()}
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        raise UserError(
            "STATEWARD_MODEL_PRICES must be JSON {model: [in, out]}", code=ErrorCode.INVALID_MODEL_CONFIG
        ) from None


def _reply_limit(env: Mapping[str, str], given: int | None) -> int | None:
    """The reply size limit in bytes: the argument, else the environment, else 64 KiB; <= 0 means none."""
    chosen = given if given is not None else _number(env, "STATEWARD_MODEL_MAX_REPLY_BYTES", DEFAULT_MAX_REPLY_BYTES)
    limit = int(chosen or 0)
    return limit if limit > 0 else None


def _max_items(env: Mapping[str, str]) -> int | None:
    value = _number(env, "STATEWARD_MODEL_MAX_ITEMS", None)
    if value is not None and value < 1:
        raise UserError("STATEWARD_MODEL_MAX_ITEMS must be a positive number", code=ErrorCode.INVALID_MODEL_CONFIG)
    return None if value is None else int(value)


def _flat_limit(env: Mapping[str, str], given: int | None) -> int | None:
    """One reply limit for every contract: the argument, else STATEWARD_MODEL_MAX_TOKENS, else None."""
    value = given if given is not None else _number(env, "STATEWARD_MODEL_MAX_TOKENS", None)
    if value is None:
        return None
    if value < 1:
        raise UserError("STATEWARD_MODEL_MAX_TOKENS must be a positive number", code=ErrorCode.INVALID_MODEL_CONFIG)
    return int(value)


def _limits(env: Mapping[str, str], given: Mapping[ReplyContract, int] | None) -> dict[ReplyContract, int]:
    """Per-contract reply limits: ``STATEWARD_MODEL_MAX_TOKENS_<CONTRACT>``, then the arguments over them."""
    out: dict[ReplyContract, int] = {}
    for contract in ReplyContract:
        name = f"STATEWARD_MODEL_MAX_TOKENS_{contract.name}"
        value = _number(env, name, None)
        if value is not None:
            if value < 1:
                raise UserError(f"{name} must be a positive number", code=ErrorCode.INVALID_MODEL_CONFIG)
            out[contract] = int(value)
    for contract, value in (given or {}).items():
        if value < 1:
            raise UserError(f"max_tokens for {contract} must be positive", code=ErrorCode.INVALID_MODEL_CONFIG)
        out[ReplyContract(contract)] = int(value)
    return out


def _mode(env: Mapping[str, str], provider: str, asked: str | None) -> str:
    """The provider's mode: the spec's or the caller's, else ``STATEWARD_<PROVIDER>_MODE``, else tools."""
    chosen = asked or env.get(f"STATEWARD_{provider.upper()}_MODE") or "tools"
    chosen = _ALIASES[provider].get(chosen, chosen)
    if chosen not in MODES[provider]:
        modes = MODES[provider]
        raise UserError(f"{provider} mode {chosen!r} is not one of {modes}", code=ErrorCode.INVALID_MODEL_CONFIG)
    return chosen


def _endpoint(
    env: Mapping[str, str], provider: str, base_url: str | None, api_key_env: str | None
) -> tuple[str | None, str]:
    """The base URL and API key: a local server (a base URL) may go without a key, a provider's API may not."""
    upper = provider.upper()
    url = base_url or env.get(f"STATEWARD_{upper}_BASE_URL") or env.get(f"{upper}_BASE_URL") or None
    key_var = api_key_env or env.get(f"STATEWARD_{upper}_API_KEY_ENV") or f"{upper}_API_KEY"
    key = env.get(key_var) or None
    if key is None:
        if url is None:
            raise UserError(f"{key_var} is not set (needed by the {provider} provider)", code=ErrorCode.MISSING_API_KEY)
        key = LOCAL_PLACEHOLDER_KEY
    return url, key


def model_from_spec(
    spec: str,
    *,
    base_url: str | None = None,
    api_key_env: str | None = None,
    mode: str | None = None,
    max_tokens: int | None = None,
    max_tokens_by_contract: Mapping[ReplyContract, int] | None = None,
    temperature: float | None = None,
    timeout_s: float | None = None,
    max_attempts: int | None = None,
    max_reply_bytes: int | None = None,
    prices: Prices | None = None,
    record: str | None = None,
    env: Mapping[str, str] | None = None,
) -> Model:
    """A ready Model for ``spec``: provider, wrapped in RetryingModel, and in RecordingModel if asked."""
    from stateward.models.recording import MAX_RECORDING_BYTES, RecordingModel, ReplayModel
    from stateward.models.retrying import RetryingModel

    env = os.environ if env is None else env
    provider, spec_mode, name = parse_spec(spec)
    if provider == "replay":
        root = env.get(REPLAY_DIR_ENV) or None
        limit = int(_number(env, "STATEWARD_REPLAY_MAX_BYTES", MAX_RECORDING_BYTES) or MAX_RECORDING_BYTES)
        return ReplayModel(name, root=root, max_bytes=limit)
    chosen_mode = _mode(env, provider, spec_mode or mode)
    url, key = _endpoint(env, provider, base_url, api_key_env)
    common: dict[str, Any] = {
        "api_key": key,
        "base_url": url,
        "max_tokens": _flat_limit(env, max_tokens),
        "max_tokens_by_contract": _limits(env, max_tokens_by_contract),
        "timeout_s": timeout_s or _number(env, "STATEWARD_MODEL_TIMEOUT_S", 60.0) or 60.0,
        "prices": prices if prices is not None else _prices(env),
        "max_string": int(_number(env, "STATEWARD_MODEL_MAX_STRING", MAX_STRING) or MAX_STRING),
        "max_items": _max_items(env),
        "max_reply_bytes": _reply_limit(env, max_reply_bytes),
    }
    model: Model
    if provider == "openai":
        from stateward.models.openai_compat import OpenAICompatibleModel, OpenAIMode

        temp = temperature if temperature is not None else _number(env, "STATEWARD_MODEL_TEMPERATURE", None)
        model = OpenAICompatibleModel(name, mode=cast(OpenAIMode, chosen_mode), temperature=temp, **common)
    else:
        from stateward.models.anthropic import AnthropicMode, AnthropicModel

        model = AnthropicModel(name, mode=cast(AnthropicMode, chosen_mode), **common)
    attempts = max_attempts or int(_number(env, "STATEWARD_MODEL_MAX_ATTEMPTS", 3) or 3)
    model = RetryingModel(model, attempts)
    record_path = record or env.get("STATEWARD_MODEL_RECORD")
    return RecordingModel(model, record_path) if record_path else model
