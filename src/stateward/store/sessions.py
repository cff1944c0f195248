"""Signed-out browser sessions, kept in the store (schema: SQLite 7, PostgreSQL 8) so that a sign-out
holds across restarts and across every service process of one store.

A session cookie is signed and carries its own id; signing out records that id here until the cookie
would have expired anyway, and the inbox refuses a cookie whose id is recorded. Rows past their expiry
are pruned by the next sign-out, so the table holds at most the sessions signed out within one
session lifetime.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from stateward.store.outbox import sql_for

MAX_SESSION_ID_CHARS = 64


@runtime_checkable
class SessionStore(Protocol):
    """Both stores: a signed-out session's id recorded until it expires, and the check of one."""

    def revoke_session(self, session_id: str, expires_at: float, now: float) -> None:
        """Record ``session_id`` as signed out until ``expires_at`` (epoch seconds); prune rows past ``now``."""
        ...

    def session_revoked(self, session_id: str) -> bool: ...


class SessionMethods:
    """:class:`SessionStore` over a store's own transactions (mixed into both, as ``OutboxMethods`` is)."""

    _PLACEHOLDER = "?"

    def _tx(self) -> Any:  # provided by the store
        raise NotImplementedError

    def revoke_session(self, session_id: str, expires_at: float, now: float) -> None:
        with self._tx() as db:
            db.execute(sql_for(self._PLACEHOLDER, "DELETE FROM revoked_sessions WHERE expires_at < ?"), (now,))
            db.execute(
                sql_for(
                    self._PLACEHOLDER,
                    "INSERT INTO revoked_sessions(session_id, expires_at) VALUES (?, ?)"
                    " ON CONFLICT (session_id) DO NOTHING",
                ),
                (session_id[:MAX_SESSION_ID_CHARS], expires_at),
            )

    def session_revoked(self, session_id: str) -> bool:
        with self._tx() as db:
            row = db.execute(
                sql_for(self._PLACEHOLDER, "SELECT 1 FROM revoked_sessions WHERE session_id = ?"),
                (session_id[:MAX_SESSION_ID_CHARS],),
            ).fetchone()
        return row is not None
