"""The SQLite engine's watcher statements: claims, leases, shares, finishes and pauses.

Each change is one ``BEGIN IMMEDIATE`` transaction on the connection of
:class:`~._sqlite_conn.SQLiteConnection`, run in a worker thread.
"""

# ruff: noqa: S608 - the SQL interpolates only this module's constant names and fragments;
# every value is a bound parameter.

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence

from ._sqlite_conn import _E, SQLiteConnection
from ._store import Row, claim_count, share_and_held

__all__ = ["SQLiteWatchers"]

_CLAIMABLE = (
    "((state = 'pending') OR (state IN ('succeeded', 'failed', 'error') AND delivered = 0))"
    " AND (lease_until IS NULL OR lease_until < :now)"
)


class SQLiteWatchers(SQLiteConnection):
    """The statements of a SQLite ledger that watchers run."""

    # -- watchers --------------------------------------------------------------------------

    async def claim(self, owner: str, lease: float, limit: int) -> list[Row]:
        return await self._run(self._claim, owner, lease, limit)

    def _claim(self, owner: str, lease: float, limit: int) -> list[Row]:
        now = time.time()
        probe = self.conn.execute(
            f"SELECT 1 FROM {_E} WHERE {_CLAIMABLE} LIMIT 1", {"now": now}
        ).fetchone()
        if probe is None:  # nothing to claim: no write transaction
            return []
        with self._tx() as conn:
            counts = self._counts(conn, owner, now)
            take = claim_count(counts, limit)
            if take == 0:
                return []
            return conn.execute(
                f"UPDATE {_E} SET owner = :owner, lease_until = :until WHERE key IN"
                f" (SELECT key FROM {_E} WHERE {_CLAIMABLE} ORDER BY created_at LIMIT :limit)"
                " RETURNING key, task_id, state, model, duration",
                {"owner": owner, "until": now + lease, "now": now, "limit": take},
            ).fetchall()

    def _counts(self, conn: sqlite3.Connection, owner: str, now: float) -> Row:
        row = conn.execute(
            "SELECT count(*) AS open, coalesce(sum(owner = :owner), 0) AS mine,"
            " (SELECT count(*) FROM videogen_ledger_watchers WHERE seen_until >= :now) AS live"
            f" FROM {_E} WHERE state = 'pending'"
            " OR (state IN ('succeeded', 'failed', 'error') AND delivered = 0)",
            {"owner": owner, "now": now},
        ).fetchone()
        return row  # type: ignore[no-any-return]

    async def share(self, owner: str) -> tuple[int, int]:
        def read() -> tuple[int, int]:
            return share_and_held(self._counts(self.conn, owner, time.time()))

        return await self._run(read)

    async def register(self, owner: str, lease: float) -> None:
        def write() -> None:
            now = time.time()
            with self._tx() as conn:
                conn.execute("DELETE FROM videogen_ledger_watchers WHERE seen_until < ?", (now,))
                conn.execute(
                    "INSERT INTO videogen_ledger_watchers (owner, seen_until) VALUES (?, ?)"
                    " ON CONFLICT (owner) DO UPDATE SET seen_until = excluded.seen_until",
                    (owner, now + lease),
                )

        await self._run(write)

    async def renew(self, owner: str, lease: float) -> int:
        def write() -> int:
            until = time.time() + lease
            with self._tx() as conn:
                conn.execute(
                    "UPDATE videogen_ledger_watchers SET seen_until = ? WHERE owner = ?",
                    (until, owner),
                )
                return conn.execute(
                    f"UPDATE {_E} SET lease_until = ? WHERE owner = ?", (until, owner)
                ).rowcount

        return await self._run(write)

    async def release_keys(self, owner: str, keys: Sequence[str]) -> None:
        def write() -> None:
            with self._tx() as conn:
                conn.executemany(
                    f"UPDATE {_E} SET owner = NULL, lease_until = NULL"
                    " WHERE key = ? AND owner = ? AND state = 'pending'",
                    [(key, owner) for key in keys],
                )

        await self._run(write)

    async def load_classes(self) -> dict[str, tuple[str, int]]:
        def read() -> dict[str, tuple[str, int]]:
            rows = self.conn.execute(
                "SELECT class_key, stats, version FROM videogen_ledger_classes"
            ).fetchall()
            return {row["class_key"]: (row["stats"], int(row["version"])) for row in rows}

        return await self._run(read)

    async def save_class(self, key: str, stats: str, version: int) -> bool:
        def write() -> bool:
            with self._tx() as conn:
                if version == 0:
                    cursor = conn.execute(
                        "INSERT INTO videogen_ledger_classes (class_key, stats, version)"
                        " VALUES (?, ?, 1) ON CONFLICT (class_key) DO NOTHING",
                        (key, stats),
                    )
                else:
                    cursor = conn.execute(
                        "UPDATE videogen_ledger_classes SET stats = ?, version = version + 1"
                        " WHERE class_key = ? AND version = ?",
                        (stats, key, version),
                    )
                return cursor.rowcount == 1

        return await self._run(write)

    async def finish_many(
        self, owner: str, items: Sequence[tuple[str, str, float, str]], acks: Sequence[str]
    ) -> list[Row]:
        return await self._run(self._finish_many, owner, list(items), list(acks))

    def _finish_many(
        self, owner: str, items: list[tuple[str, str, float, str]], acks: list[str]
    ) -> list[Row]:
        now = time.time()
        rows: list[Row] = []
        with self._tx() as conn:
            delta = 0.0
            for key, state, cost, task in items:
                old = conn.execute(
                    f"SELECT credits_cost FROM {_E} WHERE key = ? AND owner = ?"
                    " AND state = 'pending'",
                    (key, owner),
                ).fetchone()
                if old is None:
                    continue
                row = conn.execute(
                    f"UPDATE {_E} SET state = ?, credits_cost = ?, task = ?, delivered = 0,"
                    " finished_at = ?, updated_at = ?, error = NULL WHERE key = ? RETURNING *",
                    (state, cost, task, now, now, key),
                ).fetchone()
                rows.append(row)
                delta += cost - (old["credits_cost"] or 0.0)
            if delta:
                conn.execute(
                    "UPDATE videogen_ledger_budget SET spent = spent + ? WHERE id = 1", (delta,)
                )
            conn.executemany(
                f"UPDATE {_E} SET delivered = 1, owner = NULL, lease_until = NULL"
                " WHERE key = ? AND owner = ?",
                [(key, owner) for key in acks],
            )
        return rows

    async def poll_failed(self, key: str, owner: str, error: str, retry_in: float) -> None:
        def write() -> None:
            now = time.time()
            with self._tx() as conn:
                conn.execute(
                    f"UPDATE {_E} SET owner = NULL, lease_until = ?, error = ?, updated_at = ?"
                    " WHERE key = ? AND owner = ?",
                    (now + retry_in, error, now, key, owner),
                )

        await self._run(write)

    async def release(self, owner: str) -> None:
        def write() -> None:
            with self._tx() as conn:
                conn.execute(
                    f"UPDATE {_E} SET owner = NULL, lease_until = NULL WHERE owner = ?", (owner,)
                )
                conn.execute("DELETE FROM videogen_ledger_watchers WHERE owner = ?", (owner,))

        await self._run(write)

    async def pause_remaining(self) -> float:
        def read() -> float:
            row = self.conn.execute(
                "SELECT pause_until FROM videogen_ledger_pacing WHERE id = 1"
            ).fetchone()
            return max(0.0, float(row["pause_until"]) - time.time())

        return await self._run(read)

    async def pause_for(self, seconds: float) -> None:
        def write() -> None:
            with self._tx() as conn:
                conn.execute(
                    "UPDATE videogen_ledger_pacing SET pause_until = MAX(pause_until, ?)"
                    " WHERE id = 1",
                    (time.time() + seconds,),
                )

        await self._run(write)
