"""What installed packages register (agents, store backends, command groups), and what an operator names as
``module:attr`` (an agents source, a payload codec), loaded one way: one that fails to import is a named error
that says which one and why, never a bare traceback."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from stateward.core.errors import ErrorCode, UserError

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint


def load_entry_point(ep: EntryPoint, what: str, code: ErrorCode) -> object:
    """``ep``'s object; a failure to import it is ``code``, naming ``what`` it was to be and the entry point."""
    try:
        return ep.load()
    except Exception as exc:
        raise UserError(f"cannot load {what} {ep.value!r}: {type(exc).__name__}: {exc}", code=code) from exc


def load_named(spec: str, what: str, code: ErrorCode) -> object:
    """The object an operator named as ``module:attr``; a malformed name or a failed import is ``code``, naming
    ``what`` it was to be."""
    module_name, sep, attr = spec.strip().partition(":")
    if not sep or not module_name or not attr:
        raise UserError(f"{what} must be named 'module:attr', not {spec!r}", code=code)
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise UserError(f"cannot load {what} from {spec!r}: {type(exc).__name__}: {exc}", code=code) from exc
