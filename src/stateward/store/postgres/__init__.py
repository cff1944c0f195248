"""The shared store: PostgreSQL through a connection pool, one transaction per step.

The semantics are SQLiteStore's, clause for clause (the conformance suite runs on both). What
differs is what several machines need: runnable runs are claimed with ``FOR UPDATE SKIP LOCKED``,
lease expiry is judged by the database clock, and migrations run under an advisory lock.

:class:`PostgresStore` is its base (``base.py``: the pool, migrations, the shared lookups) and one mixin per
concern of the store's protocols (store/protocols.py), in the modules SQLiteStore uses for them:
``runs.py``, ``requests.py``, ``leases.py``, ``journal.py``, ``artifacts.py``, ``forks.py``, ``listing.py``,
``keys.py``; plus the outbox and session mixins both stores share. Its SQL text is in store/_pg_sql.py.
"""

from __future__ import annotations

from stateward.store.outbox import OutboxMethods
from stateward.store.postgres.artifacts import PostgresArtifacts
from stateward.store.postgres.forks import PostgresForks
from stateward.store.postgres.journal import PostgresJournal
from stateward.store.postgres.keys import PostgresKeys
from stateward.store.postgres.leases import PostgresLeases
from stateward.store.postgres.listing import PostgresListing
from stateward.store.postgres.requests import PostgresRequests
from stateward.store.postgres.runs import PostgresRuns
from stateward.store.sessions import SessionMethods

__all__ = ["PostgresStore"]


class PostgresStore(
    PostgresRuns,
    PostgresRequests,
    PostgresLeases,
    PostgresJournal,
    PostgresArtifacts,
    PostgresForks,
    PostgresListing,
    PostgresKeys,
    OutboxMethods,
    SessionMethods,
):
    """Thread-safe: each call borrows a connection; every write is one transaction. Opened with
    ``PostgresStore(url, min_size=..., max_size=..., create=..., limits=..., ...)`` (see ``PostgresBase``)."""
