"""The SQLite engine: a ledger in a file of one machine.

One connection, one thread of its own (a whole plan per hop, never on the event loop): its
jobs in a queue, each outcome handed back with ``call_soon_threadsafe``. (An executor's future
and ``asyncio.wrap_future`` cost about twice as much per hop, and a create makes two.) WAL, a
busy timeout, each change a ``BEGIN IMMEDIATE``. A creator lives while it holds an ``flock`` on
its file in ``PATH-creators/``. Change listeners read ``PRAGMA data_version``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import anyio

from .._contract._exceptions import LedgerError
from ._entry import meta_has, meta_value
from ._protocol import DatabaseUnavailable, Listening, Signal, creator_token
from ._schema import SQLITE, Plan, Row, first

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: a creator's death is known by its lease
    fcntl = None  # type: ignore[assignment]

logger = logging.getLogger("videogen_async")

_T = TypeVar("_T")
_FLOCK: bool = fcntl is not None
SQLITE_PERIOD = 0.02
"""Seconds between two reads of SQLite's ``data_version`` by a change listener."""


def _sqlite_code(exc: sqlite3.Error) -> int | None:
    code = getattr(exc, "sqlite_errorcode", None)  # Python 3.11+
    if code is not None:
        return int(code) & 0xFF
    words = {"is locked": 5, "disk is full": 13, "disk I/O error": 10, "not a database": 26}
    return next((value for word, value in words.items() if word in str(exc)), None)


def is_busy(exc: sqlite3.Error) -> bool:
    """Whether ``exc`` is SQLite's ``SQLITE_BUSY`` (another connection holds the file)."""
    return _sqlite_code(exc) == 5


def enter_wal(conn: sqlite3.Connection, *, timeout: float) -> None:
    """Switch a file to WAL mode, waiting out the other connections (in a worker thread).

    Leaving rollback mode needs the file to itself, and SQLite answers ``SQLITE_BUSY`` at once
    (no busy handler) while another connection reads it: retried, 1 ms to 50 ms apart, for
    ``timeout`` seconds; then the last ``sqlite3.OperationalError`` is raised.
    """
    deadline = time.monotonic() + timeout
    delay = 0.001
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
        except sqlite3.OperationalError as exc:
            if not is_busy(exc) or time.monotonic() + delay > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
        else:
            return


def _serve(jobs: queue.SimpleQueue[Any]) -> None:
    """A ledger's thread: its jobs ``(future, call, args)`` one at a time, in the order sent.

    A job whose caller stopped waiting (cancelled) before it began is not run, and one that
    began runs to its end: the next never starts early. ``None`` ends the thread.
    """
    for future, call, args in iter(jobs.get, None):
        if not future.cancelled():
            try:
                outcome = (future.set_result, call(*args))
            except BaseException as exc:  # handed to the caller, whatever it is
                outcome = (future.set_exception, exc)
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: no one waits
                future.get_loop().call_soon_threadsafe(_hand, future, *outcome)


def _hand(future: asyncio.Future[Any], give: Callable[[Any], None], value: Any) -> None:
    if not future.cancelled():
        give(value)


def _dict(cursor: sqlite3.Cursor, row: tuple[Any, ...]) -> Row:
    return {column[0]: value for column, value in zip(cursor.description, row, strict=True)}


