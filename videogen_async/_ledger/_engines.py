"""The engines a ledger runs on: how a plan reaches the database, and how creators live.

* :class:`SQLiteEngine`: one connection, one worker thread at a time (a whole plan per hop,
  never on the event loop); WAL, a busy timeout, each change a ``BEGIN IMMEDIATE``. A creator
  lives while it holds an ``flock`` on its file in ``PATH-creators/``.
* :class:`PostgresEngine`: an asyncpg pool, a connection per plan (no reset statement: plans
  leave no session state); an interrupted connection is terminated, never reused. A creator
  lives while it holds a session advisory lock on a connection of its own.

A silent database is :class:`~._store.DatabaseUnavailable`, any other failure
:class:`LedgerError`: never a driver's error.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import secrets
import sqlite3
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import anyio

from .._contract._exceptions import LedgerError
from ._entry import meta_has, meta_value
from ._schema import CHANNEL, POSTGRES, SQLITE, Plan, Step, first, q
from ._store import DatabaseUnavailable, Engine, Listening, Signal

try:
    import asyncpg
except ImportError:  # pragma: no cover - the extra is installed in the test environment
    asyncpg = None

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: a creator's death is known by its lease
    fcntl = None  # type: ignore[assignment]

logger = logging.getLogger("videogen_async")

_T = TypeVar("_T")
_FLOCK: bool = fcntl is not None
_POOL: dict[str, Any] = {"min_size": 1, "max_size": 4, "timeout": 10, "command_timeout": 60}
_CREATOR = re.compile(r"creator:\d+:([0-9a-f]{15})")
"""A creator holding a liveness lock (earlier versions held none: their ids have 12 digits)."""
SQLITE_PERIOD = 0.02
"""Seconds between two reads of SQLite's ``data_version`` by a change listener."""
LISTENER_NAME = "videogen-async change listener"
"""The ``application_name`` of a PostgreSQL change listener's connection."""


def new_creator() -> str:
    """A fresh creator id, ``creator:PID:TOKEN``: the token names its liveness lock."""
    return f"creator:{os.getpid()}:{secrets.token_hex(8)[:15]}"


def _token(owner: str) -> str | None:
    found = _CREATOR.fullmatch(owner)
    return None if found is None else found[1]


def _drive(plan: Plan[_T], execute: Callable[[Step], list[dict[str, Any]]]) -> _T:
    try:
        step = next(plan)
        while True:
            step = plan.send(execute(step))
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


async def _drive_async(plan: Plan[_T], execute: Callable[[Step], Awaitable[Any]]) -> _T:
    try:
        step = next(plan)
        while True:
            step = plan.send(await execute(step))
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


def engine_for(url: str | os.PathLike[str]) -> Engine:
    """The engine of a ledger URL (nothing is opened yet).

    Raises:
        LedgerError: A URL that is neither a file path, ``sqlite:///PATH`` nor
            ``postgresql://...``.
    """
    text = os.fspath(url) if isinstance(url, os.PathLike) else url
    if not isinstance(text, str) or not text.strip():
        raise LedgerError(f"ledger url: must be a file path or a database URL, got {url!r}")
    text = text.strip()
    scheme, sep, _rest = text.partition("://")
    shown = redact(text)
    if not sep:
        if text == ":memory:":
            raise LedgerError("ledger url: ':memory:' cannot be shared; give a file path")
        return SQLiteEngine(text)
    if scheme.lower() == "sqlite":
        path = text[len("sqlite://") :]
        path = path[1:] if path.startswith("/") and not path.startswith("//") else path
        if not path or path == ":memory:":
            raise LedgerError(f"ledger url {shown!r}: sqlite:///PATH needs a file path")
        return SQLiteEngine(path)
    if scheme.lower() in {"postgresql", "postgres"}:
        parsed = urllib.parse.urlsplit(text)
        try:
            parsed.port  # noqa: B018 - validates the port
        except ValueError:
            raise LedgerError(f"ledger url {shown!r}: the port is not a number") from None
        if not parsed.hostname and "host=" not in parsed.query:
            raise LedgerError(f"ledger url {shown!r}: no host")
        return PostgresEngine(text)
    raise LedgerError(
        f"ledger url {shown!r}: unknown scheme {scheme.lower()!r}"
        " (use a file path, sqlite:///PATH or postgresql://USER:PASSWORD@HOST:PORT/DBNAME)"
    )


