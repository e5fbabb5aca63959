"""The PostgreSQL engine's connection: the asyncpg pool, schema checks and migrations.

The schema is created or migrated under an advisory lock, so that processes opening one
ledger at once do it one after the other.
"""

# ruff: noqa: S608 - the SQL interpolates only this module's constant names; every value is a
# bound parameter.

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import anyio

from .._contract._exceptions import LedgerError
from ._schema import MIGRATIONS, SCHEMA_VERSION, check_meta, create_statements
from ._store import Row, Store, redact

try:
    import asyncpg
except ImportError:  # pragma: no cover - the extra is installed in the test environment
    asyncpg = None

__all__ = ["PostgresConnection"]

_E = "videogen_ledger_entries"
_NOW = "extract(epoch from clock_timestamp())"
_LOCK_ID = 0x7669646567656E  # the schema's advisory lock


class PostgresConnection(Store):
    """The connection half of a PostgreSQL ledger: the pool, schema, close and transactions."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.url_for_errors = redact(url)
        self._pool: Any = None
        self.writes = 0

    # -- plumbing --------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _tx(self) -> AsyncIterator[Any]:
        if self._pool is None:
            raise LedgerError(f"ledger {self.url_for_errors!r} is closed")
        async with self._pool.acquire() as conn, conn.transaction():
            yield conn
        self.writes += 1

    async def _fetch(self, query: str, *args: Any) -> list[Row]:
        if self._pool is None:
            raise LedgerError(f"ledger {self.url_for_errors!r} is closed")
        return [dict(r) for r in await self._pool.fetch(query, *args)]

    async def _fetchrow(self, query: str, *args: Any) -> Row | None:
        rows = await self._fetch(query, *args)
        return rows[0] if rows else None

    @staticmethod
    async def _row(conn: Any, key: str) -> Row | None:
        row = await conn.fetchrow(f"SELECT * FROM {_E} WHERE key = $1", key)
        return None if row is None else dict(row)

    # -- open and close --------------------------------------------------------------------

    async def open(self) -> None:
        where = self.url_for_errors
        if asyncpg is None:
            raise LedgerError(
                f"ledger {where!r}: PostgreSQL needs asyncpg:"
                " pip install 'videogen-async[postgres]'"
            )
        try:
            self._pool = await asyncpg.create_pool(
                self.url, min_size=1, max_size=4, timeout=10, command_timeout=60
            )
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError) as exc:
            raise LedgerError(
                f"ledger {where!r}: cannot connect: {type(exc).__name__}: {exc}"
            ) from None
        except ValueError as exc:  # a malformed DSN
            raise LedgerError(f"ledger {where!r}: malformed URL: {exc}") from None
        try:
            await self._check_and_create()
        except BaseException:
            await self.close()
            raise

    async def _meta(self, conn: Any) -> dict[str, str] | None:
        if await conn.fetchval("SELECT to_regclass('videogen_ledger_meta')") is None:
            return None
        return {
            r["name"]: r["value"]
            for r in await conn.fetch("SELECT name, value FROM videogen_ledger_meta")
        }

    async def _check_and_create(self) -> None:
        async with self._pool.acquire() as conn:
            meta = await self._meta(conn)
            if meta is not None:
                version = check_meta(self.url_for_errors, meta)
                if version == SCHEMA_VERSION:
                    return
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock($1)", _LOCK_ID)
                meta = await self._meta(conn)
                if meta is None:
                    for statement in create_statements(real="DOUBLE PRECISION"):
                        await conn.execute(statement)
                    return
                version = check_meta(self.url_for_errors, meta)
                for target in range(version + 1, SCHEMA_VERSION + 1):
                    for statement in MIGRATIONS.get(target, ()):
                        await conn.execute(statement)
                await conn.execute(
                    "UPDATE videogen_ledger_meta SET value = $1 WHERE name = 'schema_version'",
                    str(SCHEMA_VERSION),
                )

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            # Shielded and bounded: a close reached while cancelling still releases the
            # connections, and one stuck in a query is terminated rather than waited on.
            with anyio.CancelScope(shield=True):
                with anyio.move_on_after(10):
                    await pool.close()
                    return
                pool.terminate()
