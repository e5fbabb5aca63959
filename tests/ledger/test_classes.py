"""Finish times learned per class (model, duration) are kept in the ledger across runs."""

from __future__ import annotations

from videogen_async import AsyncVideoGen, FinishTimeStats, Ledger
from videogen_async._ledger._claims import load_classes
from videogen_async._ledger._cohorts import LedgerFinishTimes, class_text, merge_stats
from videogen_async.testing import SandboxServer

GET = "GET /v1/tasks"


def _client(server: SandboxServer, name: str) -> AsyncVideoGen:
    return AsyncVideoGen(
        api_key=server.api_key, base_url=server.base_url, default_headers={"User-Agent": name}
    )


async def _batch(server: SandboxServer, url: str, name: str, count: int) -> float:
    """Create ``count`` tasks, watch them with a fresh client; status queries per task."""
    async with server.client() as creator, Ledger.open(url) as ledger:
        for i in range(count):
            await ledger.create_task(creator, f"{name} {i}", key=f"{name}-{i}", duration=5)
    before = len([r for r in server.request_log if r.route == GET])
    async with _client(server, name) as client, Ledger.open(url) as ledger:
        async with ledger.watch(client, claim_interval=0.05, stop_when_idle=True) as finished:
            keys = [entry.key async for entry in finished]
    assert len(keys) == count
    polls = len([r for r in server.request_log if r.route == GET]) - before
    return polls / count


async def test_a_second_batch_of_a_known_kind_starts_from_the_remembered_class(
    ledger_url: str,
) -> None:
    async with SandboxServer(time_scale=0.2, seed=11, task_duration=30.0) as server:
        first = await _batch(server, ledger_url, "first", 30)
        async with Ledger.open(ledger_url) as ledger:
            remembered = await ledger.store.read(load_classes)
        assert "videomodel_2_0/5" in remembered
        second = await _batch(server, ledger_url, "second", 30)
    # The first batch probed for the finish time; the second (a new process's client, which
    # remembers nothing itself) polls near the remembered finish.
    assert second < first, (first, second)


async def test_concurrent_updates_of_a_class_are_merged_not_lost(ledger_url: str) -> None:
    async with Ledger.open(ledger_url) as one, Ledger.open(ledger_url) as two:
        a, b = LedgerFinishTimes(one.store), LedgerFinishTimes(two.store)
        await a.refresh()
        await b.refresh()
        a.update(("m", 5), FinishTimeStats(bins=((100, 1.0),), count=10))
        b.update(("m", 5), FinishTimeStats(bins=((200, 1.0),), count=30))
        await a.flush()
        await b.flush()  # a version conflict: merged with a's
        fresh = LedgerFinishTimes(one.store)
        await fresh.refresh()
        merged = fresh.load(("m", 5))
        assert merged is not None
        assert merged.count == 40
        weights = dict(merged.bins)
        assert weights[100] > 0
        assert weights[200] > weights[100]


async def test_a_watchers_later_observations_are_saved_beside_a_class_known_well(
    ledger_url: str,
) -> None:
    # The ledger knows the class from 1,000 finishes; a gather's snapshot counts its own
    # observations and a bounded share of that prior (16 by default): each flush adds what
    # the gather saw since the last one, not nothing because the ledger's total is larger.
    key = ("m", 5)
    async with Ledger.open(ledger_url) as ledger:
        known = LedgerFinishTimes(ledger.store)
        known.update(key, FinishTimeStats(bins=((100, 1.0),), count=1000))
        await known.flush()
        memory = LedgerFinishTimes(ledger.store)
        await memory.refresh()
        memory.update(key, FinishTimeStats(bins=((100, 0.8), (200, 0.2)), count=20))
        await memory.flush()
        memory.update(key, FinishTimeStats(bins=((100, 0.5), (200, 0.5)), count=30))
        await memory.flush()
        fresh = LedgerFinishTimes(ledger.store)
        await fresh.refresh()
    saved = fresh.load(key)
    assert saved is not None
    assert saved.count == 1000 + 20 + 10
    assert dict(saved.bins)[200] > 0


def test_class_keys_and_merge_rules() -> None:
    assert class_text(None) is None
    assert class_text(("m", 5)) == "m/5"
    assert class_text("k") == "k"
    theirs = FinishTimeStats(bins=((1, 1.0),), count=5)
    assert merge_stats(theirs, theirs, theirs) is theirs
