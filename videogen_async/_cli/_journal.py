r"""The batch journal: a SQLite file that never loses a task id and never re-creates a line.

Why a journal
    Creating a task charges credits and the service has no idempotency key: if a batch
    crashes after creating 500 tasks, running it again must not create them again, and the
    500 ids must not be lost (they are the only way to reach the videos).

What it records, per input line (table ``lines``)
    ``state`` moves through::

        (no row) --> attempted --> created --> done
                         |    \
                         |     +--> unknown   (the create failed in a way that may have
                         |                     taken effect: timeout, dropped connection, 5xx)
                         +--> refused         (the service definitely did not create it:
                                               400, 409 insufficient credits, no connection)

    * ``attempted`` is written and committed *before* the create request is sent.
    * ``created`` (with the ``task_id``) is committed the moment the service returns the id.
    * ``done`` records the final status, the video URL or error, and later the downloaded file.

    A crash between sending the request and recording its id leaves the line ``attempted``.
    The next run cannot know whether the service received that request, so it treats the line
    as **unknown outcome**: it is reported and *not* sent again, unless the user passes
    ``--retry-unknown`` (and accepts that it may create a duplicate, paid task). The opposite
    choice, re-sending by default, would silently pay twice for every line caught in that
    window; refusing to guess is the only choice that is never wrong about money, and the
    window is small (one request per line in flight).

Consistency
    Every change is one SQLite transaction committed before the batch goes on (journal mode
    WAL, ``synchronous=FULL``), so a crash, a ``kill -9`` or a power cut leaves the journal
    at a state it really passed through. Lines are matched to the input by number *and* by a
    SHA-256 of the request, and the journal remembers the service's base URL: a rerun with a
    changed input file or another service is refused rather than mixed up.

Threads
    ``sqlite3`` blocks, so every call runs in a worker thread (``anyio.to_thread``), one at a
    time (a capacity limiter of 1), never on the event loop. Calls already started are not
    abandoned when the batch is cancelled: a write that began is finished. A lock file beside
    the journal (``PATH.lock``, advisory ``flock`` where available) keeps two batches from
    using one journal at once.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import os
import sqlite3
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any, TypeVar

import anyio
import attrs

from .._ledger._sqlite_wal import enter_wal

__all__ = [
    "ATTEMPTED",
    "CREATED",
    "DONE",
    "REFUSED",
    "UNKNOWN",
    "Journal",
    "JournalEntry",
    "JournalError",
    "request_hash",
]

_T = TypeVar("_T")

ATTEMPTED = "attempted"
CREATED = "created"
DONE = "done"
REFUSED = "refused"
UNKNOWN = "unknown"

SCHEMA_VERSION = "1"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS lines (
    line_no      INTEGER PRIMARY KEY,
    request_hash TEXT    NOT NULL,
    request      TEXT    NOT NULL,
    state        TEXT    NOT NULL
                 CHECK (state IN ('attempted', 'created', 'unknown', 'refused', 'done')),
    task_id      TEXT,
    credits      REAL,
    status       TEXT,
    video_url    TEXT,
    error        TEXT,
    path         TEXT,
    attempts     INTEGER NOT NULL DEFAULT 0,
    updated_at   TEXT    NOT NULL,
    CHECK (state NOT IN ('created', 'done') OR task_id IS NOT NULL)
);
CREATE UNIQUE INDEX IF NOT EXISTS lines_task_id ON lines (task_id) WHERE task_id IS NOT NULL;
"""


class JournalError(Exception):
    """The journal cannot be used: another input or service, busy, or a broken invariant."""


