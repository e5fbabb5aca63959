"""Opening SQLite files that several processes share: the switch to WAL mode, done safely.

Used by the ledger's SQLite engine and the command line's batch journal. Both call it from a
worker thread, never on the event loop.
"""

from __future__ import annotations

import sqlite3
import time

__all__ = ["enter_wal", "is_busy"]

_SQLITE_BUSY = 5  # the primary result code; ``sqlite3.SQLITE_BUSY`` is Python 3.11+


def is_busy(exc: sqlite3.Error) -> bool:
    """Whether ``exc`` is SQLite's ``SQLITE_BUSY`` (another connection holds the file)."""
    code = getattr(exc, "sqlite_errorcode", None)  # Python 3.11+
    if code is not None:
        return bool(code & 0xFF == _SQLITE_BUSY)
    return str(exc) == "database is locked"


def enter_wal(conn: sqlite3.Connection, *, timeout: float) -> None:
    """Switch the file to WAL mode, waiting out other connections as a busy timeout would.

    Leaving rollback mode needs the file to itself, and SQLite answers ``SQLITE_BUSY`` at once,
    without its busy handler, when another connection is reading it: several processes
    opening a new file together meet that. The switch is retried here, backing off from 1 ms
    to 50 ms, until ``timeout`` seconds are spent; then the last ``OperationalError`` is
    raised.

    Args:
        conn: A connection to the file, used by the calling thread.
        timeout: Seconds to keep retrying while the file is busy.

    Raises:
        sqlite3.OperationalError: The file stayed busy, or another failure.
    """
    deadline = time.monotonic() + timeout
    delay = 0.001
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
        except sqlite3.OperationalError as exc:
            if not is_busy(exc) or time.monotonic() + delay > deadline:
                raise
            time.sleep(delay)  # a worker thread's wait, never the event loop's
            delay = min(delay * 2, 0.05)
        else:
            return
