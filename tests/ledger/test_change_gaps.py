"""A change that commits late is handed on, whichever transaction took its number first.

PostgreSQL numbers a change when its transaction writes it, not when it commits; the listener
holds a number passed over until every transaction that may still commit it has ended. The
transaction holding it can have a *higher* transaction id than the one that committed the next
number: a snapshot's list of running transactions (``txid_snapshot_xip``) names only ids below
the newest one that had ended, so such a holder was taken for ended, its number for never
coming, and its change was never handed on (to ``changes()``, ``wait`` and dispatch).
"""

from __future__ import annotations

import anyio
import asyncpg

from videogen_async import Ledger
from videogen_async.testing import SandboxServer

BUMP = "UPDATE videogen_ledger_entries SET version = version + 1 WHERE key = $1"


async def _read_past(ledger: Ledger, position: int) -> None:
    """Return once the ledger's listener has read the change at ``position`` (or later)."""
    listener = ledger._listener  # the one listener of the ledger, started by changes()
    with anyio.fail_after(60):
        while listener.top < position:
            await listener.moved.event.wait()


async def test_a_higher_transaction_id_holding_a_lower_position_is_waited_for(
    postgres_url: str,
) -> None:
    async with SandboxServer(manual_clock=True, seed=3) as server, server.client() as client:
        async with Ledger.open(postgres_url) as ledger:
            for key in ("a", "b", "c"):
                await ledger.create_task(client, f"clip {key}", key=key)
    low, high = await asyncpg.connect(postgres_url), await asyncpg.connect(postgres_url)
    try:
        async with Ledger.open(postgres_url) as ledger, ledger.changes() as changes:
            await low.execute("BEGIN")
            await low.fetchval("SELECT txid_current()")  # the lower transaction id
            await high.execute("BEGIN")
            await high.fetchval("SELECT txid_current()")  # the higher one
            await high.execute(BUMP, "b")  # takes the lower position
            await low.execute(BUMP, "a")  # takes the next
            await low.execute("COMMIT")  # the newest id that ended is now the lower one
            position = await low.fetchval("SELECT max(seq) FROM videogen_ledger_changes")
            await _read_past(ledger, position)  # the gap is seen while its holder runs
            await high.execute("COMMIT")
            await ledger.update_metadata("c", {"after": "both"})
            got = []
            with anyio.fail_after(60):
                while not got or got[-1].key != "c":  # the last change: all before it are in
                    got.append(await changes.__anext__())
    finally:
        await low.close()
        await high.close()
    assert [(entry.key, entry.version) for entry in got] == [("b", 2), ("a", 2), ("c", 2)]
    positions = [entry.position or 0 for entry in got]
    assert positions == sorted(positions)