def redact(url: str) -> str:
    """The URL without its password."""
    try:
        parsed = urllib.parse.urlsplit(url)
        password = parsed.password
    except ValueError:
        return "<malformed url>"
    if password is None:
        return url
    netloc = parsed.netloc.replace(f":{password}@", ":***@")
    return urllib.parse.urlunsplit(parsed._replace(netloc=netloc))


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


def _dict(cursor: sqlite3.Cursor, row: tuple[Any, ...]) -> dict[str, Any]:
    return {column[0]: value for column, value in zip(cursor.description, row, strict=True)}


class SQLiteEngine:
    """A ledger in a SQLite file (see the module docstring)."""

    dialect = SQLITE
    busy_timeout = 30.0
    """Seconds a statement waits for a file another connection holds."""

    def __init__(self, path: str) -> None:
        self.path = self.where = path
        self._conn: sqlite3.Connection | None = None
        # One thread per ledger file: its statements run one at a time, in the order sent,
        # and a caller that stops waiting (cancelled) never lets the next one in early. (A
        # CapacityLimiter of one token did this with less certainty: older anyio releases
        # could lose or over-grant its token when a waiter was cancelled.)
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="videogen-ledger-sqlite")
        self._lives = f"{path}-creators"
        self._life: tuple[int, str] | None = None

    async def _thread(self, call: Callable[..., _T], *args: Any) -> _T:
        try:
            return await asyncio.wrap_future(self._worker.submit(call, *args))
        except RuntimeError as exc:  # the worker was shut down: the ledger is closed
            raise LedgerError(f"ledger {self.path!r} is closed") from exc
        except sqlite3.Error as exc:
            code, where = _sqlite_code(exc), self.path
            if code in (10, 13):  # SQLITE_IOERR, SQLITE_FULL: the disk, not the ledger
                raise DatabaseUnavailable(f"ledger {where!r}: {exc}") from exc
            if code in (5, 6):  # SQLITE_BUSY, SQLITE_LOCKED, past the busy timeout
                raise LedgerError(
                    f"ledger {where!r}: another connection held the file for longer than the"
                    f" busy timeout ({self.busy_timeout:g} s): {exc}"
                ) from exc
            if code == 26 or not isinstance(exc, sqlite3.OperationalError):
                raise LedgerError(
                    f"ledger {where!r}: is not a ledger (not a SQLite database: {exc})"
                ) from exc
            raise LedgerError(f"ledger {where!r}: {exc}") from exc

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise LedgerError(f"ledger {self.path!r} is closed")
        return self._conn

    async def open(self) -> None:
        def connect() -> None:
            directory = os.path.dirname(os.path.abspath(self.path))
            if not os.path.isdir(directory):
                raise LedgerError(
                    f"ledger {self.path!r}: the directory {directory!r} does not exist"
                )
            if os.path.isdir(self.path):
                raise LedgerError(f"ledger {self.path!r}: is a directory, not a ledger file")
            self._conn = sqlite3.connect(
                self.path, timeout=self.busy_timeout, isolation_level=None, check_same_thread=False
            )
            self._conn.row_factory = _dict
            self._conn.create_function("videogen_meta_has", 2, meta_has, deterministic=True)
            self._conn.create_function("videogen_meta_value", 2, meta_value, deterministic=True)

        await self._thread(connect)

    async def prepare(self) -> None:
        def setup() -> None:
            conn = self._connection()
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
            enter_wal(conn, timeout=self.busy_timeout)
            # Under WAL a commit survives a crash or a kill of the process; only a power loss
            # or an operating system crash can lose the last ones.
            conn.execute("PRAGMA synchronous = NORMAL")

        await self._thread(setup)

    async def run(self, plan: Plan[_T], *, write: bool) -> _T:
        def execute(step: Step) -> list[dict[str, Any]]:
            if write and not step.alone and not conn.in_transaction:
                conn.execute("BEGIN IMMEDIATE")
            if step.many:
                conn.executemany(self.dialect.sql(step.sql), step.args)
                return []
            return conn.execute(self.dialect.sql(step.sql), step.args).fetchall()

        def transaction() -> _T:
            try:
                result = _drive(plan, execute)
                if conn.in_transaction:
                    conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                raise
            return result

        conn = self._connection()
        return await self._thread(transaction)

    async def live(self, owner: str) -> None:
        token = _token(owner)
        if self._life is not None or not _FLOCK or token is None:
            return
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
            self._life = await anyio.to_thread.run_sync(take)
        except OSError as exc:  # without its lock a creator is never thought dead
            logger.warning("ledger %r: no liveness lock (%s): creates rely on a lease", path, exc)
            self._life = (-1, "")

    async def dead(self, owners: Sequence[str]) -> set[str]:
        def check(owner: str) -> bool:
            path = os.path.join(self._lives, _token(owner) or "-")
            try:
                descriptor = os.open(path, os.O_RDWR)
            except OSError:
                return False  # no lock file: the lease decides
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return False  # held: the creator lives
            else:
                with contextlib.suppress(OSError):
                    os.unlink(path)
                return True
            finally:
                os.close(descriptor)

        if not _FLOCK:
            return set()
        return await anyio.to_thread.run_sync(lambda: {o for o in owners if check(o)})

    def listen(self, changed: Signal) -> _Versions:
        return _Versions(self)

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        life, self._life = self._life, None

        def shut() -> None:
            late, self._conn = self._conn, None  # made by an open cancelled meanwhile
            for each in (conn, late):
                if each is not None:
                    each.close()
            if life is not None and life[0] >= 0:
                with contextlib.suppress(OSError):
                    os.unlink(life[1])
                os.close(life[0])

        # In the ledger's thread, after the plan running there: closing its connection under
        # it crashes.
        try:
            await asyncio.wrap_future(self._worker.submit(shut))
        except RuntimeError:  # closed before: nothing is left to shut
            pass
        finally:
            self._worker.shutdown(wait=False)


