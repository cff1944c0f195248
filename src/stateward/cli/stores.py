"""Opening the store a command names: only commands that start runs create one, and a command that
writes first checks the store is not damaged. Free of Typer, so the short answer path can use it."""

from __future__ import annotations

from typing import Any

from stateward.runtime.runtime import Runtime


def open_runtime(db: str, *, create: bool = False, writes: bool = False, **kwargs: Any) -> Runtime:
    """A Runtime on ``db``. Only commands that start runs create a database; the rest refuse a path
    that holds none (``STORE_NOT_FOUND``), so a typo never leaves an empty store behind. A command that
    ``writes`` first runs the store's integrity check: nothing is written into a damaged store
    (``STORE_CORRUPT``)."""
    runtime = Runtime.open(db, create=create, **kwargs)
    if writes:
        try:
            runtime.store.check_integrity()
        except BaseException:
            runtime.close()
            raise
    return runtime
