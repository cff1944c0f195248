"""Opening the store a command names: only commands that start runs create one, and a command that
writes first checks the store is not damaged. Free of Typer, so the short answer path can use it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from stateward.core.errors import ErrorCode, UserError
from stateward.runtime.runtime import Runtime
from stateward.temporal.opening import open_temporal
from stateward.temporal.target import is_temporal_url

if TYPE_CHECKING:
    from stateward.temporal.client import TemporalRuntime


def open_runtime(db: str, *, create: bool = False, writes: bool = False, **kwargs: Any) -> Runtime:
    """A Runtime on ``db``. Only commands that start runs create a database; the rest refuse a path
    that holds none (``STORE_NOT_FOUND``), so a typo never leaves an empty store behind. A command that
    ``writes`` first runs the store's integrity check: nothing is written into a damaged store
    (``STORE_CORRUPT``)."""
    if is_temporal_url(db):
        raise UserError(
            "this command does not run on a Temporal backend (it works on a store: a SQLite path or a postgresql://"
            " URL); see docs/deployment.md for what a Temporal backend offers",
            code=ErrorCode.STORE_UNSUPPORTED,
            details={"db": db[:200]},
        )
    runtime = Runtime.open(db, create=create, **kwargs)
    if writes:
        try:
            runtime.store.check_integrity()
        except BaseException:
            runtime.close()
            raise
    return runtime


def open_backend(db: str, *, create: bool = False, writes: bool = False, **kwargs: Any) -> Runtime | TemporalRuntime:
    """:func:`open_runtime`, or for a ``temporal://`` URL the runtime over that Temporal namespace (its runs are
    workflows: the commands that start, answer, control and read runs work on either)."""
    if not is_temporal_url(db):
        return open_runtime(db, create=create, writes=writes, **kwargs)
    return open_temporal(db, agents=kwargs.get("agents"))
