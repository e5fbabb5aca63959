"""The SQLite engine: one file, any number of processes of one machine.

The connection is used from worker threads only (``anyio.to_thread``, one at a time per
ledger), never on the event loop. The file runs in WAL mode with a busy timeout, and every
change is one ``BEGIN IMMEDIATE`` transaction, so that two processes decide claims, keys and
the budget one after the other.
"""

# ruff: noqa: S608 - the SQL interpolates only this module's constant names and fragments;
# every value is a bound parameter.

from __future__ import annotations

import contextlib
import functools
import os
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import anyio

from .._exceptions import LedgerError
from ._schema import MIGRATIONS, SCHEMA_VERSION, check_meta, create_statements
from ._store import CreateStart, NewEntry, Row, Store, decide_budget, fair_share, share_of

__all__ = ["SQLiteStore"]

_T = TypeVar("_T")
_E = "videogen_ledger_entries"
_BUSY_TIMEOUT_MS = 30_000
_CLAIMABLE = (
    "((state = 'pending') OR (state IN ('succeeded', 'failed', 'error') AND delivered = 0))"
    " AND (lease_until IS NULL OR lease_until < :now)"
)


class _Abort(Exception):
    def __init__(self, result: CreateStart) -> None:
        self.result = result


def _dict(cursor: sqlite3.Cursor, row: tuple[Any, ...]) -> dict[str, Any]:
    return {column[0]: value for column, value in zip(cursor.description, row, strict=True)}


class SQLiteStore(Store):
    """A ledger in a SQLite file."""

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
        await self._run(self._open)

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
        conn.execute("PRAGMA journal_mode = WAL")
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
            await self._run(conn.close)

    # -- creates ---------------------------------------------------------------------------

    async def begin_create(
        self,
        new: NewEntry,
        *,
        owner: str,
        lease: float,
        cap: float | None,
        estimate: float | None,
    ) -> CreateStart:
        try:
            return await self._run(self._begin_create, new, owner, lease, cap, estimate)
        except _Abort as abort:
            return abort.result

    def _reserve(
        self, conn: sqlite3.Connection, key: str, cap: float | None, estimate: float | None
    ) -> CreateStart | None:
        budget = conn.execute("SELECT * FROM videogen_ledger_budget WHERE id = 1").fetchone()
        outcome, amount = decide_budget(
            cap=cap,
            spent=budget["spent"],
            reserved=budget["reserved"],
            unpriced=budget["unpriced"],
            estimate=estimate,
        )
        if outcome != "ok":
            return CreateStart(
                outcome,
                estimate=amount,
                spent=budget["spent"],
                reserved=budget["reserved"],
            )
        unpriced = 1 if (cap is not None and estimate is None) else 0
        conn.execute(
            "UPDATE videogen_ledger_budget SET reserved = reserved + ?, unpriced = unpriced + ?"
            " WHERE id = 1",
            (amount, unpriced),
        )
        conn.execute(
            f"UPDATE {_E} SET reserved = ?, unpriced = ? WHERE key = ?", (amount, unpriced, key)
        )
        return None

    def _begin_create(
        self,
        new: NewEntry,
        owner: str,
        lease: float,
        cap: float | None,
        estimate: float | None,
    ) -> CreateStart:
        now = time.time()
        with self._tx() as conn:
            taken = conn.execute(
                f"INSERT INTO {_E} (key, kind, state, project_id, model, duration, request,"
                " owner, lease_until, created_at, updated_at)"
                " VALUES (?, ?, 'creating', ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (key) DO NOTHING RETURNING *",
                (
                    new.key,
                    new.kind,
                    new.project_id,
                    new.model,
                    new.duration,
                    new.request,
                    owner,
                    now + lease,
                    now,
                    now,
                ),
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
            refused = self._reserve(conn, new.key, cap, estimate)
            if refused is not None:
                raise _Abort(refused)
            return CreateStart("new", row=self._row(conn, new.key))

    async def restart_unknown(
        self, key: str, *, owner: str, lease: float, cap: float | None, estimate: float | None
    ) -> CreateStart:
        try:
            return await self._run(self._restart_unknown, key, owner, lease, cap, estimate)
        except _Abort as abort:
            return abort.result

    def _restart_unknown(
        self, key: str, owner: str, lease: float, cap: float | None, estimate: float | None
    ) -> CreateStart:
        now = time.time()
        with self._tx() as conn:
            taken = conn.execute(
                f"UPDATE {_E} SET state = 'creating', owner = ?, lease_until = ?,"
                " updated_at = ? WHERE key = ? AND state = 'unknown' RETURNING key",
                (owner, now + lease, now, key),
            ).fetchone()
            if taken is None:
                return CreateStart("existing", row=self._row(conn, key))
            refused = self._reserve(conn, key, cap, estimate)
            if refused is not None:
                raise _Abort(refused)
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
            take = fair_share(
                limit=limit,
                open_entries=int(counts["open"]),
                watchers=int(counts["live"]),
                held=int(counts["mine"]),
            )
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
            counts = self._counts(self.conn, owner, time.time())
            return share_of(int(counts["open"]), int(counts["live"])), int(counts["mine"])

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
