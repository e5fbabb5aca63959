"""The PostgreSQL engine, through asyncpg: one ledger shared by processes on many machines.

Every change is one transaction. Claims are one ``UPDATE ... WHERE key IN (SELECT ... FOR
UPDATE SKIP LOCKED)``, so concurrent watchers never wait on nor take each other's rows. Times
(leases, the shared pause) are the database server's clock, so machines need not agree on
theirs. The budget row is locked (``SELECT ... FOR UPDATE``) for the reservation.
"""

# ruff: noqa: S608 - the SQL interpolates only this module's constant names and fragments;
# every value is a bound parameter.

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ._postgres_conn import _E, _NOW, PostgresConnection
from ._store import (
    CreateStart,
    Hold,
    NewEntry,
    Row,
    claim_count,
    reservation,
    share_and_held,
)

__all__ = ["PostgresStore"]

_TERMINAL = "('succeeded', 'failed', 'error')"
_CLAIMABLE = (
    f"(state = 'pending' OR (state IN {_TERMINAL} AND delivered = 0))"
    f" AND (lease_until IS NULL OR lease_until < {_NOW})"
)


_COUNTS = (
    "SELECT count(*) AS open, count(*) FILTER (WHERE owner = $1) AS mine,"
    f" (SELECT count(*) FROM videogen_ledger_watchers WHERE seen_until >= {_NOW}) AS live"
    f" FROM {_E} WHERE state = 'pending' OR (state IN {_TERMINAL} AND delivered = 0)"
)


async def _lock_keys(conn: Any, keys: Sequence[str]) -> None:
    """Lock entries in key order, the order every multi-row writer takes its row locks in."""
    if keys:
        await conn.execute(
            f"SELECT 1 FROM {_E} WHERE key = ANY($1::text[]) ORDER BY key FOR UPDATE",
            sorted(set(keys)),
        )


class _Abort(Exception):
    def __init__(self, result: CreateStart) -> None:
        self.result = result


