"""Waits and changes across processes: pushed, nothing missed, nothing twice, in order.

A waiting process (``_waiter.py``, which has no client: it cannot send a request to the
service) hears of what the test's process records: each change of each entry once, in
commit order (its ``version``), and each wait's terminal entry. On PostgreSQL it keeps
hearing after its listening connection is killed (a change committed while it cannot come
back is read when it does) and after the database crashes and restarts.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import anyio
import pytest

from videogen_async import (
    AmbiguousCreateError,
    InvalidRequestError,
    Ledger,
    LedgerError,
    WaitTimeoutError,
)
from videogen_async._ledger._postgres import LISTENER_NAME
from videogen_async.testing import SandboxServer

from ._procs import Creator
from ._service import Service
from .conftest import Cluster

if sys.platform == "win32":  # pragma: no cover
    pytest.skip("the processes are stopped with signals", allow_module_level=True)

WAITER = Path(__file__).with_name("_waiter.py")
KEYS = [f"w{n}" for n in range(6)]
LATE = [f"late{n}" for n in range(3)]


def _said(lines: list[str], kind: str) -> list[tuple[str, str, int]]:
    found = [line.split() for line in lines if line.startswith(f"{kind} ")]
    return [(key, state, int(version)) for _, key, state, version in found]


async def _until(child: Creator, done: Callable[[list[str]], bool]) -> None:
    with anyio.move_on_after(60):
        while not done(child.lines):
            await child.expect(lambda line: True)
        return
    raise AssertionError("the waiter said:\n" + "\n".join(child.lines))


def _changes_of(lines: list[str], key: str) -> list[tuple[str, int]]:
    return [(state, version) for k, state, version in _said(lines, "change") if k == key]


async def _watch_until_idle(ledger: Ledger, client: object) -> None:
    with anyio.fail_after(60):
        async with ledger.watch(client, claim_interval=0.05, stop_when_idle=True) as finished:  # type: ignore[arg-type]
            async for _ in finished:
                pass


async def test_changes_and_results_of_one_process_reach_another(ledger_url: str) -> None:
    async with SandboxServer(manual_clock=True, seed=8) as server, server.client() as client:
        async with Ledger.open(ledger_url) as ledger:
            for key in KEYS:
                await ledger.create_task(client, f"clip {key}", key=key)
            waiter = await Creator.script(WAITER, ledger_url, *KEYS)
            for key in LATE:  # all of their changes come after the waiter listens
                await ledger.create_task(client, f"clip {key}", key=key, metadata={"n": 1})
            await ledger.update_metadata(LATE[0], {"n": 2})
            server.clock.advance(600)
            await _watch_until_idle(ledger, client)
            await _until(
                waiter,
                lambda lines: (
                    len(_said(lines, "done")) == len(KEYS)
                    and len(_said(lines, "change")) == len(KEYS) + 3 * len(LATE) + 1
                ),
            )
            await waiter.go()
            lines = await waiter.finish()
    assert sorted(_said(lines, "done")) == [(key, "succeeded", 2) for key in KEYS]
    for key in KEYS:  # created before: only their last change is heard of
        assert _changes_of(lines, key) == [("succeeded", 2)]
    assert _changes_of(lines, LATE[0]) == [
        ("creating", 0),
        ("pending", 1),
        ("pending", 2),  # its metadata
        ("succeeded", 3),
    ]
    for key in LATE[1:]:
        assert _changes_of(lines, key) == [("creating", 0), ("pending", 1), ("succeeded", 2)]


@pytest.mark.xdist_group("postgres-faults")
@pytest.mark.slow
async def test_waits_survive_a_killed_listener_and_a_database_restart(
    fault_cluster: Cluster, fault_url: str
) -> None:
    import asyncpg

    database = urlsplit(fault_url).path.lstrip("/")
    async with SandboxServer(manual_clock=True, seed=9) as server, server.client() as client:
        async with Ledger.open(fault_url) as ledger:
            for key in KEYS:
                await ledger.create_task(client, f"clip {key}", key=key)
            waiter = await Creator.script(WAITER, fault_url, *KEYS)
            admin = await asyncpg.connect(fault_cluster.url())
            try:
                # The listener is killed and cannot come back while a change is committed.
                await admin.execute(f'ALTER DATABASE "{database}" WITH ALLOW_CONNECTIONS false')
                killed = await admin.fetch(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE application_name = $1 AND datname = $2",
                    LISTENER_NAME,
                    database,
                )
                assert len(killed) == 1
                await ledger.update_metadata(KEYS[0], {"seen": "while the listener was away"})
                await admin.execute(f'ALTER DATABASE "{database}" WITH ALLOW_CONNECTIONS true')
            finally:
                await admin.close()
            await _until(waiter, lambda lines: bool(_changes_of(lines, KEYS[0])))
            # The database crashes; the videos finish meanwhile; it comes back.
            await fault_cluster.crash()
            server.clock.advance(600)
            await fault_cluster.restart()
            await _watch_until_idle(ledger, client)
            await _until(
                waiter,
                lambda lines: (
                    len(_said(lines, "done")) == len(KEYS)
                    and len(_said(lines, "change")) == len(KEYS) + 1
                ),
            )
            await waiter.go()
            lines = await waiter.finish()
    assert sorted(_said(lines, "done")) == sorted(
        (key, "succeeded", 3 if key == KEYS[0] else 2) for key in KEYS
    )
    assert _changes_of(lines, KEYS[0]) == [("pending", 2), ("succeeded", 3)]
    for key in KEYS[1:]:
        assert _changes_of(lines, key) == [("succeeded", 2)]


async def test_a_wait_in_the_same_process_is_woken_by_its_watcher(ledger_url: str) -> None:
    async with SandboxServer(manual_clock=True, seed=2) as server, server.client() as client:
        async with Ledger.open(ledger_url) as ledger:
            await ledger.create_task(client, "a kite", key="kite")
            async with anyio.create_task_group() as tg:
                results = []

                async def wait() -> None:
                    results.append(await ledger.wait("kite"))

                tg.start_soon(wait)
                await anyio.wait_all_tasks_blocked()  # the wait listens: it must be woken
                server.clock.advance(600)
                await _watch_until_idle(ledger, client)
            again = await ledger.wait("kite", timeout=5)  # terminal already: at once
    assert [(e.key, e.state) for e in results] == [("kite", "succeeded")]
    assert again == results[0]


async def test_a_wait_says_why_it_cannot_answer(ledger_url: str) -> None:
    async with Service(create_status=500) as service, service.client() as client:
        async with Ledger.open(ledger_url) as ledger:
            with pytest.raises(AmbiguousCreateError):
                await ledger.create_task(client, "a fox", key="unknown")
            with pytest.raises(AmbiguousCreateError, match="unknown"):
                await ledger.wait("unknown", timeout=10)
            service.create_status = 200
            pending = await ledger.create_task(client, "a kite", key="pending")
            with pytest.raises(WaitTimeoutError, match=r"not terminal after 0\.1 s") as caught:
                await ledger.wait("pending", timeout=0.1)
            assert caught.value.last == pending
            assert caught.value.pending == ("pending",)
            with pytest.raises(LedgerError, match="no such entry"):
                await ledger.wait("nobody", timeout=10)
            await ledger.create_project(
                client, "https://a.example/r.mp4", ["https://a.example/p.png"], key="ad"
            )
            with pytest.raises(LedgerError, match="never terminal"):
                await ledger.wait("ad", timeout=10)
            for bad in (-1, "soon", True, float("nan")):
                with pytest.raises(InvalidRequestError, match="timeout"):
                    await ledger.wait("pending", timeout=bad)  # type: ignore[arg-type]
            with pytest.raises(InvalidRequestError, match="'done'"):
                ledger.changes(states=["succeeded", "done"])
            with pytest.raises(InvalidRequestError, match="key"):
                ledger.changes(keys=[""])
