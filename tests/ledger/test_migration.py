"""A ledger of schema version 2, made by the earlier version's own statements, migrates to 5.

The migrations only add (the ``prices`` table; an entry's metadata and version, the changes,
the outbox); every entry, the budget and the learned classes are kept, and the ledger is used
as any other: creates priced under a cap, watchers, waits and metadata.
A ``creating`` entry of an earlier version's creator (which held no liveness lock) is left to
its lease.
"""

from __future__ import annotations

import contextlib
import sqlite3

import anyio

from videogen_async import Ledger

from ._service import Service

# The statements of the earlier version (schema version 2), as it wrote them.
V2 = [
    "CREATE TABLE IF NOT EXISTS videogen_ledger_meta ( name TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS videogen_ledger_entries ( key TEXT PRIMARY KEY,"
    " kind TEXT NOT NULL DEFAULT 'task', state TEXT NOT NULL, task_id TEXT UNIQUE,"
    " project_id TEXT, model TEXT, duration INTEGER, request TEXT NOT NULL,"
    " reserved {real} NOT NULL DEFAULT 0, unpriced INTEGER NOT NULL DEFAULT 0,"
    " credits_cost {real}, task TEXT, error TEXT, owner TEXT, lease_until {real},"
    " delivered INTEGER NOT NULL DEFAULT 0, created_at {real} NOT NULL,"
    " updated_at {real} NOT NULL, finished_at {real})",
    "CREATE INDEX IF NOT EXISTS videogen_ledger_entries_claim"
    " ON videogen_ledger_entries (state, lease_until)",
    "CREATE INDEX IF NOT EXISTS videogen_ledger_entries_owner ON videogen_ledger_entries (owner)",
    "CREATE TABLE IF NOT EXISTS videogen_ledger_budget ( id INTEGER PRIMARY KEY CHECK (id = 1),"
    " spent {real} NOT NULL DEFAULT 0, reserved {real} NOT NULL DEFAULT 0,"
    " unpriced INTEGER NOT NULL DEFAULT 0)",
    "CREATE TABLE IF NOT EXISTS videogen_ledger_pacing ("
    " id INTEGER PRIMARY KEY CHECK (id = 1), pause_until {real} NOT NULL DEFAULT 0)",
    "CREATE TABLE IF NOT EXISTS videogen_ledger_rates ( model TEXT PRIMARY KEY,"
    " per_second {real} NOT NULL)",
    "CREATE TABLE IF NOT EXISTS videogen_ledger_watchers ("
    " owner TEXT PRIMARY KEY, seen_until DOUBLE PRECISION NOT NULL)",
    "CREATE TABLE IF NOT EXISTS videogen_ledger_classes ("
    " class_key TEXT PRIMARY KEY, stats TEXT NOT NULL, version INTEGER NOT NULL)",
    "INSERT INTO videogen_ledger_budget (id) VALUES (1) ON CONFLICT (id) DO NOTHING",
    "INSERT INTO videogen_ledger_pacing (id) VALUES (1) ON CONFLICT (id) DO NOTHING",
    "INSERT INTO videogen_ledger_meta (name, value) VALUES"
    " ('application', 'videogen_async.ledger') ON CONFLICT (name) DO NOTHING",
    "INSERT INTO videogen_ledger_meta (name, value) VALUES"
    " ('schema_version', '2') ON CONFLICT (name) DO NOTHING",
    # What an earlier version's use left: a task waited on, a create in flight, a class.
    "INSERT INTO videogen_ledger_entries (key, kind, state, task_id, model, duration, request,"
    " credits_cost, created_at, updated_at) VALUES ('old', 'task', 'pending', 'old-id',"
    " 'videomodel_2_0', 4, '{{\"prompt\": \"x\"}}', 8, 1, 1)",
    "INSERT INTO videogen_ledger_entries (key, kind, state, request, owner, lease_until,"
    " created_at, updated_at) VALUES ('flight', 'task', 'creating', '{{}}',"
    " 'creator:1:0123456789ab', 1e12, 1, 1)",
    "UPDATE videogen_ledger_budget SET spent = 8 WHERE id = 1",
    "INSERT INTO videogen_ledger_classes VALUES ('videomodel_2_0/4', '{{}}', 3)",
]


async def _make_v2(url: str) -> None:
    if url.startswith("postgresql"):
        import asyncpg

        conn = await asyncpg.connect(url)
        try:
            for statement in V2:
                await conn.execute(statement.format(real="DOUBLE PRECISION"))
        finally:
            await conn.close()
        return

    def write() -> None:
        with contextlib.closing(sqlite3.connect(url)) as conn, conn:
            for statement in V2:
                conn.execute(statement.format(real="REAL"))

    await anyio.to_thread.run_sync(write)


async def test_a_v2_ledger_migrates_and_keeps_everything(ledger_url: str) -> None:
    await _make_v2(ledger_url)
    async with Service() as service, service.client() as client:
        service.ids.append("old-id")
        async with Ledger.open(ledger_url, max_credits=100) as ledger:
            before = {entry.key: entry async for entry in ledger.entries()}
            created = await ledger.create_task(client, "new", key="new", duration=4)
            summary = await ledger.summary()
            with anyio.fail_after(30):
                async with ledger.watch(client, claim_interval=0.05) as finished:
                    done = sorted([(await finished.__anext__()).key for _ in range(2)])
                old = await ledger.wait("old")
                tagged = await ledger.update_metadata("old", {"tenant": "acme"})
                found = [entry.key async for entry in ledger.entries(metadata={"tenant": "acme"})]
            version = await _version(ledger_url)
    assert version == "5"
    assert (old.state, old.version) == ("succeeded", 1)
    assert (tagged.metadata, tagged.version, found) == ({"tenant": "acme"}, 2, ["old"])
    assert (before["old"].state, before["old"].task_id) == ("pending", "old-id")
    assert (before["old"].metadata, before["old"].version) == ({}, 0)
    assert before["flight"].state == "creating"  # no liveness lock: its lease decides
    assert created.state == "pending"
    assert summary["spent"] == 16
    assert done == ["new", "old"]


async def _version(url: str) -> str:
    query = "SELECT value FROM videogen_ledger_meta WHERE name = 'schema_version'"
    if url.startswith("postgresql"):
        import asyncpg

        conn = await asyncpg.connect(url)
        try:
            return str(await conn.fetchval(query))
        finally:
            await conn.close()
    with contextlib.closing(sqlite3.connect(url)) as conn:
        return str(conn.execute(query).fetchone()[0])
