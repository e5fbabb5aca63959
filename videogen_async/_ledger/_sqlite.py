"""The SQLite engine: one file, any number of processes of one machine.

The connection is used from worker threads only (``anyio.to_thread``, one at a time per
ledger), never on the event loop. The file runs in WAL mode with a busy timeout, and every
change is one ``BEGIN IMMEDIATE`` transaction, so that two processes decide claims, keys and
the budget one after the other.
"""

# ruff: noqa: S608 - the SQL interpolates only this module's constant names and fragments;
# every value is a bound parameter.

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence
from typing import Any

from .._contract._exceptions import LedgerError
from ._sqlite_conn import _E
from ._sqlite_watch import SQLiteWatchers
from ._store import CreateStart, Hold, NewEntry, Row, reservation

__all__ = ["SQLiteStore"]


class _Abort(Exception):
    def __init__(self, result: CreateStart) -> None:
        self.result = result


class SQLiteStore(SQLiteWatchers):
    """A ledger in a SQLite file."""

    # -- creates ---------------------------------------------------------------------------

    async def begin_create(self, new: NewEntry, hold: Hold) -> CreateStart:
        return await self._decide(self._begin_create, new, hold)

    async def restart_unknown(self, key: str, hold: Hold) -> CreateStart:
        return await self._decide(self._restart_unknown, key, hold)

    async def _decide(
        self, write: Callable[[Any, Hold], CreateStart], first: Any, hold: Hold
    ) -> CreateStart:
        """Run a write-ahead step; a refused reservation rolls its transaction back."""
        try:
            return await self._run(write, first, hold)
        except _Abort as abort:
            return abort.result

    def _reserve(self, conn: sqlite3.Connection, key: str, hold: Hold) -> None:
        budget = conn.execute("SELECT * FROM videogen_ledger_budget WHERE id = 1").fetchone()
        refused, amount, unpriced = reservation(budget, hold)
        if refused is not None:
            raise _Abort(refused)  # rolls the transaction back
        conn.execute(
            "UPDATE videogen_ledger_budget SET reserved = reserved + ?, unpriced = unpriced + ?"
            " WHERE id = 1",
            (amount, unpriced),
        )
        conn.execute(
            f"UPDATE {_E} SET reserved = ?, unpriced = ? WHERE key = ?", (amount, unpriced, key)
        )

    def _begin_create(self, new: NewEntry, hold: Hold) -> CreateStart:
        owner, lease, cap = hold.owner, hold.lease, hold.cap
        now = time.time()
        with self._tx() as conn:
            taken = conn.execute(
                f"INSERT INTO {_E} (key, kind, state, project_id, model, duration, request,"
                " owner, lease_until, created_at, updated_at)"
                " VALUES (?, ?, 'creating', ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (key) DO NOTHING RETURNING *",
                (*new.columns(), owner, now + lease, now, now),
            ).fetchone()
            if taken is None:
                taken = conn.execute(
                    f"UPDATE {_E} SET state = 'creating', request = ?, model = ?, duration = ?,"
                    " owner = ?, lease_until = ?, error = NULL, updated_at = ?"
                    " WHERE key = ? AND state = 'refused' RETURNING *",
                    (new.request, new.model, new.duration, owner, now + lease, now, new.key),
                ).fetchone()
            if taken is None:
                return CreateStart("existing", row=self._row(conn, new.key))
            if cap is None:  # nothing to reserve: the row as written
                return CreateStart("new", row=taken)
            self._reserve(conn, new.key, hold)
            return CreateStart("new", row=self._row(conn, new.key))

    def _restart_unknown(self, key: str, hold: Hold) -> CreateStart:
        now = time.time()
        with self._tx() as conn:
            taken = conn.execute(
                f"UPDATE {_E} SET state = 'creating', owner = ?, lease_until = ?,"
                " updated_at = ? WHERE key = ? AND state = 'unknown' RETURNING key",
                (hold.owner, now + hold.lease, now, key),
            ).fetchone()
            if taken is None:
                return CreateStart("existing", row=self._row(conn, key))
            self._reserve(conn, key, hold)
            return CreateStart("new", row=self._row(conn, key))

    async def settle_created(
        self, key: str, *, task_id: str | None, project_id: str | None, cost: float
    ) -> Row:
        return await self._run(self._settle_created, key, task_id, project_id, cost)

    def _settle_created(
        self, key: str, task_id: str | None, project_id: str | None, cost: float
    ) -> Row:
        now = time.time()
        with self._tx() as conn:
            old = conn.execute(
                f"SELECT kind, model, duration, project_id, reserved, unpriced FROM {_E}"
                " WHERE key = ?",
                (key,),
            ).fetchone()
            if old is None:  # pragma: no cover - written by this process before the send
                raise LedgerError(f"ledger key {key!r}: vanished")
            if old["reserved"] or old["unpriced"] or cost:
                conn.execute(
                    "UPDATE videogen_ledger_budget SET reserved = MAX(0, reserved - ?),"
                    " unpriced = MAX(0, unpriced - ?), spent = spent + ? WHERE id = 1",
                    (old["reserved"], old["unpriced"], cost),
                )
            row = conn.execute(
                f"UPDATE {_E} SET state = 'pending', task_id = ?, project_id = ?,"
                " credits_cost = ?, reserved = 0, unpriced = 0, owner = NULL,"
                " lease_until = NULL, error = NULL, updated_at = ? WHERE key = ? RETURNING *",
                (task_id, project_id or old["project_id"], cost, now, key),
            ).fetchone()
            if old["kind"] == "task" and old["duration"] and cost > 0:
                conn.execute(
                    "INSERT INTO videogen_ledger_rates (model, per_second) VALUES (?, ?)"
                    " ON CONFLICT (model) DO UPDATE SET per_second ="
                    " MAX(per_second, excluded.per_second)",
                    (old["model"] or "", cost / old["duration"]),
                )
            return row  # type: ignore[no-any-return]

    async def settle_failed(self, key: str, *, state: str, error: str) -> Row:
        return await self._run(self._settle_failed, key, state, error)

    def _settle_failed(self, key: str, state: str, error: str) -> Row:
        with self._tx() as conn:
            self._fail_one(conn, key, state, error, time.time())
            row = self._row(conn, key)
            if row is None:  # pragma: no cover
                raise LedgerError(f"ledger key {key!r}: vanished")
            return row

    def _fail_one(
        self, conn: sqlite3.Connection, key: str, state: str, error: str, now: float
    ) -> None:
        old = self._row(conn, key)
        if old is None:  # pragma: no cover - the caller holds the row
            raise LedgerError(f"ledger key {key!r}: vanished")
        # A refused create charged nothing: its reservation is returned. An unknown one may
        # have been charged: its reservation counts as spent.
        spent = old["reserved"] if state == "unknown" else 0.0
        conn.execute(
            "UPDATE videogen_ledger_budget SET reserved = MAX(0, reserved - ?),"
            " unpriced = MAX(0, unpriced - ?), spent = spent + ? WHERE id = 1",
            (old["reserved"], old["unpriced"], spent),
        )
        conn.execute(
            f"UPDATE {_E} SET state = ?, error = ?, reserved = 0, unpriced = 0,"
            " credits_cost = ?, owner = NULL, lease_until = NULL, updated_at = ?"
            " WHERE key = ?",
            (state, error, spent if state == "unknown" else None, now, key),
        )

    async def expire_creating(self, key: str | None = None) -> int:
        return await self._run(self._expire_creating, key)

    def _expire_creating(self, key: str | None) -> int:
        now = time.time()
        query = f"SELECT key FROM {_E} WHERE state = 'creating' AND lease_until < ?"
        args: tuple[Any, ...] = (now,)
        if key is not None:
            query += " AND key = ?"
            args += (key,)
        if self.conn.execute(query + " LIMIT 1", args).fetchone() is None:
            return 0
        with self._tx() as conn:
            keys = [row["key"] for row in conn.execute(query, args).fetchall()]
            for found in keys:
                self._fail_one(
                    conn, found, "unknown", "the creating process stopped before an answer", now
                )
            return len(keys)

    async def add_batch_tasks(
        self, project_key: str, project_id: str, task_ids: Sequence[str], request: str
    ) -> list[Row]:
        return await self._run(self._add_batch_tasks, project_key, project_id, task_ids, request)

    def _add_batch_tasks(
        self, project_key: str, project_id: str, task_ids: Sequence[str], request: str
    ) -> list[Row]:
        now = time.time()
        with self._tx() as conn:
            for task_id in task_ids:
                conn.execute(
                    f"INSERT INTO {_E} (key, kind, state, task_id, project_id, request,"
                    " created_at, updated_at) VALUES (?, 'project_task', 'pending', ?, ?, ?, ?, ?)"
                    " ON CONFLICT DO NOTHING",
                    (f"{project_key}/{task_id}", task_id, project_id, request, now, now),
                )
            marks = ",".join("?" * len(task_ids))
            return conn.execute(
                f"SELECT * FROM {_E} WHERE task_id IN ({marks}) ORDER BY key", tuple(task_ids)
            ).fetchall()

    # -- reads -----------------------------------------------------------------------------

    async def get(self, key: str) -> Row | None:
        return await self._run(lambda: self._row(self.conn, key))

    async def page(self, after: str | None, limit: int) -> list[Row]:
        def read() -> list[Row]:
            if after is None:
                cursor = self.conn.execute(f"SELECT * FROM {_E} ORDER BY key LIMIT ?", (limit,))
            else:
                cursor = self.conn.execute(
                    f"SELECT * FROM {_E} WHERE key > ? ORDER BY key LIMIT ?", (after, limit)
                )
            return cursor.fetchall()

        return await self._run(read)

    async def summary(self) -> dict[str, Any]:
        def read() -> dict[str, Any]:
            conn = self.conn
            counts = {
                row["state"]: row["n"]
                for row in conn.execute(f"SELECT state, COUNT(*) AS n FROM {_E} GROUP BY state")
            }
            budget = conn.execute("SELECT * FROM videogen_ledger_budget WHERE id = 1").fetchone()
            return {"states": counts, "spent": budget["spent"], "reserved": budget["reserved"]}

        return await self._run(read)

    async def has_open(self, owner: str = "") -> bool:
        def read() -> bool:
            row = self.conn.execute(
                f"SELECT 1 FROM {_E} WHERE state IN ('creating', 'pending') OR"
                " (state IN ('succeeded', 'failed', 'error') AND delivered = 0"
                " AND (owner IS NULL OR owner != ?)) LIMIT 1",
                (owner,),
            ).fetchone()
            return row is not None

        return await self._run(read)

    async def rate(self, model: str) -> float | None:
        def read() -> float | None:
            row = self.conn.execute(
                "SELECT per_second FROM videogen_ledger_rates WHERE model = ?", (model,)
            ).fetchone()
            return None if row is None else float(row["per_second"])

        return await self._run(read)
