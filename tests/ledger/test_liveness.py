"""A creator's death is known at once: a resume never waits on a dead process's creates.

A process creates four keys against a service of the test's own that holds every POST, and is
killed with SIGKILL while the four are at the service. The process that resumes the key list
finds the four ``unknown`` at once (their creator held a lock that its death released:
PostgreSQL's advisory lock, SQLite's ``flock``), never waits out their 600 s lease, creates the
rest, and its watcher ends without waiting on them either.
"""

from __future__ import annotations

import asyncio
import sys

import anyio
import pytest

from videogen_async import AmbiguousCreateError, Ledger
from videogen_async._ledger._plans import get

from ._procs import Creator
from ._service import Service

pytestmark = [pytest.mark.slow]
if sys.platform == "win32":  # pragma: no cover
    pytestmark.append(pytest.mark.skip(reason="the processes are killed with SIGKILL"))


async def killed_mid_create(ledger_url: str, service: Service, *keys: str) -> None:
    """A creator process SIGKILLed while its creates of ``keys`` are all at ``service``."""
    creator = await Creator.start(ledger_url, service.base_url, "test-key", None, *keys)
    try:
        await creator.go()
        with anyio.fail_after(30):
            await service.wait_until(lambda: service.posts == len(keys))
    finally:
        await creator.kill()


async def test_a_resume_after_a_sigkill_does_not_wait_on_the_dead_creators_entries(
    ledger_url: str,
) -> None:
    release = asyncio.Event()

    async def hold(number: int) -> None:
        await release.wait()

    keys = [f"k{i}" for i in range(6)]
    async with Service(on_post=hold) as service:
        await killed_mid_create(ledger_url, service, *keys[:4])
        release.set()
        async with service.client() as client, Ledger.open(ledger_url) as ledger:
            states = []
            with anyio.fail_after(20):  # the dead creator's lease is 600 s
                for key in keys:
                    try:
                        entry = await ledger.create_task(client, f"clip {key}", key=key)
                    except AmbiguousCreateError as exc:
                        states.append((exc.entry.state, exc.entry.error))
                    else:
                        states.append((entry.state, entry.error))
                watch = ledger.watch(client, claim_interval=0.05, stop_when_idle=True)
                async with watch as finished:
                    done = sorted([entry.key async for entry in finished])
    assert [state for state, _ in states] == ["unknown"] * 4 + ["pending"] * 2
    assert all("stopped before an answer" in (error or "") for _, error in states[:4])
    assert service.posts == 6
    assert done == ["k4", "k5"]


async def test_a_running_watcher_tells_a_dead_creators_creates_unknown(ledger_url: str) -> None:
    release = asyncio.Event()

    async def hold(number: int) -> None:
        await release.wait()

    async with Service(on_post=hold) as service:
        async with service.client() as client, Ledger.open(ledger_url) as ledger:
            await killed_mid_create(ledger_url, service, "dead")
            release.set()
            # A watcher that does not stop when idle: it still settles the dead creator's key.
            async with (
                ledger.changes(keys=["dead"], states=["unknown"]) as told,
                ledger.watch(client, lease=0.3, claim_interval=0.05),
            ):
                with anyio.fail_after(30):  # the dead creator's create lease is 600 s
                    entry = await told.__anext__()
    assert entry.state == "unknown"
    assert "stopped before an answer" in (entry.error or "")


async def test_a_death_found_but_not_yet_settled_is_found_again(sqlite_url: str) -> None:
    # A process finds a creator dead, then fails (or is killed) before it settles the
    # creates: the next look must find the death again, not wait out the ten-minute lease.
    # SQLite's: a death is a lock file left unlocked, which finding it removed before the
    # fix; on PostgreSQL it is an advisory lock no longer held, which finding leaves as is.
    ledger_url = sqlite_url
    release = asyncio.Event()

    async def hold(number: int) -> None:
        await release.wait()

    async with Service(on_post=hold) as service:
        async with Ledger.open(ledger_url) as ledger:
            await killed_mid_create(ledger_url, service, "dead")
            release.set()
            store = ledger._creator.store
            owner = (await store.read(get, "dead"))["owner"]
            assert await store.engine.dead([owner]) == {owner}  # found, never settled
            assert await store.expire_creating() == 1  # found again, and settled
            assert (await ledger.get("dead")).state == "unknown"  # type: ignore[union-attr]
            await store.engine.forget([owner])
