"""The ledger on PostgreSQL under faults: a crash, a restart, killed connections, mid-request.

Each test has a cluster of the module's own (``fault_cluster``) that it crashes
(``pg_ctl stop -m immediate``), restarts, or whose connections it kills
(``pg_terminate_backend``), from inside the POST handler of a service of its own while a
create is at it. The service's counts are the truth: what was sent, and which ids it handed
out. A charged id is never lost, a watcher never dies of a fault the database recovers from,
and what does not recover is a ``LedgerError``.
"""

from __future__ import annotations

import asyncio
import sys
from urllib.parse import urlsplit

import anyio
import pytest

from videogen_async import AmbiguousCreateError, Ledger, LedgerEntry, LedgerError

from ._procs import Creator
from ._service import LogEvent, Service
from .conftest import Cluster

pytestmark = [pytest.mark.xdist_group("postgres-faults"), pytest.mark.slow]
if sys.platform == "win32":  # pragma: no cover
    pytestmark.append(pytest.mark.skip(reason="the processes are killed with SIGKILL"))


def _database(url: str) -> str:
    return urlsplit(url).path.lstrip("/")


async def test_killed_connections_during_posts_lose_no_id(
    fault_cluster: Cluster, fault_url: str
) -> None:
    async def kill(number: int) -> None:
        await fault_cluster.terminate_backends(_database(fault_url))

    async with Service(on_post=kill) as service, service.client() as client:
        async with Ledger.open(fault_url) as ledger:
            with anyio.fail_after(60):
                created = await asyncio.gather(
                    *(ledger.create_task(client, f"clip {i}", key=f"k{i:02d}") for i in range(12))
                )
        assert service.posts == 12
        assert sorted(entry.task_id for entry in created) == sorted(service.ids)
        assert all(entry.state == "pending" for entry in created)
        async with Ledger.open(fault_url) as again:
            stored = {entry.key: entry async for entry in again.entries()}
    assert {key: entry.task_id for key, entry in stored.items()} == {
        entry.key: entry.task_id for entry in created
    }
    assert {entry.state for entry in stored.values()} == {"pending"}


async def test_a_database_crash_during_a_post_is_waited_out(
    fault_cluster: Cluster, fault_url: str
) -> None:
    async def crash(number: int) -> None:
        await fault_cluster.crash()

    async with (
        Service(on_post=crash) as service,
        service.client() as client,
        Ledger.open(fault_url) as ledger,
    ):
        with LogEvent("not recorded yet") as kept, anyio.fail_after(60):
            creating = asyncio.ensure_future(ledger.create_task(client, "a fox", key="fox"))
            await kept.wait()  # the answer is safe: the database may come back
            await fault_cluster.restart()
            entry = await creating
        assert entry.state == "pending"
        assert entry.task_id == service.ids[0]
        assert [e.task_id async for e in ledger.entries()] == service.ids
    assert service.posts == 1


async def test_a_create_that_failed_during_an_outage_is_recorded_when_the_database_returns(
    fault_cluster: Cluster, fault_url: str
) -> None:
    async def crash(number: int) -> None:
        await fault_cluster.crash()

    async with (
        Service(on_post=crash, create_status=500) as service,  # may have taken effect
        service.client() as client,
        Ledger.open(fault_url) as ledger,
    ):
        with LogEvent("not recorded yet") as kept, anyio.fail_after(60):
            creating = asyncio.ensure_future(ledger.create_task(client, "a fox", key="fox"))
            await kept.wait()
            await fault_cluster.restart()
            with pytest.raises(AmbiguousCreateError):
                await creating
            with pytest.raises(AmbiguousCreateError):  # never sent again, never waited on
                await ledger.create_task(client, "a fox", key="fox")
        entry = await ledger.get("fox")
    assert entry is not None
    assert entry.state == "unknown"
    assert service.posts == 1


async def test_an_answer_kept_during_an_outage_survives_a_sigkill_and_is_written_back(
    fault_cluster: Cluster, fault_url: str
) -> None:
    async def crash(number: int) -> None:
        await fault_cluster.crash()

    async with Service(on_post=crash) as service:
        creator = await Creator.start(fault_url, service.base_url, "test-key", None, "fox")
        try:
            with anyio.fail_after(60):
                await creator.go()
                # The process kept the answer (the database is down), then dies.
                await creator.expect(lambda line: "not recorded yet" in line)
        finally:
            await creator.kill()
        await fault_cluster.restart()
        async with service.client() as client, Ledger.open(fault_url) as ledger:
            with anyio.fail_after(20):  # never the 600 s lease of the dead creator's entry
                entry = await ledger.get("fox")
                again = await ledger.create_task(client, "clip fox", key="fox", duration=4)
                async with ledger.watch(client, claim_interval=0.05, stop_when_idle=True) as done:
                    finished = [e async for e in done]
    assert entry is not None
    assert (entry.state, entry.task_id) == ("pending", service.ids[0])
    assert again.task_id == service.ids[0]
    assert [(e.key, e.state) for e in finished] == [("fox", "succeeded")]
    assert service.posts == 1


async def test_watchers_survive_a_crash_and_killed_connections(
    fault_cluster: Cluster, fault_url: str
) -> None:
    async with (
        Service(polls_to_finish=3) as service,
        service.client() as client,
        Ledger.open(fault_url) as ledger,
    ):
        for i in range(10):
            await ledger.create_task(client, f"clip {i}", key=f"k{i}")
        seen: list[LedgerEntry] = []
        with LogEvent("retrying for up to") as retrying, anyio.fail_after(90):
            watch = ledger.watch(client, claim_interval=0.05, lease=5, stop_when_idle=True)
            async with watch as finished:
                async for entry in finished:
                    seen.append(entry)
                    if len(seen) == 2:
                        await fault_cluster.crash()
                        await retrying.wait()  # the watcher met the outage
                        await fault_cluster.restart()
                    elif len(seen) in (4, 6):
                        await fault_cluster.terminate_backends(_database(fault_url))
        assert sorted(entry.key for entry in seen) == [f"k{i}" for i in range(10)]
        assert {entry.state async for entry in ledger.entries()} == {"succeeded"}


async def test_a_watcher_gives_up_with_a_ledger_error_when_the_database_stays_away(
    fault_cluster: Cluster, fault_url: str
) -> None:
    async with (
        Service(polls_to_finish=1000) as service,
        service.client() as client,
        Ledger.open(fault_url, outage_timeout=0.5) as ledger,
    ):
        await ledger.create_task(client, "clip", key="k")

        async def watch() -> None:
            async with ledger.watch(client, claim_interval=0.05) as finished:
                await fault_cluster.crash()
                async for _entry in finished:
                    pass  # pragma: no cover - nothing finishes

        with anyio.fail_after(60), pytest.raises(LedgerError, match=r"did not answer for 0\.5 s"):
            await watch()


@pytest.mark.parametrize("call", ["create_task", "get", "entries", "summary"])
async def test_a_database_that_is_down_is_a_ledger_error_and_nothing_is_sent(
    fault_cluster: Cluster, fault_url: str, call: str
) -> None:
    async with Service() as service, service.client() as client:
        async with Ledger.open(fault_url, outage_timeout=0.3) as ledger:
            calls = {
                "create_task": lambda: ledger.create_task(client, "clip", key="k"),
                "get": lambda: ledger.get("k"),
                "entries": lambda: anext(aiter(ledger.entries())),
                "summary": ledger.summary,
            }
            await fault_cluster.crash()
            with pytest.raises(LedgerError, match="did not answer") as caught:
                await calls[call]()
        assert type(caught.value) is LedgerError
    assert service.posts == 0
