"""Which store a URL opens: its scheme names a registered backend, and nothing else about the URL chooses code.

- A plain path (no ``scheme://``) or a ``sqlite://`` URL: the embedded SQLite store (the default).
- ``postgresql://`` or ``postgres://``: the PostgreSQL store (psycopg is imported only then).
- Any other scheme: a backend an installed package registered under the ``stateward.stores`` entry-point group
  (the entry point's name is the scheme, its value a ``StoreOpener``), or ``register_backend`` in-process.
  A built-in scheme is never taken over; a scheme nobody registered is ``UNKNOWN_STORE_SCHEME``.

This module imports the implementations, lazily; they import ``store/base.py`` (the protocol and the helpers
both share), which imports neither: no circle between the files.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Protocol

from stateward.core.entry_points import load_entry_point
from stateward.core.errors import ErrorCode, UserError

if TYPE_CHECKING:
    from stateward.store.base import Store
    from stateward.store.postgres import PostgresStore

ENTRY_POINT_GROUP = "stateward.stores"
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


class StoreOpener(Protocol):
    """Opens the store at ``url``; with ``create=False`` only an existing store opens (else ``STORE_NOT_FOUND``)."""

    def __call__(self, url: str, *, create: bool) -> Store:
        """The store at ``url``."""
        ...


def _open_sqlite(url: str, *, create: bool) -> Store:
    from stateward.store.sqlite import SQLiteStore

    return SQLiteStore(sqlite_path(url), create=create)


def _open_postgres(url: str, *, create: bool) -> Store:
    return _postgres_store()(url, create=create)


def _postgres_store() -> type[PostgresStore]:
    try:
        from stateward.store.postgres import PostgresStore
    except ImportError as exc:
        raise UserError(
            f"the PostgreSQL store needs psycopg ({exc}); install it with: pip install 'stateward[postgres]'",
            code=ErrorCode.STORE_UNSUPPORTED,
        ) from None
    return PostgresStore


# The built-in backends, by scheme ("" is a plain path). Fixed: neither an entry point nor register_backend
# replaces one.
BUILT_IN: dict[str, StoreOpener] = {
    "": _open_sqlite,
    "sqlite": _open_sqlite,
    "postgresql": _open_postgres,
    "postgres": _open_postgres,
}
_registered: dict[str, StoreOpener] = {}


def scheme_of(url: str) -> str:
    """The lower-case scheme of ``url`` (``""`` for a plain path)."""
    found = _SCHEME.match(url)
    return "" if found is None else found.group(1).lower()


def register_backend(scheme: str, opener: StoreOpener) -> None:
    """Open ``scheme://`` URLs with ``opener`` in this process (an application's own backend, a test's).

    A built-in scheme cannot be registered: ``INVALID_ARGUMENT``.
    """
    key = scheme.lower()
    if key in BUILT_IN or not _SCHEME.match(f"{key}://"):
        raise UserError(f"{scheme!r} cannot name a store backend", code=ErrorCode.INVALID_ARGUMENT)
    _registered[key] = opener


def backend_for(url: str) -> StoreOpener:
    """The opener for ``url``'s scheme: built in, registered in-process, or an installed entry point."""
    scheme = scheme_of(url)
    opener = BUILT_IN.get(scheme) or _registered.get(scheme) or _from_entry_points(scheme)
    if opener is None:
        known = sorted(s for s in {*BUILT_IN, *_registered} if s)
        raise UserError(
            f"no store backend is registered for {scheme}:// (known: {', '.join(known)}; a package registers one "
            f"under the {ENTRY_POINT_GROUP!r} entry-point group)",
            code=ErrorCode.UNKNOWN_STORE_SCHEME,
            details={"scheme": scheme},
        )
    return opener


def _from_entry_points(scheme: str) -> StoreOpener | None:
    from importlib.metadata import entry_points  # ~50 modules: only for a scheme that is not built in

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name.lower() != scheme:
            continue
        value = load_entry_point(ep, f"the store backend for {ep.name}://", ErrorCode.STORE_UNSUPPORTED)
        if not callable(value):
            raise UserError(
                f"the store backend {ep.name} ({ep.value}) is not callable", code=ErrorCode.STORE_UNSUPPORTED
            )
        opener: StoreOpener = value
        return opener
    return None


def open_store(url: str, *, create: bool = True) -> Store:
    """The store ``url`` names: a SQLite path (the default, embedded), a ``postgresql://`` URL, or another
    registered scheme's.

    psycopg is imported only for a PostgreSQL URL, so the embedded default needs nothing extra. With
    ``create=False`` only an existing stateward store opens (commands that only read or answer use it).
    """
    return backend_for(url)(url, create=create)


def is_postgres_url(url: str) -> bool:
    """Whether ``url`` names a PostgreSQL store."""
    return BUILT_IN.get(scheme_of(url)) is _open_postgres


def import_store(url: str) -> None:
    """Import the implementation ``open_store(url)`` uses (a forking worker supervisor imports it once)."""
    scheme = scheme_of(url)
    if BUILT_IN.get(scheme) is _open_postgres:
        _postgres_store()
    elif BUILT_IN.get(scheme) is _open_sqlite:
        import stateward.store.sqlite  # noqa: F401
    else:
        backend_for(url)


def sqlite_path(url: str) -> str:
    """A plain path, or the path inside a ``sqlite:///`` URL."""
    return url.removeprefix("sqlite:///").removeprefix("sqlite://")