def _unavailable(exc: BaseException) -> bool:
    """Whether a failure is the database not answering (the operation may be tried again)."""
    if asyncpg is None or isinstance(exc, (ValueError, asyncpg.DataError)):
        return False  # a value the database refuses: trying again changes nothing
    return isinstance(
        exc,
        (
            OSError,
            asyncio.TimeoutError,
            asyncpg.InterfaceError,  # e.g. the connection was closed
            asyncpg.InternalClientError,  # e.g. a protocol left mid-operation by a kill
            asyncpg.PostgresConnectionError,
            asyncpg.OperatorInterventionError,  # shutting down, starting up, cancelled
            asyncpg.InsufficientResourcesError,  # too many connections
            asyncpg.ObjectNotInPrerequisiteStateError,  # a database closed to connections
            asyncpg.TransactionRollbackError,  # a serialization failure, a deadlock
        ),
    )


class _Connection(asyncpg.Connection if asyncpg else object):  # type: ignore[misc]
    def get_reset_query(self) -> str:  # asyncpg >= 0.30: none sent as the pool takes it back
        return ""


def _terminate(conn: Any) -> None:
    with contextlib.suppress(Exception):  # already closed, or already given back
        conn.terminate()


class PostgresEngine:
    """A ledger in a PostgreSQL database (see the module docstring)."""

    dialect = POSTGRES

    def __init__(self, url: str) -> None:
        self.url, self.where = url, redact(url)
        self._pool: Any = None
        self._life: Any = None

    def _error(self, exc: BaseException) -> LedgerError:
        text = f"ledger {self.where!r}: {type(exc).__name__}: {exc}"
        return DatabaseUnavailable(text) if _unavailable(exc) else LedgerError(text)

    async def open(self) -> None:
        if asyncpg is None:
            raise LedgerError(
                f"ledger {self.where!r}: PostgreSQL needs asyncpg:"
                " pip install 'videogen-async[postgres]'"
            )
        try:
            self._pool = await asyncpg.create_pool(self.url, connection_class=_Connection, **_POOL)
        except ValueError as exc:  # a malformed DSN
            raise LedgerError(f"ledger {self.where!r}: malformed URL: {exc}") from None
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            raise LedgerError(f"ledger {self.where!r}: cannot connect: {error}") from None

    async def prepare(self) -> None:
        return None

    async def run(self, plan: Plan[_T], *, write: bool) -> _T:
        async def execute(step: Step) -> list[dict[str, Any]]:
            if write and not step.alone and not conn.is_in_transaction():
                await conn.execute("BEGIN")
            if step.many:
                await conn.executemany(self.dialect.sql(step.sql), step.args)
                return []
            return [dict(row) for row in await conn.fetch(self.dialect.sql(step.sql), *step.args)]

        pool = self._pool
        if pool is None:
            raise LedgerError(f"ledger {self.where!r} is closed")
        try:
            conn = await pool.acquire()
        except Exception as exc:
            raise self._error(exc) from exc
        try:
            result = await _drive_async(plan, execute)
            if conn.is_in_transaction():
                await conn.execute("COMMIT")
            return result
        except BaseException as exc:
            if not isinstance(exc, Exception) or _unavailable(exc):
                _terminate(conn)  # interrupted mid-operation: never handed out again
            elif conn.is_in_transaction():
                with contextlib.suppress(Exception):  # else the pool's release ends it
                    await conn.execute("ROLLBACK")
            if isinstance(exc, _FAILURES):
                raise self._error(exc) from exc
            raise  # the plan's own outcome, or a cancellation
        finally:
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                await pool.release(conn)

    async def live(self, owner: str) -> None:
        token = _token(owner)
        if token is None or (self._life is not None and not self._life.is_closed()):
            return
        conn = None
        try:
            conn = await asyncpg.connect(self.url, timeout=10)
            if not await conn.fetchval("SELECT pg_try_advisory_lock($1)", int(token, 16)):
                logger.warning("ledger %r: %s holds no liveness lock", self.where, owner)
        except Exception as exc:
            _terminate(conn)
            raise self._error(exc) from exc
        self._life = conn

    async def dead(self, owners: Sequence[str]) -> set[str]:
        keys = {int(token, 16): owner for owner in owners if (token := _token(owner))}
        return {keys[key] for key in await self.run(_free_locks(list(keys)), write=False)}

    def listen(self, changed: Signal) -> _Notices:
        return _Notices(self, changed)

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        _terminate(self._life)
        self._life = None
        # Shielded and bounded: a close reached while cancelling still releases the
        # connections, and one stuck in a query is terminated rather than waited on.
        with anyio.CancelScope(shield=True):
            if pool is not None:
                with anyio.move_on_after(10):
                    await pool.close()
                    return
                pool.terminate()


