"""Group commit: the writes of a grouped plan in flight at once share a transaction, and a group
that fails is written again one write at a time, so one bad write never takes the others down.

Driven through the store itself, on both engines: a plan of the test's own, told to the store
at construction as one it groups.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest

from videogen_async import LedgerError
from videogen_async._ledger._engines import engine_for
from videogen_async._ledger._schema import Plan, q
from videogen_async._ledger._store import Store

TABLE = "CREATE TABLE IF NOT EXISTS group_test (k TEXT PRIMARY KEY)"


def _put(key: str) -> Plan[str]:
    yield q("INSERT INTO group_test (k) VALUES ($1)", key)
    return key


def _create() -> Plan[None]:
    yield q(TABLE)


def _keys() -> Plan[list[str]]:
    rows = yield q("SELECT k FROM group_test ORDER BY k")
    return [row["k"] for row in rows]


async def _concurrently(store: Store, keys: list[str]) -> dict[str, object]:
    """Write each key at once (the first alone, the others queued behind it: one group)."""
    outcomes: dict[str, object] = {}

    async def one(key: str) -> None:
        try:
            outcomes[key] = await store.write(_put, key)
        except LedgerError as exc:
            outcomes[key] = exc

    async with anyio.create_task_group() as tg:
        for key in keys:
            tg.start_soon(one, key)
    return outcomes


@pytest.fixture
async def store(ledger_url: str) -> AsyncIterator[Store]:
    store = Store(engine_for(ledger_url), 30.0, grouped=(_put,))
    await store.open()
    await store.write(_create)
    try:
        yield store
    finally:
        await store.close()


async def test_writes_in_flight_at_once_share_a_transaction(store: Store) -> None:
    before = store.writes
    keys = [f"k{n:02d}" for n in range(12)]
    outcomes = await _concurrently(store, keys)
    assert outcomes == {key: key for key in keys}
    assert await store.read(_keys) == keys
    # One transaction, or two: the first write may have begun alone, the others queued
    # behind it (twelve one at a time: no group commit).
    assert store.writes - before <= 2


async def test_a_failing_group_is_written_again_one_write_at_a_time(store: Store) -> None:
    await store.write(_put, "taken")
    before = store.writes
    keys = ["a0", "a1", "taken", "a2", "a3"]  # "taken" breaks the key: the group fails
    outcomes = await _concurrently(store, keys)
    assert isinstance(outcomes.pop("taken"), LedgerError)
    assert outcomes == {key: key for key in ("a0", "a1", "a2", "a3")}
    assert await store.read(_keys) == ["a0", "a1", "a2", "a3", "taken"]
    # The failed group rolled back, then each write alone (the one that failed again is not
    # committed): four commits, whether the first began alone or in the group.
    assert store.writes - before == 4