class SQLiteEngine:
    """A ledger in a SQLite file (see the module docstring)."""

    dialect = SQLITE
    busy_timeout = 30.0
    """Seconds a statement waits for a file another connection holds."""

    def __init__(self, path: str) -> None:
        self.path = self.where = path
        self._conn: Any = None  # a sqlite3.Connection once open, used in the thread only
        # One thread per ledger file: its statements run one at a time, in the order sent,
        # and a caller that stops waiting (cancelled) never lets the next one in early. (A
        # CapacityLimiter of one token did this with less certainty: older anyio releases
        # could lose or over-grant its token when a waiter was cancelled.) A daemon: a ledger
        # never closed does not hold the interpreter's exit (a transaction cut short there is
        # rolled back, as after a kill).
        self._jobs: queue.SimpleQueue[Any] | None = queue.SimpleQueue()
        threading.Thread(
            target=_serve, args=(self._jobs,), name="videogen-ledger-sqlite", daemon=True
        ).start()
        self._lives = f"{path}-creators"
        self._life: tuple[int, str] | None = None

    async def _thread(self, call: Callable[..., _T], *args: Any) -> _T:
        if self._jobs is None:
            raise LedgerError(f"ledger {self.path!r} is closed")
        future: asyncio.Future[_T] = asyncio.get_running_loop().create_future()
        self._jobs.put((future, call, args))
        try:
            return await future
        except sqlite3.Error as exc:
            code = _sqlite_code(exc)
            if code in (10, 13):  # SQLITE_IOERR, SQLITE_FULL: the disk, not the ledger
                raise DatabaseUnavailable(f"ledger {self.path!r}: {exc}") from exc
            told = str(exc)
            if code in (5, 6):  # SQLITE_BUSY, SQLITE_LOCKED, past the busy timeout
                told = (
                    "another connection held the file for longer than the busy timeout"
                    f" ({self.busy_timeout:g} s): {exc}"
                )
            elif code == 26 or not isinstance(exc, sqlite3.OperationalError):
                told = f"is not a ledger (not a SQLite database: {exc})"
            raise LedgerError(f"ledger {self.path!r}: {told}") from exc

    async def open(self) -> None:
        def connect() -> None:
            directory = os.path.dirname(os.path.abspath(self.path))
            if not os.path.isdir(directory):
                raise LedgerError(
                    f"ledger {self.path!r}: the directory {directory!r} does not exist"
                )
            if os.path.isdir(self.path):
                raise LedgerError(f"ledger {self.path!r}: is a directory, not a ledger file")
            conn = self._conn = sqlite3.connect(
                self.path, timeout=self.busy_timeout, isolation_level=None, check_same_thread=False
            )
            conn.row_factory = _dict
            conn.create_function("videogen_meta_has", 2, meta_has, deterministic=True)
            conn.create_function("videogen_meta_value", 2, meta_value, deterministic=True)

        await self._thread(connect)

    async def prepare(self) -> None:
        def setup() -> None:
            # The busy timeout is the connection's (sqlite3.connect's timeout).
            enter_wal(self._conn, timeout=self.busy_timeout)
            # Under WAL a commit survives a crash or a kill of the process; only a power loss
            # or an operating system crash can lose the last ones.
            self._conn.execute("PRAGMA synchronous = NORMAL")

        await self._thread(setup)

    async def run(self, plan: Plan[_T], *, write: bool) -> _T:
        return await self._thread(self._transaction, plan, write)

    def _transaction(self, plan: Plan[_T], write: bool) -> _T:
        """Each step of ``plan`` (in the ledger's thread), and the commit (or the rollback).

        A write's transaction begins at its first step that may not commit alone. (Its
        connection is read there: a ledger closed meanwhile is found closed by ``_thread``.)
        """
        conn = self._conn
        rows: Any = None
        try:
            while True:
                try:
                    step = plan.send(rows)
                except StopIteration as stop:
                    result: _T = stop.value
                    break
                if write and not step.alone and not conn.in_transaction:
                    conn.execute("BEGIN IMMEDIATE")
                sql = self.dialect.sql(step.sql)
                if step.many:
                    conn.executemany(sql, step.args)
                    rows = []
                else:
                    rows = conn.execute(sql, step.args).fetchall()
            if conn.in_transaction:
                conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            raise
        return result

    async def live(self, owner: str) -> None:
        if self._life is not None or not _FLOCK or (token := creator_token(owner)) is None:
            return  # held already (every create asks): first, the cheapest
        path = os.path.join(self._lives, token)

        def take() -> tuple[int, str]:
            os.makedirs(self._lives, exist_ok=True)
            descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BaseException:
                os.close(descriptor)
                raise
            return descriptor, path

        try:
            self._life = await self._thread(take)
        except OSError as exc:  # without its lock a creator is never thought dead
            logger.warning("ledger %r: no liveness lock (%s): creates rely on a lease", path, exc)
            self._life = (-1, "")

    async def dead(self, owners: Sequence[str]) -> set[str]:
        def check(owner: str) -> bool:
            path = os.path.join(self._lives, creator_token(owner) or "-")
            try:
                descriptor = os.open(path, os.O_RDWR)
            except OSError:
                return False  # no lock file: the lease decides
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return False  # held: the creator lives
            else:
                return True  # the file stays until its creates are settled (forget)
            finally:
                os.close(descriptor)

        if not _FLOCK:
            return set()
        return await self._thread(lambda: {o for o in owners if check(o)})

    async def forget(self, owners: Sequence[str]) -> None:
        def drop() -> None:
            for owner in owners:
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(self._lives, creator_token(owner) or "-"))

        await self._thread(drop)

    def listen(self, changed: Signal) -> _Versions:
        return _Versions(self)

    async def close(self) -> None:
        jobs, self._jobs = self._jobs, None  # what is sent from now on finds it closed
        life, self._life = self._life, None

        def shut() -> None:
            conn, self._conn = self._conn, None  # made by an open cancelled meanwhile, too
            if conn is not None:
                conn.close()
            if life is not None and life[0] >= 0:
                with contextlib.suppress(OSError):
                    os.unlink(life[1])
                os.close(life[0])

        if jobs is not None:  # else closed before: nothing is left to shut
            # In the ledger's thread, after the plans sent before: closing its connection
            # under one crashes. Then the thread ends.
            done = asyncio.get_running_loop().create_future()
            jobs.put((done, shut, ()))
            jobs.put(None)
            await done


class _Versions(Listening):
    """SQLite: ``PRAGMA data_version``, read every :data:`SQLITE_PERIOD` s off the loop."""

    def __init__(self, engine: SQLiteEngine) -> None:
        self._engine = engine
        self._version: Any = None  # unknown: the first read of it wakes the listener

    async def wait(self, event: anyio.Event, seconds: float) -> None:
        with anyio.move_on_after(seconds):
            while not event.is_set():
                with anyio.move_on_after(SQLITE_PERIOD):
                    await event.wait()
                    return
                version = await self._engine.run(first("PRAGMA data_version"), write=False)
                if version != self._version:
                    self._version = version
                    return
