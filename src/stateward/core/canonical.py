"""Canonical JSON and the digests built on it.

Idempotency keys and approval bindings must not depend on key order, whitespace or how a number was
written by a model, so everything that is hashed goes through one canonical form.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pydantic_core

# ``json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)``, made with
# one encoder built once: ``json.dumps`` with options builds a JSONEncoder on every call, which cost more
# than encoding the small documents (a call's arguments, an idempotency key's parts) hashed on every step.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def canonical_json(value: Any) -> str:
    """Sorted keys, no insignificant whitespace, UTF-8 kept as is."""
    return _CANONICAL.encode(value)


def compact_json(value: Any) -> str:
    """How documents are stored: no whitespace, key order kept, UTF-8 kept as is (four times json.dumps' speed).

    JSON has no NaN or infinity: they are stored as null, so every stored document stays valid JSON
    for the database's own JSON functions. Dates, decimals, sets and bytes are written as pydantic
    writes them in JSON mode (strings and lists).
    """
    return pydantic_core.to_json(value, inf_nan_mode="null").decode()


def sha256_hex(data: str | bytes) -> str:
    raw = data.encode("utf-8") if isinstance(data, str) else data
    return hashlib.sha256(raw).hexdigest()


def args_digest(args: dict[str, Any] | None) -> str:
    return sha256_hex(canonical_json(args or {}))


def action_digest(tool: str, args: dict[str, Any] | None, plan_version: int | None = None) -> str:
    """What an approval is bound to: this tool, these exact arguments, this plan version."""
    return sha256_hex(canonical_json({"tool": tool, "args": args or {}, "plan_version": plan_version}))


def idempotency_key(run_id: str, step: int, tool: str, args: dict[str, Any] | None) -> str:
    """Deterministic per (run, step, tool, canonical args): a retried or replayed step reuses it."""
    return idempotency_key_of(run_id, step, tool, canonical_json(args or {}))


def idempotency_key_of(run_id: str, step: int, tool: str, args_json: str) -> str:
    """:func:`idempotency_key` from the arguments' canonical JSON, when the caller has made it already (the
    gateway hashes it for the attempt record too): the same document, its sorted keys written in order."""
    document = f'{{"args":{args_json},"run":{canonical_json(run_id)},"step":{int(step)},"tool":{canonical_json(tool)}}}'
    return f"idem_{sha256_hex(document)[:32]}"
