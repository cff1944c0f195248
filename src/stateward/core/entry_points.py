"""What installed packages register (agents, store backends, command groups), loaded one way: an entry point
that fails to import is a named error that says which one and why, never a bare traceback."""

from __future__ import annotations

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