def request_hash(request: Mapping[str, Any]) -> str:
    """The SHA-256 of a request's canonical JSON (sorted keys, no spaces).

    Args:
        request: The validated request body.

    Returns:
        The hex digest.
    """
    canonical = json.dumps(request, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


@attrs.frozen
class JournalEntry:
    """One line as the journal has it.

    Attributes:
        line_no: The input line number (from 1).
        request_hash: SHA-256 of the request it was sent with.
        state: ``attempted``, ``created``, ``unknown``, ``refused`` or ``done``.
        task_id: The task id, once known.
        credits: Credits charged, as last seen.
        status: The task's final status (state ``done``).
        video_url: The video's URL (a succeeded task).
        error: The error text (unknown/refused lines, failed tasks).
        path: The downloaded file, once downloaded.
        attempts: Create requests sent for the line.
    """

    line_no: int
    request_hash: str
    state: str
    task_id: str | None = None
    credits: float | None = None
    status: str | None = None
    video_url: str | None = None
    error: str | None = None
    path: str | None = None
    attempts: int = 0


_BUSY_TIMEOUT = 10.0  # seconds a reader may hold the file before an open gives up


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


def _lock(path: Path) -> IO[str] | None:
    """Take the advisory lock of a journal; ``None`` where ``flock`` does not exist."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        return None
    handle = open(path.with_name(path.name + ".lock"), "a+")  # noqa: SIM115
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        raise JournalError(
            f"the journal {path} is in use by another videogen batch (lock {path.name}.lock)"
        ) from None
    return handle


class Journal:
    """The batch journal (see the module docstring). Open it with :meth:`open`."""

    def __init__(self, conn: sqlite3.Connection, path: Path | None, lock: IO[str] | None):
        self._conn = conn
        self.path = path
        self._lock = lock
        self._limiter = anyio.CapacityLimiter(1)
        self._closed = False

    # -- life cycle -------------------------------------------------------------------------

    @classmethod
    async def open(cls, path: str | os.PathLike[str] | None, *, base_url: str) -> Journal:
        """Open (or create) a journal.

        Args:
            path: The SQLite file; ``None`` keeps the journal in memory (nothing survives
                the process).
            base_url: The service's base URL; a journal made for another one is refused.

        Returns:
            The journal.

        Raises:
            JournalError: The file belongs to another service, is not a journal, or is in
                use by another batch.
        """
        where = None if path is None else Path(path)

        def _open() -> Journal:
            lock = _lock(where) if where is not None else None
            try:
                conn = sqlite3.connect(
                    ":memory:" if where is None else str(where),
                    isolation_level=None,  # autocommit; transactions are explicit
                    check_same_thread=False,  # used by one worker thread at a time
                    timeout=_BUSY_TIMEOUT,
                )
                try:
                    _prepare(conn, base_url, where)
                except BaseException:
                    conn.close()
                    raise
            except BaseException:
                if lock is not None:
                    lock.close()
                raise
            return cls(conn, where, lock)

        try:
            return await anyio.to_thread.run_sync(_open)
        except sqlite3.DatabaseError as exc:
            raise JournalError(f"{where} is not a usable journal: {exc}") from exc

    async def close(self) -> None:
        """Close the database and release the lock. Idempotent; never cancelled midway."""
        if self._closed:
            return
        self._closed = True

        def _close() -> None:
            try:
                self._conn.close()
            finally:
                if self._lock is not None:
                    self._lock.close()

        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(_close, limiter=self._limiter)

    async def _run(self, func: Callable[[], _T]) -> _T:
        # Not abandoned on cancellation: a write that started is finished and committed.
        return await anyio.to_thread.run_sync(func, limiter=self._limiter)

    def _write(self, sql: str, params: tuple[Any, ...]) -> int:
        with self._conn:  # BEGIN ... COMMIT (ROLLBACK on error)
            self._conn.execute("BEGIN IMMEDIATE")
            cursor = self._conn.execute(sql, params)
            return cursor.rowcount

    # -- reads ------------------------------------------------------------------------------

    async def entries(self) -> dict[int, JournalEntry]:
        """Every line the journal knows, by line number."""

        def _read() -> dict[int, JournalEntry]:
            rows = self._conn.execute(
                "SELECT line_no, request_hash, state, task_id, credits, status, video_url,"
                " error, path, attempts FROM lines ORDER BY line_no"
            ).fetchall()
            return {row[0]: JournalEntry(*row) for row in rows}

        return await self._run(_read)

    # -- writes -----------------------------------------------------------------------------

    async def mark_attempted(self, line_no: int, request: Mapping[str, Any]) -> None:
        """Record that the create of a line is about to be sent (committed before it is).

        Args:
            line_no: The line.
            request: The request body.

        Raises:
            JournalError: The line already has a task id (it must never be sent again).
        """
        digest = request_hash(request)
        text = json.dumps(request, sort_keys=True, ensure_ascii=False)
        now = _now()

        def _mark() -> None:
            changed = self._write(
                "INSERT INTO lines (line_no, request_hash, request, state, attempts, updated_at)"
                " VALUES (?, ?, ?, 'attempted', 1, ?)"
                " ON CONFLICT (line_no) DO UPDATE SET state = 'attempted',"
                " request_hash = excluded.request_hash, request = excluded.request,"
                " error = NULL, attempts = lines.attempts + 1, updated_at = excluded.updated_at"
                " WHERE lines.task_id IS NULL",
                (line_no, digest, text, now),
            )
            if changed != 1:
                raise JournalError(
                    f"line {line_no} already has a task id in the journal; refusing to send"
                    " it again"
                )

        await self._run(_mark)

    async def mark_created(self, line_no: int, task_id: str, credits: float | None) -> None:
        """Record the task id the service returned for a line.

        Args:
            line_no: The line.
            task_id: The new task's id.
            credits: Credits charged.
        """
        now = _now()

        def _mark() -> None:
            changed = self._write(
                "UPDATE lines SET state = 'created', task_id = ?, credits = ?, error = NULL,"
                " updated_at = ? WHERE line_no = ? AND task_id IS NULL",
                (task_id, credits, now, line_no),
            )
            if changed != 1:
                raise JournalError(f"line {line_no} was not waiting for a task id")

        await self._run(_mark)

    async def mark_failed_create(self, line_no: int, *, unknown: bool, error: str) -> None:
        """Record a create that failed: ``unknown`` (may have taken effect) or ``refused``.

        Args:
            line_no: The line.
            unknown: Whether the request may have created a task.
            error: The error, one line.
        """
        now = _now()
        state = UNKNOWN if unknown else REFUSED

        def _mark() -> None:
            self._write(
                "UPDATE lines SET state = ?, error = ?, updated_at = ?"
                " WHERE line_no = ? AND task_id IS NULL",
                (state, error, now, line_no),
            )

        await self._run(_mark)

    async def mark_done(
        self,
        line_no: int,
        *,
        status: str,
        video_url: str | None,
        error: str | None,
        credits: float | None,
    ) -> None:
        """Record the final state of a line's task.

        Args:
            line_no: The line.
            status: ``succeeded``, ``failed`` or ``error`` (or a newer terminal status).
            video_url: The video's URL.
            error: The task's error message.
            credits: Credits finally charged.
        """
        now = _now()

        def _mark() -> None:
            self._write(
                "UPDATE lines SET state = 'done', status = ?, video_url = ?, error = ?,"
                " credits = ?, updated_at = ? WHERE line_no = ? AND task_id IS NOT NULL",
                (status, video_url, error, credits, now, line_no),
            )

        await self._run(_mark)

    async def mark_downloaded(self, line_no: int, path: str) -> None:
        """Record where a line's video was saved.

        Args:
            line_no: The line.
            path: The file.
        """
        now = _now()

        def _mark() -> None:
            self._write(
                "UPDATE lines SET path = ?, updated_at = ? WHERE line_no = ?",
                (path, now, line_no),
            )

        await self._run(_mark)


def _prepare(conn: sqlite3.Connection, base_url: str, where: Path | None) -> None:
    if where is not None:
        enter_wal(conn, timeout=_BUSY_TIMEOUT)
    conn.execute("PRAGMA synchronous=FULL")
    conn.executescript(_SCHEMA)
    meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    if not meta:
        with conn:
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(
                "INSERT INTO meta (key, value) VALUES (?, ?)",
                [("schema", SCHEMA_VERSION), ("base_url", base_url), ("created_at", _now())],
            )
        return
    if meta.get("schema") != SCHEMA_VERSION:
        raise JournalError(f"{where} has journal schema {meta.get('schema')!r}, not 1")
    if meta.get("base_url") != base_url:
        raise JournalError(
            f"the journal {where} was made for {meta.get('base_url')}, not {base_url}: its task"
            " ids mean nothing there. Use another --journal."
        )


@contextlib.contextmanager
def read_only(path: str | os.PathLike[str]) -> Any:
    """Open a journal read-only (for tests and inspection), closing it afterwards.

    Args:
        path: The journal file.

    Yields:
        A ``sqlite3.Connection``.
    """
    conn = sqlite3.connect(f"file:{Path(path).resolve()}?mode=ro", uri=True, timeout=10.0)
    try:
        yield conn
    finally:
        conn.close()
