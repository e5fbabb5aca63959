"""Changes read from a position: a consumer that resumes after its last one, from any process
and after the database restarted or its file was reopened, misses nothing and sees nothing
twice; a position whose following changes were pruned is an error, never silence.
"""

from __future__ import annotations

import contextlib
import sqlite3
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import asyncpg
import pytest

from videogen_async import InvalidRequestError, Ledger, LedgerEntry, LedgerError
from videogen_async._ledger._listen import GAP_TTL
from videogen_async.testing import SandboxServer

from ._procs import Creator
from .conftest import Cluster

if sys.platform == "win32":  # pragma: no cover
    pytest.skip("the processes are stopped with signals", allow_module_level=True)

RESUMER = Path(__file__).with_name("_resumer.py")
KEYS = ["a", "b", "c"]
# Every change the tests make, in order: three creates, then two metadata changes.
ALL = [
    *(
        (key, state, version)
        for key in KEYS
        for state, version in (("creating", 0), ("pending", 1))
    ),
    ("a", "pending", 2),
    ("b", "pending", 2),
]


def _changes(lines: list[str]) -> list[tuple[int, str, str, int]]:
    found = [line.split() for line in lines if line.startswith("change ")]
    return [(int(pos), key, state, int(version)) for _, pos, key, state, version in found]


async def _take(ledger: Ledger, after: int, count: int) -> list[LedgerEntry]:
    with anyio.fail_after(60):
        async with ledger.changes(after=after) as changes:
            return [await changes.__anext__() for _ in range(count)]


def _said(entries: list[LedgerEntry]) -> list[tuple[str, str, int]]:
    return [(entry.key, entry.state, entry.version) for entry in entries]


async def _create(url: str) -> None:
    async with SandboxServer(manual_clock=True, seed=3) as server, server.client() as client:
        async with Ledger.open(url) as ledger:
            for key in KEYS:
                await ledger.create_task(client, f"clip {key}", key=key)


async def test_a_consumer_in_another_process_resumes_after_its_position(ledger_url: str) -> None:
    await _create(ledger_url)
    with anyio.fail_after(60):
        first = await Creator.script(RESUMER, ledger_url, "0", "4")
        seen = _changes(await first.finish())
        async with Ledger.open(ledger_url) as ledger:
            await ledger.update_metadata("a", {"n": 1})  # while nobody reads
            second = await Creator.script(RESUMER, ledger_url, str(seen[-1][0]), "4")
            await ledger.update_metadata("b", {"n": 2})  # once it reads again
            seen += _changes(await second.finish())
    assert [(key, state, version) for _, key, state, version in seen] == ALL
    positions = [position for position, *_ in seen]
    assert positions == sorted(set(positions))
    assert positions[0] >= 1


async def _resumed_after(url: str, between: Callable[[], Awaitable[None]]) -> None:
    await _create(url)
    async with Ledger.open(url) as ledger:
        seen = await _take(ledger, 0, 4)
    await between()  # nothing of this process is left open
    async with Ledger.open(url) as ledger:
        await ledger.update_metadata("a", {"n": 1})
        async with ledger.changes(after=seen[-1].position) as changes:
            await ledger.update_metadata("b", {"n": 2})
            with anyio.fail_after(60):
                seen += [await changes.__anext__() for _ in range(4)]
    assert _said(seen) == ALL
    positions = [entry.position for entry in seen]
    assert positions == sorted(set(positions))
    async with Ledger.open(url) as ledger:  # the same entry read from the table is equal
        assert seen[-1] == await ledger.get("b")
        assert seen[-1].position is not None


@pytest.mark.xdist_group("postgres-faults")
@pytest.mark.slow
async def test_positions_survive_a_postgresql_restart(
    fault_cluster: Cluster, fault_url: str
) -> None:
    async def restart() -> None:
        await fault_cluster.crash()
        await fault_cluster.restart()

    await _resumed_after(fault_url, restart)


async def test_positions_survive_a_sqlite_file_reopened(sqlite_url: str) -> None:
    async def nothing() -> None:
        return None

    await _resumed_after(sqlite_url, nothing)


async def _age_changes(url: str, up_to: int) -> None:
    sql = "UPDATE videogen_ledger_changes SET at = at - 7200 WHERE seq <= "
    if url.startswith("postgresql"):
        conn = await asyncpg.connect(url)
        try:
            await conn.execute(sql + "$1", up_to)
        finally:
            await conn.close()
    else:
        with contextlib.closing(sqlite3.connect(url)) as conn, conn:  # closed, and committed
            conn.execute(sql + "?", (up_to,))


async def test_a_pruned_position_is_an_error_naming_the_oldest_kept(ledger_url: str) -> None:
    await _create(ledger_url)
    async with Ledger.open(ledger_url) as ledger:
        seen = await _take(ledger, 0, 6)
    await _age_changes(ledger_url, seen[2].position or 0)  # older than an hour
    async with Ledger.open(ledger_url) as ledger:
        await ledger.update_metadata("a", {"n": 1})  # its first write prunes
        for after in (0, seen[1].position):
            with pytest.raises(
                LedgerError, match=f"oldest position still kept is {seen[3].position}"
            ):
                await _take(ledger, after or 0, 1)
        rest = await _take(ledger, seen[2].position or 0, 4)
    assert _said(rest) == ALL[3:7]


@pytest.mark.parametrize("after", [-1, True, 1.0, "3"])
async def test_after_must_be_a_position(sqlite_url: str, after: object) -> None:
    async with Ledger.open(sqlite_url) as ledger:
        with pytest.raises(InvalidRequestError, match="after"):
            ledger.changes(after=after)  # type: ignore[arg-type]


async def test_postgresql_changes_come_in_position_order_past_a_late_commit(
    postgres_url: str,
) -> None:
    await _create(postgres_url)
    conn = await asyncpg.connect(postgres_url)
    try:
        async with Ledger.open(postgres_url) as ledger, ledger.changes() as changes:
            bump = "UPDATE videogen_ledger_entries SET version = version + 1 WHERE key = $1"
            for end in ("COMMIT", "ROLLBACK"):
                await conn.execute("BEGIN")
                await conn.execute(bump, "c")  # takes its number, commits after the next
                await ledger.update_metadata("a", {"end": end})
                await conn.execute(end)
            with anyio.fail_after(GAP_TTL / 4):  # a rollback is known when it happens
                got = [await changes.__anext__() for _ in range(3)]
    finally:
        await conn.close()
    assert [(entry.key, entry.version) for entry in got] == [("c", 2), ("a", 2), ("a", 3)]
    positions = [entry.position or 0 for entry in got]
    assert positions == sorted(positions)
    assert positions[2] > positions[1] + 1
