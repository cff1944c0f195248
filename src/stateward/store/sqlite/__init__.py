"""The embedded default store: one SQLite file in WAL mode, one transaction per step.

:class:`SQLiteStore` is its base (``base.py``: the connection, migrations, the shared lookups) and one mixin per
concern of the store's protocols (store/protocols.py), each in the module named after it: ``runs.py``
(RunLog), ``requests.py`` (RequestBook), ``leases.py`` (LeaseBook), ``journal.py`` (EffectJournal),
``artifacts.py`` (ArtifactShelf), ``forks.py`` (ForkBook), ``listing.py`` (RunListing), ``keys.py``
(KeyStore); the webhook outbox and signed-out sessions are the mixins both stores share (store/outbox.py,
store/sessions.py).
"""

from __future__ import annotations

from stateward.store.outbox import OutboxMethods
from stateward.store.sessions import SessionMethods
from stateward.store.sqlite.artifacts import SQLiteArtifacts
from stateward.store.sqlite.connection import WalCheckpointer, store_error
from stateward.store.sqlite.forks import SQLiteForks
from stateward.store.sqlite.journal import SQLiteJournal
from stateward.store.sqlite.keys import SQLiteKeys
from stateward.store.sqlite.leases import SQLiteLeases
from stateward.store.sqlite.listing import SQLiteListing
from stateward.store.sqlite.requests import SQLiteRequests
from stateward.store.sqlite.runs import SQLiteRuns

__all__ = ["SQLiteStore", "WalCheckpointer", "store_error"]


class SQLiteStore(
    SQLiteRuns,
    SQLiteRequests,
    SQLiteLeases,
    SQLiteJournal,
    SQLiteArtifacts,
    SQLiteForks,
    SQLiteListing,
    SQLiteKeys,
    OutboxMethods,
    SessionMethods,
):
    """Thread-safe through one lock; every write is a ``BEGIN IMMEDIATE`` transaction. Opened with
    ``SQLiteStore(path, synchronous=..., create=..., limits=...)`` (see ``SQLiteBase``)."""