_DRIVER_ERRORS: tuple[type[Exception], ...] = (
    ()
    if asyncpg is None
    else (asyncpg.PostgresError, asyncpg.InterfaceError, asyncpg.InternalClientError)
)
_FAILURES: tuple[type[Exception], ...] = (OSError, asyncio.TimeoutError, *_DRIVER_ERRORS)


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


class _Notices(Listening):
    """PostgreSQL: a ``LISTEN`` connection of its own; a notice fires ``changed``."""

    def __init__(self, engine: PostgresEngine, changed: Signal) -> None:
        self._engine, self._changed = engine, changed
        self._conn: Any = None

    async def open(self) -> None:
        self.lost = False
        settings = {"application_name": LISTENER_NAME}  # for operators: which backend listens
        try:
            self._conn = await asyncpg.connect(
                self._engine.url, timeout=10, server_settings=settings
            )
            self._conn.add_termination_listener(self._lose)
            await self._conn.add_listener(CHANNEL, self._notice)
        except _FAILURES as exc:
            raise self._engine._error(exc) from exc

    # Both async: asyncpg runs them in a task, where anyio knows the event loop (a plain
    # callback runs outside any task, and older anyio cannot set an Event there).
    async def _notice(self, *_: Any) -> None:
        self._changed.fire()

    async def _lose(self, *_: Any) -> None:
        self.lost = True
        self._changed.fire()

    async def wait(self, event: anyio.Event, seconds: float) -> None:
        with anyio.move_on_after(seconds):
            while True:
                with anyio.move_on_after(30.0):
                    await event.wait()
                    return
                try:  # quiet: is it still there?
                    await self._conn.execute("SELECT 1", timeout=10)
                except _FAILURES as exc:
                    raise self._engine._error(exc) from exc

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        with anyio.CancelScope(shield=True), anyio.move_on_after(5), contextlib.suppress(Exception):
            await conn.close()
        _terminate(conn)  # still open: closing it timed out


def _free_locks(keys: list[int]) -> Plan[list[int]]:
    """The advisory locks among ``keys`` that no session of the database holds."""
    rows = yield q(
        "SELECT k FROM unnest($1::bigint[]) AS k WHERE NOT EXISTS (SELECT 1 FROM pg_locks AS l"
        " WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1"
        " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        " AND ((l.classid::bigint << 32) | l.objid::bigint) = k)",
        keys,
    )
    return [row["k"] for row in rows]
