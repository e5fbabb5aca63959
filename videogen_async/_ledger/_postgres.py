"""The PostgreSQL engine: a ledger shared by machines, through asyncpg (the ``postgres`` extra).

An asyncpg pool, a connection per plan (no reset statement: plans leave no session state); an
interrupted connection is terminated, never reused. A creator lives while it holds a session
advisory lock on a connection of its own. Change listeners ``LISTEN`` on a connection of their
own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Any, TypeVar

import anyio

from .._contract._exceptions import LedgerError
from .._contract._redact import redact_url
from ._protocol import DatabaseUnavailable, Listening, Signal, creator_token
from ._schema import CHANNEL, POSTGRES, Plan, q

try:
    import asyncpg
except ImportError:  # pragma: no cover - the extra is installed in the test environment
    asyncpg = None

logger = logging.getLogger("videogen_async")

_T = TypeVar("_T")
_POOL: dict[str, Any] = {"min_size": 1, "max_size": 4, "timeout": 10, "command_timeout": 60}
LISTENER_NAME = "videogen-async change listener"
"""The ``application_name`` of a PostgreSQL change listener's connection."""


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
        self.url = url
        self.where = redact_url(url)
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
        pool = self._pool
        if pool is None:
            raise LedgerError(f"ledger {self.where!r} is closed")
        try:
            conn = await pool.acquire()
        except Exception as exc:
            raise self._error(exc) from exc
        try:
            return await self._transaction(conn, plan, write)
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

    async def _transaction(self, conn: Any, plan: Plan[_T], write: bool) -> _T:
        """Each step of ``plan`` on ``conn``, and the commit.

        A write's transaction begins at its first step that may not commit alone.
        """
        rows: Any = None
        while True:
            try:
                step = plan.send(rows)
            except StopIteration as stop:
                result: _T = stop.value
                break
            if write and not step.alone and not conn.is_in_transaction():
                await conn.execute("BEGIN")
            sql = self.dialect.sql(step.sql)
            if step.many:
                await conn.executemany(sql, step.args)
                rows = []
            else:
                rows = [dict(row) for row in await conn.fetch(sql, *step.args)]
        if conn.is_in_transaction():
            await conn.execute("COMMIT")
        return result

    async def live(self, owner: str) -> None:
        token = creator_token(owner)
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
        keys = {int(token, 16): owner for owner in owners if (token := creator_token(owner))}
        return {keys[key] for key in await self.run(_free_locks(list(keys)), write=False)}

    async def forget(self, owners: Sequence[str]) -> None:
        pass  # an advisory lock leaves nothing behind

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


class _Notices(Listening):
    """PostgreSQL: a ``LISTEN`` connection of its own; a notice fires ``changed``."""

    def __init__(self, engine: PostgresEngine, changed: Signal) -> None:
        self._engine = engine
        self._changed = changed
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
