"""Hostile ids and unstorable keys: refused or kept as a visible problem, never stored as ids.

A service of the test's own answers creates with ids that cannot be polled (a slash, white
space, a control character, a lone surrogate, NUL, ``null``, an object, a number): each is a
terminal ``unknown`` entry whose error says why, the value escaped, and nothing is sent again.
A stored id that cannot be polled (as earlier versions stored them) is marked the same way by
the watcher that claims it, and the watcher goes on. Keys no database stores are refused
before anything is written or sent.
"""

from __future__ import annotations

import contextlib
import sqlite3
from typing import Any

import anyio
import pytest

from videogen_async import AmbiguousCreateError, InvalidRequestError, Ledger

from ._service import Service

REFERENCE = "https://cdn.example.com/reference.mp4"
PRODUCTS = ["https://cdn.example.com/p1.png"]

HOSTILE: list[Any] = ["a/b", "a b", "a\u0007b", "x\ud800", "a\u0000b", "%2F", None, {"id": 1}, 12]


@pytest.mark.parametrize("answered", HOSTILE, ids=repr)
async def test_an_id_that_cannot_be_polled_is_kept_unknown_with_the_reason(
    ledger_url: str, answered: Any
) -> None:
    async with (
        Service(answer_id=lambda n: answered) as service,
        service.client() as client,
        Ledger.open(ledger_url) as ledger,
    ):
        with pytest.raises(AmbiguousCreateError):
            await ledger.create_task(client, "a fox", key="fox")
        with pytest.raises(AmbiguousCreateError):  # and never sent again
            await ledger.create_task(client, "a fox", key="fox")
        entry = await ledger.get("fox")
    assert service.posts == 1
    assert entry is not None
    assert (entry.state, entry.task_id) == ("unknown", None)
    assert entry.error is not None
    assert "task_id" in entry.error
    assert "\x00" not in entry.error
    assert all(not 0xD800 <= ord(c) <= 0xDFFF for c in entry.error)


_PENDING = (
    "INSERT INTO videogen_ledger_entries (key, kind, state, task_id, request, created_at,"
    " updated_at) VALUES ({}, 'task', 'pending', {}, '{{}}', 0, 0)"
)


async def _store_pending(url: str, rows: list[tuple[str, str]]) -> None:
    """Entries as earlier versions stored any id the service answered."""
    if url.startswith("postgresql"):
        import asyncpg

        conn = await asyncpg.connect(url)
        try:
            await conn.executemany(_PENDING.format("$1", "$2"), rows)
        finally:
            await conn.close()
        return

    def write() -> None:
        with contextlib.closing(sqlite3.connect(url)) as conn, conn:
            conn.executemany(_PENDING.format("?", "?"), rows)

    await anyio.to_thread.run_sync(write)


async def test_a_watcher_marks_a_stored_id_that_cannot_be_polled_and_goes_on(
    ledger_url: str,
) -> None:
    async with (
        Service() as service,
        service.client() as client,
        Ledger.open(ledger_url) as ledger,
    ):
        for i in range(3):
            await ledger.create_task(client, f"clip {i}", key=f"good-{i}")
        bad = [("bad-slash", "a/b"), ("bad-space", "a b"), ("bad-bell", "a\x07b")]
        await _store_pending(ledger_url, bad)
        with anyio.fail_after(30):
            watch = ledger.watch(client, claim_interval=0.05, stop_when_idle=True)
            async with watch as finished:
                done = sorted([entry.key async for entry in finished])
        entries = {entry.key: entry async for entry in ledger.entries()}
    assert done == ["good-0", "good-1", "good-2"]
    for key in ("bad-slash", "bad-space", "bad-bell"):
        assert entries[key].state == "unknown"
        assert "cannot be polled" in (entries[key].error or "")
    assert '"a\\u0007b"' in (entries["bad-bell"].error or "")
    assert all(task_id in service.ids for task_id in service.polls)  # only good ids polled


async def test_a_batch_id_that_cannot_be_polled_is_recorded_unknown(ledger_url: str) -> None:
    async with Ledger.open(ledger_url) as ledger:
        entries = await ledger.record_project_tasks("ad", "p-1", ["t-1", "a/b", "t\x002"])
        assert [(e.state, e.task_id) for e in entries] == [
            ("unknown", None),
            ("unknown", None),
            ("pending", "t-1"),
        ]
        unknown = [e.key for e in entries if e.state == "unknown"]
        assert unknown == ['ad/#1 "a/b"', 'ad/#2 "t\\u00002"']


@pytest.mark.parametrize("echo", ["a/b", "p-other"], ids=["unpollable", "another-project"])
async def test_a_batch_answer_echoing_a_strange_project_keeps_its_tasks(
    ledger_url: str, echo: str
) -> None:
    # The charged ids of a batch are its task ids: whatever project id the answer echoes,
    # they are recorded, under the project the ledger wrote ahead.
    async with Service(batch_project=echo) as service, service.client() as client:
        async with Ledger.open(ledger_url) as ledger:
            project = await ledger.create_project(client, REFERENCE, PRODUCTS, key="ad")
            tasks = await ledger.create_videos(client, "ad", batch_key="b1")
            batch = await ledger.get("b1")
    assert sorted(task.task_id or "" for task in tasks) == sorted(service.ids)
    assert {(task.state, task.project_id) for task in tasks} == {("pending", project.project_id)}
    assert batch is not None
    assert (batch.state, batch.project_id) == ("created", project.project_id)


@pytest.mark.parametrize("key", ["a\x00b", "a\ud800b"], ids=["nul", "lone-surrogate"])
async def test_a_key_no_database_stores_is_refused_before_anything_is_written(
    ledger_url: str, key: str
) -> None:
    async with (
        Service() as service,
        service.client() as client,
        Ledger.open(ledger_url) as ledger,
    ):
        with pytest.raises(InvalidRequestError, match="key: must not contain NUL") as caught:
            await ledger.create_task(client, "a fox", key=key)
        assert caught.value.field == "key"
        assert [entry async for entry in ledger.entries()] == []
    assert service.posts == 0
