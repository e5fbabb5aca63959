"""A SQLite ledger on a file system that fills up (a small tmpfs), or a file turned read-only.

Mounting a tmpfs and making a file immutable (``chattr +i``) need root; elsewhere these
tests are skipped with the reason. The service of the test's own fills the disk from inside its POST
handler, while the create is at it; its counts are the truth of what was sent.
"""

from __future__ import annotations

import asyncio
import functools
import sys
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

from videogen_async import Ledger, LedgerError
from videogen_async._ledger._schema import Plan, q
from videogen_async._ledger._sqlite import SQLiteEngine

from .._disk import fill as fill_disk
from ._service import LogEvent, Service

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="tmpfs and chattr are Linux's")


async def test_a_full_disk_during_a_post_keeps_the_id_and_writes_it_back(small_fs: Path) -> None:
    filler = small_fs / "filler"

    async def fill(number: int) -> None:
        await anyio.to_thread.run_sync(fill_disk, filler)

    async with (
        Service(on_post=fill) as service,
        service.client() as client,
        Ledger.open(small_fs / "ledger.db") as ledger,
    ):
        with LogEvent("not recorded yet") as kept, anyio.fail_after(60):
            creating = asyncio.ensure_future(ledger.create_task(client, "a fox", key="fox"))
            await kept.wait()
            filler.unlink()  # room again
            entry = await creating
        assert (entry.state, entry.task_id) == ("pending", service.ids[0])
        assert await ledger.get("fox") == entry
    assert service.posts == 1


async def test_a_full_disk_before_a_create_is_a_ledger_error_and_nothing_is_sent(
    small_fs: Path,
) -> None:
    async with (
        Service() as service,
        service.client() as client,
        Ledger.open(small_fs / "ledger.db", outage_timeout=0.3) as ledger,
    ):
        await anyio.to_thread.run_sync(fill_disk, small_fs / "filler")
        with pytest.raises(LedgerError, match="full") as caught:
            await ledger.create_task(client, "a fox", key="fox")
        assert type(caught.value) is LedgerError
        assert service.posts == 0
        (small_fs / "filler").unlink()
        entry = await ledger.create_task(client, "a fox", key="fox")
        assert (entry.state, entry.task_id) == ("pending", service.ids[0])
    assert service.posts == 1


async def test_a_ledger_file_turned_read_only_is_a_ledger_error_and_nothing_is_sent(
    tmp_path: Path,
) -> None:
    path = tmp_path / "ledger.db"
    async with (
        Service() as service,
        service.client() as client,
        Ledger.open(path, outage_timeout=0.3) as ledger,
    ):
        await ledger.create_task(client, "a fox", key="fox")
        files = [str(path), f"{path}-wal"]
        frozen = await anyio.run_process(["chattr", "+i", *files], check=False)
        if frozen.returncode:
            pytest.skip(f"cannot make a file immutable here: {frozen.stderr.decode().strip()}")
        try:
            with pytest.raises(LedgerError) as caught:
                await ledger.create_task(client, "a hare", key="hare")
        finally:
            await anyio.run_process(["chattr", "-i", *files])
        assert type(caught.value) is LedgerError
    assert service.posts == 1


async def test_sqlite_close_waits_for_the_plan_running_in_its_thread(tmp_path: Path) -> None:
    # A close while a plan runs in the worker thread (a watcher's last write as its ledger
    # closes) must not close the connection under that statement: it waits for the plan.
    engine = SQLiteEngine(str(tmp_path / "close.db"))
    await engine.open()
    started, release = threading.Event(), threading.Event()

    def plan() -> Plan[list[dict[str, Any]]]:
        started.set()
        release.wait(30)
        rows: list[dict[str, Any]] = yield q("SELECT 1 AS one")
        return rows

    found: list[list[dict[str, Any]]] = []

    async def run() -> None:
        found.append(await engine.run(plan(), write=True))

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await anyio.to_thread.run_sync(started.wait)
        tg.start_soon(engine.close)
        await anyio.wait_all_tasks_blocked()  # the close waits for the worker thread
        release.set()
    assert found == [[{"one": 1}]]


async def test_a_caller_cancelled_while_queued_never_stalls_the_ledger(tmp_path: Path) -> None:
    # Callers queue for the ledger's one SQLite thread. One that stops waiting (a wait's
    # timeout, a cancelled request) must neither run later nor keep the others out.
    engine = SQLiteEngine(str(tmp_path / "queue.db"))
    await engine.open()
    started, release = threading.Event(), threading.Event()
    ran: list[str] = []

    def plan(name: str, block: bool = False) -> Plan[list[dict[str, Any]]]:
        ran.append(name)
        if block:
            started.set()
            release.wait(30)
        rows: list[dict[str, Any]] = yield q("SELECT 1 AS one")
        return rows

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(functools.partial(engine.run, plan("first", block=True), write=False))
            await anyio.to_thread.run_sync(started.wait)
            queued = anyio.CancelScope()
            tg.start_soon(_cancelled, engine, plan("queued"), queued)
            await anyio.wait_all_tasks_blocked()
            queued.cancel()
            await anyio.wait_all_tasks_blocked()  # the queued caller has stopped waiting
            release.set()
        with anyio.fail_after(10):
            assert await engine.run(plan("next"), write=True) == [{"one": 1}]
    finally:
        release.set()
        await engine.close()
    assert ran == ["first", "next"]


async def _cancelled(engine: SQLiteEngine, plan: Plan[Any], scope: anyio.CancelScope) -> None:
    with scope:
        await engine.run(plan, write=False)
