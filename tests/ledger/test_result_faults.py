"""What came with results beyond one process, on PostgreSQL under faults.

A video batch (written ahead like every create), the dispatch outbox, metadata updates and a
watcher's write of an id the service does not know, each with the database crashed
(``pg_ctl stop -m immediate``) and restarted, or its connections killed
(``pg_terminate_backend``), in the middle of the operation. (Waits and
change iterators under the same faults: ``test_waits.py``; a dispatcher SIGKILLed
mid-delivery: ``test_dispatch.py``; a batch SIGKILLed between its answer and its record:
``test_projects.py``.)
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlsplit

import anyio
import pytest

from videogen_async import Ledger, LedgerEntry
from videogen_async._ledger import _claims as claims
from videogen_async._ledger._schema import Plan, q
from videogen_async.testing import SandboxServer

from ._service import LogEvent, Service
from .conftest import Cluster

pytestmark = [pytest.mark.xdist_group("postgres-faults"), pytest.mark.slow]

REFERENCE = "https://cdn.example.com/reference.mp4"
PRODUCTS = ["https://cdn.example.com/p1.png"]


def _database(url: str) -> str:
    return urlsplit(url).path.lstrip("/")


async def test_a_database_crash_during_a_video_batch_keeps_its_ids(
    fault_cluster: Cluster, fault_url: str
) -> None:
    async def crash(number: int) -> None:
        if number == 2:  # the batch's POST (the first is the project's)
            await fault_cluster.crash()

    async with (
        Service(on_post=crash) as service,
        service.client() as client,
        Ledger.open(fault_url) as ledger,
    ):
        await ledger.create_project(client, REFERENCE, PRODUCTS, key="ad")
        with LogEvent("not recorded yet") as kept, anyio.fail_after(60):
            creating = asyncio.ensure_future(ledger.create_videos(client, "ad", batch_key="b1"))
            await kept.wait()  # the answer is safe: the database may come back
            await fault_cluster.restart()
            tasks = await creating
        assert sorted(task.task_id or "" for task in tasks) == sorted(service.ids)
        assert {task.state for task in tasks} == {"pending"}
        again = await ledger.create_videos(client, "ad", batch_key="b1")
        assert sorted(task.key for task in again) == sorted(task.key for task in tasks)
    assert service.posts == 2  # the project and one batch: never sent again


async def test_a_dispatch_rides_out_a_crash_and_killed_connections(
    fault_cluster: Cluster, fault_url: str
) -> None:
    keys = [f"k{i}" for i in range(8)]
    async with (
        Service() as service,
        service.client() as client,
        Ledger.open(fault_url) as ledger,
    ):
        for key in keys:
            await ledger.create_task(client, f"clip {key}", key=key)
        async with ledger.watch(client, claim_interval=0.05, stop_when_idle=True) as finished:
            assert sorted([entry.key async for entry in finished]) == keys

        delivered: list[str] = []
        completed = 0  # an attempt cancelled as its lease ran out (the outage) is not made

        async def deliver(entry: LedgerEntry) -> None:
            nonlocal completed
            delivered.append(entry.key)
            if len(delivered) == 2:  # its outcome is written while the database is down
                await fault_cluster.crash()
            elif len(delivered) == 5:  # ... and on a connection that was killed
                await fault_cluster.terminate_backends(_database(fault_url))
            completed += 1

        with LogEvent("retrying for up to") as retrying, anyio.fail_after(90):
            async with anyio.create_task_group() as group:

                async def restart_on_the_outage() -> None:
                    await retrying.wait()  # the dispatcher met the outage
                    await fault_cluster.restart()

                group.start_soon(restart_on_the_outage)
                made = await ledger.dispatch(
                    "hook", deliver, backlog=True, stop_when_idle=True, concurrency=1
                )
        summary: dict[str, Any] = await ledger.summary()
    assert sorted(set(delivered)) == keys  # each at least once
    assert made == completed
    assert summary["destinations"]["hook"] == {"pending": 0, "delivered": 8, "dead": 0}


async def test_a_metadata_update_whose_connection_is_killed_mid_statement_is_done_once(
    fault_cluster: Cluster, fault_url: str
) -> None:
    import asyncpg

    database = _database(fault_url)
    async with (
        Service() as service,
        service.client() as client,
        Ledger.open(fault_url) as ledger,
    ):
        await ledger.create_task(client, "a fox", key="fox", metadata={"tenant": "acme"})
        before = await ledger.get("fox")
        assert before is not None
        admin = await asyncpg.connect(fault_cluster.url(database))
        try:
            for n in range(3):
                # The entry's row held by another transaction: the update waits inside its
                # statement, and its connection is killed there.
                holding = admin.transaction()
                await holding.start()
                await admin.execute(
                    "SELECT 1 FROM videogen_ledger_entries WHERE key = 'fox' FOR UPDATE"
                )
                updating = asyncio.ensure_future(ledger.update_metadata("fox", {f"step{n}": n}))
                with anyio.fail_after(30):
                    killed: list[Any] = []
                    while not killed:
                        killed = await admin.fetch(
                            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                            " WHERE datname = $1 AND wait_event_type = 'Lock'",
                            database,
                        )
                await holding.rollback()
                with anyio.fail_after(60):
                    await updating
        finally:
            await admin.close()
        entry = await ledger.get("fox")
    assert entry is not None
    assert entry.metadata == {"tenant": "acme", "step0": 0, "step1": 1, "step2": 2}
    assert entry.version == before.version + 3  # each update once
    assert service.posts == 1


def _changed_an_hour_ago() -> Plan[None]:
    yield q("UPDATE {E} SET updated_at = updated_at - 3600")


@pytest.mark.parametrize("fault", ["crash", "terminate"])
async def test_an_id_the_service_does_not_know_ends_unknown_through_a_fault(
    fault_cluster: Cluster, fault_url: str, fault: str
) -> None:
    # The watcher polled the id (404) and is about to write the entry unknown: the database
    # crashes there (restarted once the watcher meets the outage), or the write's connection
    # is killed. The one UPDATE is written whole once the database answers, never half.
    missing = "00000000-0000-4000-8000-000000000000"
    async with (
        SandboxServer(seed=23) as server,
        server.client() as client,
        Ledger.open(fault_url) as ledger,
    ):
        await ledger.record_project_tasks("p", "project-1", [missing])
        await ledger.store.write(_changed_an_hour_ago)
        write = ledger.store.write

        async def faulty(plan: Any, *args: Any) -> Any:
            if plan is claims.poll_failed:
                if fault == "crash":
                    await fault_cluster.crash()
                else:
                    await fault_cluster.terminate_backends(_database(fault_url))
            return await write(plan, *args)

        ledger.store.write = faulty  # type: ignore[method-assign]
        with LogEvent("retrying for up to") as retrying, anyio.fail_after(90):
            async with anyio.create_task_group() as group:

                async def restart_on_the_outage() -> None:
                    if fault == "crash":
                        await retrying.wait()
                        await fault_cluster.restart()

                group.start_soon(restart_on_the_outage)
                watch = ledger.watch(client, claim_interval=0.05, lease=60, stop_when_idle=True)
                async with watch as finished:
                    assert [entry async for entry in finished] == []
        entry = await ledger.get(f"p/{missing}")
    assert entry is not None
    assert (entry.state, entry.task_id) == ("unknown", missing)
    assert "NotFoundError" in (entry.error or "")
    assert server.stats().by_route.get("GET /v1/tasks", 0) == 1  # not polled again
