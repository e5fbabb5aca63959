"""Projects through the ledger: the project id and every task id of its batches are kept.

A video batch charges credits: its create is written ahead like every other, its task ids
recorded with its answer in one transaction, its key idempotent.
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import anyio
import pytest

from videogen_async import AmbiguousCreateError, Ledger
from videogen_async.testing import SandboxServer

from ._procs import Creator
from ._service import Service

BATCHER = Path(__file__).with_name("_batcher.py")

REFERENCE = "https://cdn.example.com/ref.mp4"
PRODUCTS = ["https://cdn.example.com/p1.png"]


async def test_project_and_its_batch_are_recorded_and_watched(ledger_url: str) -> None:
    async with SandboxServer(time_scale=0.001, seed=9) as server, server.client() as client:
        async with Ledger.open(ledger_url, max_credits=1000) as ledger:
            project = await ledger.create_project(
                client, REFERENCE, PRODUCTS, key="ad-1", mode="manual"
            )
            assert project.kind == "project"
            assert project.project_id == server.project_ids[0]
            again = await ledger.create_project(
                client, REFERENCE, PRODUCTS, key="ad-1", mode="manual"
            )
            assert again.project_id == project.project_id
            assert len(server.project_ids) == 1

            await client.projects.wait_for_script(project.project_id, timeout=30)
            tasks = await ledger.create_videos(client, "ad-1", out_number=2)
            assert len(tasks) == 2
            assert {t.task_id for t in tasks} <= set(server.task_ids)
            assert all(t.kind == "project_task" and t.state == "pending" for t in tasks)
            assert all(t.project_id == project.project_id for t in tasks)
            # Recording the same ids again keeps them as they are.
            assert (
                await ledger.record_project_tasks(
                    "ad-1", project.project_id, [t.task_id for t in tasks]
                )
                == tasks
            )

            async with ledger.watch(client, claim_interval=0.05) as finished:
                done = []
                async for entry in finished:
                    done.append(entry)
                    if len(done) == 2:
                        break
            assert sorted(e.key for e in done) == sorted(t.key for t in tasks)
            assert all(e.is_terminal for e in done)
            summary = await ledger.summary()
            assert summary["reserved"] == 0


async def test_a_watcher_that_stops_when_idle_stops_beside_a_project_entry(ledger_url: str) -> None:
    # A project's own entry stays pending (its tasks are the watchers'): no watcher claims it,
    # and one that stops when idle is not held up by it, yet yields the project's video first.
    async with SandboxServer(time_scale=0.001, seed=9) as server, server.client() as client:
        async with Ledger.open(ledger_url) as ledger:
            project = await ledger.create_project(
                client, REFERENCE, PRODUCTS, key="ad-1", mode="manual"
            )
            await client.projects.wait_for_script(project.project_id, timeout=30)
            tasks = await ledger.create_videos(client, "ad-1", out_number=1)
            with anyio.fail_after(60):  # it ends: the project's entry holds nobody up
                watch = ledger.watch(client, claim_interval=0.05, stop_when_idle=True)
                async with watch as finished:
                    done = [entry.key async for entry in finished]
            assert done == [tasks[0].key]
            assert (await ledger.get("ad-1")).state == "pending"  # type: ignore[union-attr]


async def test_a_video_batch_is_written_ahead_once_with_the_projects_metadata(
    ledger_url: str,
) -> None:
    async with Service() as service, service.client() as client, Ledger.open(ledger_url) as ledger:
        await ledger.create_project(
            client, REFERENCE, PRODUCTS, key="ad", metadata={"tenant": "acme", "run": 1}
        )
        tasks = await ledger.create_videos(client, "ad", batch_key="b1", metadata={"run": 2})
        again = await ledger.create_videos(client, "ad", batch_key="b1", metadata={"run": 3})
        batch = await ledger.get("b1")
        other = await ledger.create_videos(client, "ad")
        tenants = [e.key async for e in ledger.entries(metadata={"tenant": "acme"})]
    assert service.posts == 3  # the project, b1 once, the batch without a key
    assert again == tasks
    assert sorted(t.task_id for t in tasks) == sorted(service.ids[:2])
    assert all(t.kind == "project_task" and t.state == "pending" for t in tasks)
    assert all(t.metadata == {"tenant": "acme", "run": 2} for t in tasks)
    assert batch is not None
    assert (batch.kind, batch.state, batch.project_id) == ("videos", "created", "p-1")
    assert sorted(t.task_id for t in other) == sorted(service.ids[2:])
    assert len(tenants) == 1 + 1 + 2 + 1 + 2  # the project, two batches and their tasks


@pytest.mark.skipif(sys.platform == "win32", reason="the process is killed with SIGKILL")
async def test_a_batch_killed_between_its_answer_and_its_record_is_never_sent_again(
    sqlite_url: str,
) -> None:
    holder: list[sqlite3.Connection] = []

    def hold_the_file() -> None:  # every write of the ledger now waits
        conn = sqlite3.connect(sqlite_url, isolation_level=None, check_same_thread=False)
        conn.execute("BEGIN IMMEDIATE")
        holder.append(conn)

    async def on_post(number: int) -> None:
        if number == 2:  # the batch, written ahead: its answer cannot be recorded
            await anyio.to_thread.run_sync(hold_the_file)

    async with Service(on_post=on_post) as service:
        child = await Creator.script(BATCHER, sqlite_url, service.base_url)
        await child.go()
        with anyio.fail_after(30):
            await service.wait_until(lambda: service.answered == 2)
        await child.kill()
        holder[0].rollback()
        holder[0].close()
        async with service.client() as client, Ledger.open(sqlite_url) as ledger:
            with pytest.raises(AmbiguousCreateError) as caught:
                await ledger.create_videos(client, "ad", batch_key="b1")
            batch = await ledger.get("b1")
    assert service.posts == 2  # the retry sent nothing: the batch may have been charged
    assert caught.value.key == "b1"
    assert batch is not None
    assert (batch.kind, batch.state) == ("videos", "unknown")
