"""The SQLite store's plumbing: its lock (driver errors become named StoreErrors), the times it
stores, and the background WAL checkpointer."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import weakref
from datetime import UTC, datetime, timedelta

from stateward.core.errors import ErrorCode, StoreError


def now_iso() -> str:
    """Now, as the ISO text the store keeps its times of day in."""
    return datetime.now(UTC).isoformat()


def store_error(exc: sqlite3.Error, path: str | None = None) -> StoreError:
    """A SQLite failure as a named store error: the file is busy, unreadable, or unavailable."""
    where = f"{path}: " if path else ""
    text = str(exc)
    if isinstance(exc, sqlite3.OperationalError) and ("locked" in text or "busy" in text):
        return StoreError(f"{where}the database is locked by another writer ({text})", code=ErrorCode.STORE_BUSY)
    if type(exc) is sqlite3.DatabaseError or "malformed" in text or "not a database" in text:
        return StoreError(f"{where}not a readable SQLite database ({text})", code=ErrorCode.STORE_CORRUPT)
    return StoreError(f"{where}{text}", code=ErrorCode.STORE_UNAVAILABLE)


class Guarded:
    """The store's lock. A SQLite error that leaves a locked section leaves as a named StoreError
    (STORE_BUSY / STORE_CORRUPT / STORE_UNAVAILABLE), so no caller ever sees the driver's own errors."""

    def __init__(self, path: str):
        self._lock = threading.RLock()
        self._path = path

    def __enter__(self) -> Guarded:
        self._lock.acquire()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        self._lock.release()
        if isinstance(exc, sqlite3.Error):
            raise store_error(exc, self._path) from exc


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


_MICRO = timedelta(microseconds=1)


def micros(at: datetime) -> int:
    """Event times are stored as integer microseconds since the epoch: a third of an ISO string."""
    return (at - _EPOCH) // _MICRO


def from_micros(value: int) -> datetime:
    return _EPOCH + timedelta(microseconds=value)


RUN_KEY_CACHE = 10_000


class WalCheckpointer:
    """Copies the WAL back into the database from its own connection, off the step path.

    A PASSIVE checkpoint (never blocking writers) runs on a background thread once the WAL passes
    ``wal_bytes``, so the commit that crosses SQLite's own threshold (1,000 pages) finds little left
    to copy. That inline checkpoint is still needed: under continuous writes a background checkpoint
    never catches up with the last frame, the WAL never restarts, and it grows without bound.
    """

    def __init__(self, path: str, wal_bytes: int = 1 << 20, interval_s: float = 0.05):
        self._wal = path + "-wal"
        self._path = path
        self._limit = wal_bytes
        self._interval = interval_s
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        _CHECKPOINTERS.add(self)

    def note_commit(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="stateward-wal-checkpoint", daemon=True)
            self._thread.start()

    def forget_thread(self) -> None:
        """In a forked child the thread does not exist: the next commit starts the child's own."""
        self._thread = None

    def _wal_size(self) -> int:
        try:
            return os.stat(self._wal).st_size
        except OSError:
            return 0

    def _run(self) -> None:
        conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False, timeout=5)
        try:
            while not self._stopped.wait(self._interval):
                if self._wal_size() >= self._limit:
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        finally:
            conn.close()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


_CHECKPOINTERS: weakref.WeakSet[WalCheckpointer] = weakref.WeakSet()


def _forget_threads_after_fork() -> None:
    for checkpointer in list(_CHECKPOINTERS):
        checkpointer.forget_thread()


os.register_at_fork(after_in_child=_forget_threads_after_fork)