class PostgresStore(PostgresConnection):
    """A ledger in a PostgreSQL database."""

    # -- creates ---------------------------------------------------------------------------

    async def _reserve(self, conn: Any, key: str, hold: Hold) -> None:
        budget = await conn.fetchrow("SELECT * FROM videogen_ledger_budget WHERE id = 1 FOR UPDATE")
        refused, amount, unpriced = reservation(budget, hold)
        if refused is not None:
            raise _Abort(refused)  # rolls the transaction back
        await conn.execute(
            "UPDATE videogen_ledger_budget SET reserved = reserved + $1,"
            " unpriced = unpriced + $2 WHERE id = 1",
            amount,
            unpriced,
        )
        await conn.execute(
            f"UPDATE {_E} SET reserved = $1, unpriced = $2 WHERE key = $3", amount, unpriced, key
        )

    async def _decide(self, write: Callable[..., Any], first: Any, hold: Hold) -> CreateStart:
        """Run a write-ahead step in one transaction; a refused reservation rolls it back."""
        try:
            async with self._tx() as conn:
                return await write(conn, first, hold)  # type: ignore[no-any-return]
        except _Abort as abort:
            return abort.result

    async def begin_create(self, new: NewEntry, hold: Hold) -> CreateStart:
        return await self._decide(self._begin_create, new, hold)

    async def restart_unknown(self, key: str, hold: Hold) -> CreateStart:
        return await self._decide(self._restart_unknown, key, hold)

    async def _begin_create(self, conn: Any, new: NewEntry, hold: Hold) -> CreateStart:
        taken = await conn.fetchrow(
            f"INSERT INTO {_E} (key, kind, state, project_id, model, duration, request,"
            " owner, lease_until, created_at, updated_at)"
            f" VALUES ($1, $2, 'creating', $3, $4, $5, $6, $7, {_NOW} + $8, {_NOW},"
            f" {_NOW}) ON CONFLICT (key) DO NOTHING RETURNING *",
            *new.columns(),
            hold.owner,
            hold.lease,
        )
        if taken is None:
            taken = await conn.fetchrow(
                f"UPDATE {_E} SET state = 'creating', request = $1, model = $2,"
                f" duration = $3, owner = $4, lease_until = {_NOW} + $5, error = NULL,"
                f" updated_at = {_NOW} WHERE key = $6 AND state = 'refused' RETURNING *",
                new.request,
                new.model,
                new.duration,
                hold.owner,
                hold.lease,
                new.key,
            )
        if taken is None:
            return CreateStart("existing", row=await self._row(conn, new.key))
        if hold.cap is None:  # nothing to reserve: the row as written
            return CreateStart("new", row=dict(taken))
        await self._reserve(conn, new.key, hold)
        return CreateStart("new", row=await self._row(conn, new.key))

    async def _restart_unknown(self, conn: Any, key: str, hold: Hold) -> CreateStart:
        taken = await conn.fetchval(
            f"UPDATE {_E} SET state = 'creating', owner = $1,"
            f" lease_until = {_NOW} + $2, updated_at = {_NOW}"
            " WHERE key = $3 AND state = 'unknown' RETURNING key",
            hold.owner,
            hold.lease,
            key,
        )
        if taken is None:
            return CreateStart("existing", row=await self._row(conn, key))
        await self._reserve(conn, key, hold)
        return CreateStart("new", row=await self._row(conn, key))

    async def settle_created(
        self, key: str, *, task_id: str | None, project_id: str | None, cost: float
    ) -> Row:
        async with self._tx() as conn:
            old = await conn.fetchrow(
                f"SELECT kind, model, duration, project_id, reserved, unpriced FROM {_E}"
                " WHERE key = $1",
                key,
            )
            assert old is not None  # noqa: S101 - written by this process before the send
            if old["reserved"] or old["unpriced"] or cost:
                await conn.execute(
                    "UPDATE videogen_ledger_budget SET reserved = GREATEST(0, reserved - $1),"
                    " unpriced = GREATEST(0, unpriced - $2), spent = spent + $3 WHERE id = 1",
                    old["reserved"],
                    old["unpriced"],
                    cost,
                )
            row = await conn.fetchrow(
                f"UPDATE {_E} SET state = 'pending', task_id = $1, project_id = $2,"
                " credits_cost = $3, reserved = 0, unpriced = 0, owner = NULL,"
                f" lease_until = NULL, error = NULL, updated_at = {_NOW} WHERE key = $4"
                " RETURNING *",
                task_id,
                project_id or old["project_id"],
                cost,
                key,
            )
            if old["kind"] == "task" and old["duration"] and cost > 0:
                await conn.execute(
                    "INSERT INTO videogen_ledger_rates (model, per_second) VALUES ($1, $2)"
                    " ON CONFLICT (model) DO UPDATE SET per_second ="
                    " GREATEST(videogen_ledger_rates.per_second, excluded.per_second)",
                    old["model"] or "",
                    cost / old["duration"],
                )
            return dict(row)

    async def _fail_one(self, conn: Any, key: str, state: str, error: str) -> Row:
        old = await self._row(conn, key)
        assert old is not None  # noqa: S101 - the caller holds the row
        spent = old["reserved"] if state == "unknown" else 0.0
        await conn.execute(
            "UPDATE videogen_ledger_budget SET reserved = GREATEST(0, reserved - $1),"
            " unpriced = GREATEST(0, unpriced - $2), spent = spent + $3 WHERE id = 1",
            old["reserved"],
            old["unpriced"],
            spent,
        )
        row = await conn.fetchrow(
            f"UPDATE {_E} SET state = $1, error = $2, reserved = 0, unpriced = 0,"
            f" credits_cost = $3, owner = NULL, lease_until = NULL, updated_at = {_NOW}"
            " WHERE key = $4 RETURNING *",
            state,
            error,
            spent if state == "unknown" else None,
            key,
        )
        return dict(row)

    async def settle_failed(self, key: str, *, state: str, error: str) -> Row:
        async with self._tx() as conn:
            return await self._fail_one(conn, key, state, error)

    async def expire_creating(self, key: str | None = None) -> int:
        query = f"SELECT key FROM {_E} WHERE state = 'creating' AND lease_until < {_NOW}"
        args: tuple[Any, ...] = ()
        if key is not None:
            query += " AND key = $1"
            args = (key,)
        if not await self._fetch(query + " LIMIT 1", *args):
            return 0
        async with self._tx() as conn:
            keys = [r["key"] for r in await conn.fetch(query + " FOR UPDATE SKIP LOCKED", *args)]
            for found in keys:
                await self._fail_one(
                    conn, found, "unknown", "the creating process stopped before an answer"
                )
            return len(keys)

    async def add_batch_tasks(
        self, project_key: str, project_id: str, task_ids: Sequence[str], request: str
    ) -> list[Row]:
        async with self._tx() as conn:
            await conn.executemany(
                f"INSERT INTO {_E} (key, kind, state, task_id, project_id, request, created_at,"
                f" updated_at) VALUES ($1, 'project_task', 'pending', $2, $3, $4, {_NOW}, {_NOW})"
                " ON CONFLICT DO NOTHING",
                [(f"{project_key}/{t}", t, project_id, request) for t in task_ids],
            )
            rows = await conn.fetch(
                f"SELECT * FROM {_E} WHERE task_id = ANY($1::text[]) ORDER BY key", list(task_ids)
            )
            return [dict(r) for r in rows]

    # -- reads -----------------------------------------------------------------------------

    async def get(self, key: str) -> Row | None:
        return await self._fetchrow(f"SELECT * FROM {_E} WHERE key = $1", key)

    async def page(self, after: str | None, limit: int) -> list[Row]:
        if after is None:
            return await self._fetch(f"SELECT * FROM {_E} ORDER BY key LIMIT $1", limit)
        return await self._fetch(
            f"SELECT * FROM {_E} WHERE key > $1 ORDER BY key LIMIT $2", after, limit
        )

    async def summary(self) -> dict[str, Any]:
        counts = {
            r["state"]: r["n"]
            for r in await self._fetch(f"SELECT state, COUNT(*) AS n FROM {_E} GROUP BY state")
        }
        budget = await self._fetchrow("SELECT * FROM videogen_ledger_budget WHERE id = 1")
        assert budget is not None  # noqa: S101 - created with the schema
        return {"states": counts, "spent": budget["spent"], "reserved": budget["reserved"]}

    async def has_open(self, owner: str = "") -> bool:
        row = await self._fetchrow(
            f"SELECT 1 AS one FROM {_E} WHERE state IN ('creating', 'pending') OR"
            f" (state IN {_TERMINAL} AND delivered = 0 AND (owner IS NULL OR owner != $1))"
            " LIMIT 1",
            owner,
        )
        return row is not None

    async def rate(self, model: str) -> float | None:
        row = await self._fetchrow(
            "SELECT per_second FROM videogen_ledger_rates WHERE model = $1", model
        )
        return None if row is None else float(row["per_second"])

    # -- watchers --------------------------------------------------------------------------

    async def claim(self, owner: str, lease: float, limit: int) -> list[Row]:
        if not await self._fetch(f"SELECT 1 FROM {_E} WHERE {_CLAIMABLE} LIMIT 1"):
            return []
        async with self._tx() as conn:
            counts = await conn.fetchrow(_COUNTS, owner)
            take = claim_count(counts, limit)
            if take == 0:
                return []
            rows = await conn.fetch(
                f"UPDATE {_E} SET owner = $1, lease_until = {_NOW} + $2 WHERE key IN"
                f" (SELECT key FROM {_E} WHERE {_CLAIMABLE} ORDER BY created_at LIMIT $3"
                " FOR UPDATE SKIP LOCKED) RETURNING key, task_id, state, model, duration",
                owner,
                lease,
                take,
            )
            return [dict(r) for r in rows]

    async def renew(self, owner: str, lease: float) -> int:
        async with self._tx() as conn:
            await conn.execute(
                f"UPDATE videogen_ledger_watchers SET seen_until = {_NOW} + $1 WHERE owner = $2",
                lease,
                owner,
            )
            status = await conn.execute(
                f"UPDATE {_E} AS e SET lease_until = {_NOW} + $1 FROM"
                f" (SELECT key FROM {_E} WHERE owner = $2 ORDER BY key FOR UPDATE) AS mine"
                " WHERE e.key = mine.key",
                lease,
                owner,
            )
            return int(status.split()[-1])

    async def register(self, owner: str, lease: float) -> None:
        async with self._tx() as conn:
            await conn.execute(f"DELETE FROM videogen_ledger_watchers WHERE seen_until < {_NOW}")
            await conn.execute(
                "INSERT INTO videogen_ledger_watchers (owner, seen_until)"
                f" VALUES ($1, {_NOW} + $2) ON CONFLICT (owner)"
                " DO UPDATE SET seen_until = excluded.seen_until",
                owner,
                lease,
            )

    async def share(self, owner: str) -> tuple[int, int]:
        counts = await self._fetchrow(_COUNTS, owner)
        assert counts is not None  # noqa: S101 - an aggregate returns one row
        return share_and_held(counts)

    async def release_keys(self, owner: str, keys: Sequence[str]) -> None:
        async with self._tx() as conn:
            await _lock_keys(conn, keys)
            await conn.execute(
                f"UPDATE {_E} SET owner = NULL, lease_until = NULL"
                " WHERE key = ANY($1::text[]) AND owner = $2 AND state = 'pending'",
                list(keys),
                owner,
            )

    async def load_classes(self) -> dict[str, tuple[str, int]]:
        rows = await self._fetch("SELECT class_key, stats, version FROM videogen_ledger_classes")
        return {row["class_key"]: (row["stats"], int(row["version"])) for row in rows}

    async def save_class(self, key: str, stats: str, version: int) -> bool:
        async with self._tx() as conn:
            if version == 0:
                status = await conn.execute(
                    "INSERT INTO videogen_ledger_classes (class_key, stats, version)"
                    " VALUES ($1, $2, 1) ON CONFLICT (class_key) DO NOTHING",
                    key,
                    stats,
                )
            else:
                status = await conn.execute(
                    "UPDATE videogen_ledger_classes SET stats = $1, version = version + 1"
                    " WHERE class_key = $2 AND version = $3",
                    stats,
                    key,
                    version,
                )
            return bool(status.endswith(" 1"))

    async def finish_many(
        self, owner: str, items: Sequence[tuple[str, str, float, str]], acks: Sequence[str]
    ) -> list[Row]:
        rows: list[Row] = []
        async with self._tx() as conn:
            if items:
                # The budget row first, then the entries in key order: every writer takes its
                # locks in the same order (an entry handed from one watcher to another is
                # touched by both; a watcher's renewal runs beside its own writes on another
                # connection of the pool), so that two writers never wait on each other.
                await conn.execute("SELECT 1 FROM videogen_ledger_budget WHERE id = 1 FOR UPDATE")
            await _lock_keys(conn, [item[0] for item in items] + list(acks))
            if items:
                keys, states, costs, tasks = (list(column) for column in zip(*items, strict=True))
                found = await conn.fetch(
                    f"WITH old AS (SELECT key, credits_cost FROM {_E} WHERE key = ANY($1::text[])"
                    " AND owner = $5 AND state = 'pending' ORDER BY key FOR UPDATE)"
                    f" UPDATE {_E} AS e SET state = v.state, credits_cost = v.cost, task = v.task,"
                    f" delivered = 0, finished_at = {_NOW}, updated_at = {_NOW}, error = NULL"
                    " FROM unnest($1::text[], $2::text[], $3::float8[], $4::text[])"
                    " AS v(key, state, cost, task), old"
                    " WHERE e.key = v.key AND old.key = v.key"
                    " RETURNING e.*, old.credits_cost AS old_cost",
                    keys,
                    states,
                    costs,
                    tasks,
                    owner,
                )
                delta = 0.0
                for record in found:
                    row = dict(record)
                    delta += (row["credits_cost"] or 0.0) - (row.pop("old_cost") or 0.0)
                    rows.append(row)
                if delta:
                    await conn.execute(
                        "UPDATE videogen_ledger_budget SET spent = spent + $1 WHERE id = 1", delta
                    )
            if acks:
                await conn.execute(
                    f"UPDATE {_E} SET delivered = 1, owner = NULL, lease_until = NULL"
                    " WHERE key = ANY($1::text[]) AND owner = $2",
                    list(acks),
                    owner,
                )
        return rows

    async def poll_failed(self, key: str, owner: str, error: str, retry_in: float) -> None:
        async with self._tx() as conn:
            await conn.execute(
                f"UPDATE {_E} SET owner = NULL, lease_until = {_NOW} + $1, error = $2,"
                f" updated_at = {_NOW} WHERE key = $3 AND owner = $4",
                retry_in,
                error,
                key,
                owner,
            )

    async def release(self, owner: str) -> None:
        async with self._tx() as conn:
            await conn.execute(
                f"UPDATE {_E} AS e SET owner = NULL, lease_until = NULL FROM"
                f" (SELECT key FROM {_E} WHERE owner = $1 ORDER BY key FOR UPDATE) AS mine"
                " WHERE e.key = mine.key",
                owner,
            )
            await conn.execute("DELETE FROM videogen_ledger_watchers WHERE owner = $1", owner)

    async def pause_remaining(self) -> float:
        row = await self._fetchrow(
            f"SELECT pause_until - {_NOW} AS left FROM videogen_ledger_pacing WHERE id = 1"
        )
        return 0.0 if row is None else max(0.0, float(row["left"]))

    async def pause_for(self, seconds: float) -> None:
        async with self._tx() as conn:
            await conn.execute(
                "UPDATE videogen_ledger_pacing SET pause_until ="
                f" GREATEST(pause_until, {_NOW} + $1) WHERE id = 1",
                seconds,
            )
