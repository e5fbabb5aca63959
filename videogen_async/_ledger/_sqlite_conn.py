"""The SQLite engine's connection: opening the file, schema checks and migrations, transactions.

The connection is used from worker threads only (``anyio.to_thread``, one at a time per
ledger), never on the event loop. The file runs in WAL mode with a busy timeout, and every
change is one ``BEGIN IMMEDIATE`` transaction.
"""

# ruff: noqa: S608 - the SQL interpolates only this module's constant names; every value is a
# bound parameter.

from __future__ import annotations

import contextlib
import functools
import os
import sqlite3
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import anyio

from .._contract._exceptions import LedgerError
from ._schema import MIGRATIONS, SCHEMA_VERSION, check_meta, create_statements
from ._sqlite_wal import enter_wal, is_busy
from ._store import Row, Store

__all__ = ["SQLiteConnection"]

_T = TypeVar("_T")
_E = "videogen_ledger_entries"
_BUSY_TIMEOUT_MS = 30_000


def _dict(cursor: sqlite3.Cursor, row: tuple[Any, ...]) -> dict[str, Any]:
    return {column[0]: value for column, value in zip(cursor.description, row, strict=True)}


class SQLiteConnection(Store):
    """The connection half of a SQLite ledger: open, schema, close and transactions."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.url_for_errors = path
        self._conn: sqlite3.Connection | None = None
        self._limiter = anyio.CapacityLimiter(1)
        self.writes = 0

    # -- plumbing --------------------------------------------------------------------------

    async def _run(self, call: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        return await anyio.to_thread.run_sync(
            functools.partial(call, *args, **kwargs), limiter=self._limiter
        )

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            raise LedgerError(f"ledger {self.path!r} is closed")
        return self._conn

    @contextlib.contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        self.writes += 1

    def _row(self, conn: sqlite3.Connection, key: str) -> Row | None:
        row = conn.execute(f"SELECT * FROM {_E} WHERE key = ?", (key,)).fetchone()
        return row  # type: ignore[no-any-return]

    # -- open and close --------------------------------------------------------------------

    async def open(self) -> None:
        try:
            await self._run(self._open)
        except BaseException:  # cancelled while the thread opened it: close what it opened
            await self.close()
            raise

    def _open(self) -> None:
        path = self.path
        directory = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(directory):
            raise LedgerError(f"ledger {path!r}: the directory {directory!r} does not exist")
        if os.path.isdir(path):
            raise LedgerError(f"ledger {path!r}: is a directory, not a ledger file")
        try:
            conn = sqlite3.connect(
                path,
                timeout=_BUSY_TIMEOUT_MS / 1000,
                isolation_level=None,
                check_same_thread=False,
            )
        except sqlite3.Error as exc:
            raise LedgerError(f"ledger {path!r}: cannot be opened: {exc}") from exc
        conn.row_factory = _dict
        try:
            self._check_and_create(conn)
        except sqlite3.OperationalError as exc:
            conn.close()
            if not is_busy(exc):
                raise LedgerError(f"ledger {path!r}: cannot be opened: {exc}") from None
            raise LedgerError(
                f"ledger {path!r}: another connection held the file for longer than the busy"
                f" timeout ({_BUSY_TIMEOUT_MS / 1000:g} s): {exc}"
            ) from None
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise LedgerError(
                f"ledger {path!r}: is not a ledger (not a SQLite database: {exc})"
            ) from None
        except BaseException:
            conn.close()
            raise
        self._conn = conn

    def _check_and_create(self, conn: sqlite3.Connection) -> None:
        path = self.path
        # Read before anything is written: a file that is not a SQLite database fails here,
        # and so do a database of other tables and a ledger of a newer schema.
        tables = {
            row["name"]
            for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
        if tables and "videogen_ledger_meta" not in tables:
            raise LedgerError(
                f"ledger {path!r}: is a SQLite database but not a ledger (it holds other"
                " tables); nothing was written"
            )
        meta = self._meta(conn)
        if meta is not None:
            check_meta(path, meta)
        conn.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
        enter_wal(conn, timeout=_BUSY_TIMEOUT_MS / 1000)
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("BEGIN IMMEDIATE")
        try:
            meta = self._meta(conn)
            if meta is None:
                for statement in create_statements(real="REAL"):
                    conn.execute(statement)
            else:
                self._migrate(conn, meta)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def _meta(self, conn: sqlite3.Connection) -> dict[str, str] | None:
        exists = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'videogen_ledger_meta'"
        ).fetchone()
        if not exists:
            return None
        return {
            row["name"]: row["value"]
            for row in conn.execute("SELECT name, value FROM videogen_ledger_meta")
        }

    def _migrate(self, conn: sqlite3.Connection, meta: dict[str, str]) -> None:
        version = check_meta(self.path, meta)
        for target in range(version + 1, SCHEMA_VERSION + 1):
            for statement in MIGRATIONS.get(target, ()):
                conn.execute(statement)
        if version < SCHEMA_VERSION:
            conn.execute(
                "UPDATE videogen_ledger_meta SET value = ? WHERE name = 'schema_version'",
                (str(SCHEMA_VERSION),),
            )

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            # Shielded: a close reached while cancelling (Ctrl-C, a task group unwinding)
            # still closes the file rather than leaving the connection to the collector.
            with anyio.CancelScope(shield=True):
                await self._run(conn.close)
