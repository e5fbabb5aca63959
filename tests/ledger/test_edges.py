"""Edges of the ledger: watch arguments, ids that cannot be polled, dead creators, paging."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from videogen_async import AmbiguousCreateError, BackoffPolicy, InvalidRequestError, Ledger
from videogen_async._ledger import _claims as claims
from videogen_async._ledger._plans import Hold, NewEntry, begin_create, get
from videogen_async._ledger._schema import Plan, q
from videogen_async.testing import SandboxServer


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"lease": 0}, "lease: must be a number > 0"),
        ({"lease": float("inf")}, "lease: must be a number > 0"),
        ({"claim_interval": 0}, "claim_interval: must be a number > 0"),
        ({"claim_size": 0}, "claim_size: must be a whole number >= 1"),
        ({"claim_size": True}, "claim_size: must be a whole number >= 1"),
        ({"claim_size": 2.5}, "claim_size: must be a whole number >= 1"),
    ],
)
async def test_watch_refuses_bad_arguments_naming_them(
    sqlite_url: str, options: dict[str, object], message: str
) -> None:
    async with (
        SandboxServer() as server,
        server.client() as client,
        Ledger.open(sqlite_url) as ledger,
    ):
        with pytest.raises(InvalidRequestError, match=message):
            ledger.watch(client, **options)  # type: ignore[arg-type]


async def test_an_id_that_cannot_be_polled_is_released_with_its_error(ledger_url: str) -> None:
    async with (
        SandboxServer(time_scale=0.01, seed=21) as server,
        server.client() as client,
        Ledger.open(ledger_url) as ledger,
    ):
        good = (await client.tasks.create("a clip")).task_id
        server.schedule_task(good, finish_in=1)
        missing = "00000000-0000-4000-8000-000000000000"  # the service answers 404
        await ledger.record_project_tasks("p", "project-1", [good, missing])
        released = anyio.Event()
        write = ledger.store.write

        async def recording(plan: Any, *args: Any) -> Any:
            done = await write(plan, *args)
            if plan is claims.poll_failed:
                released.set()
            return done

        ledger.store.write = recording  # type: ignore[method-assign]
        giving_up = client.with_options(backoff=BackoffPolicy(max_consecutive_failures=1))
        watch = ledger.watch(giving_up, claim_interval=0.05, max_concurrency=2, lease=60)
        async with watch as finished:
            entry = await finished.__anext__()
            assert entry.task_id == good
            with anyio.fail_after(10):
                await released.wait()
            row = await ledger.store.read(get, f"p/{missing}")
        assert row is not None
        # Released with its error, and not claimed again before the retry time (the lease).
        assert row["owner"] is None
        assert row["state"] == "pending"
        assert "404" in row["error"] or "not" in row["error"].lower()
        assert await ledger.store.write(claims.claim, "another", 60.0, 10) == []


def _changed_an_hour_ago() -> Plan[None]:
    yield q("UPDATE {E} SET updated_at = updated_at - 3600")


async def test_an_id_the_service_does_not_know_ends_unknown_a_lease_after_its_entry_changed(
    ledger_url: str,
) -> None:
    # An id the service answers 404 for, its entry unchanged for a lease: marked unknown with
    # its id, cost and the service's answer, so that a watcher waiting for the ledger to be
    # idle (a batch) ends instead of polling it again every lease, for ever.
    async with (
        SandboxServer(seed=22) as server,
        server.client() as client,
        Ledger.open(ledger_url) as ledger,
    ):
        missing = "00000000-0000-4000-8000-000000000000"
        await ledger.record_project_tasks("p", "project-1", [missing])
        await ledger.store.write(_changed_an_hour_ago)
        with anyio.fail_after(30):
            watch = ledger.watch(client, claim_interval=0.05, lease=60, stop_when_idle=True)
            async with watch as finished:
                assert [entry async for entry in finished] == []
        key = f"p/{missing}"
        async with ledger.changes(keys=[key], states=["unknown"], after=0) as told:
            with anyio.fail_after(30):
                entry = await told.__anext__()  # the change is in the ledger's log
        stored = await ledger.get(key)
    assert stored is not None
    for seen in (entry, stored):
        assert (seen.state, seen.task_id) == ("unknown", missing)
        assert "NotFoundError" in (seen.error or "")
    assert server.stats().by_route.get("GET /v1/tasks", 0) == 1  # and it is not polled again


async def test_a_creator_that_died_mid_create_leaves_its_key_unknown(ledger_url: str) -> None:
    async with (
        SandboxServer() as server,
        server.client() as client,
        Ledger.open(ledger_url) as ledger,
    ):
        new = NewEntry(key="k1", kind="task", request='{"prompt": "x"}', model=None, duration=5)
        started = await ledger.store.write(begin_create, new, Hold("dead", 0.0, None, None))
        assert started.outcome == "new"
        # The same key again: its creator's lease is out, so the entry becomes unknown and
        # the create is never sent again silently.
        with pytest.raises(AmbiguousCreateError):
            await ledger.create_task(client, "x", key="k1")
        entry = await ledger.get("k1")
        assert entry is not None
        assert entry.state == "unknown"
        assert server.stats().by_route.get("POST /v1/video/videomodel-2", 0) == 0


async def test_entries_are_read_a_page_at_a_time_in_key_order(ledger_url: str) -> None:
    async with Ledger.open(ledger_url) as ledger:
        await ledger.record_project_tasks("p", "project-1", [f"id-{i}" for i in range(5)])
        keys = [entry.key async for entry in ledger.entries(page_size=2)]
        assert keys == sorted(f"p/id-{i}" for i in range(5))
