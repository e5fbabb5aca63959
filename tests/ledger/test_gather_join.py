"""The open-ended gather a watcher polls through: ids join it, leave it and join it again."""

from __future__ import annotations

import collections
from urllib.parse import parse_qs

import anyio
import pytest

from videogen_async import InvalidRequestError, Task, gather_until_done
from videogen_async.testing import SandboxServer

GET = "GET /v1/tasks"


def _polls(server: SandboxServer) -> collections.Counter[str]:
    return collections.Counter(
        parse_qs(record.query)["task_id"][0] for record in server.request_log if record.route == GET
    )


async def _bulk(server: SandboxServer, count: int, finish_in: float) -> list[str]:
    async with server.client() as client:
        ids = []
        for i in range(count):
            ids.append((await client.tasks.create(f"clip {i}")).task_id)
    for task_id in ids:
        server.schedule_task(task_id, finish_in=finish_in)
    return ids


async def test_ids_join_a_running_gather_and_it_ends_only_after_end_input() -> None:
    async with SandboxServer(time_scale=0.01, seed=11) as server, server.client() as client:
        first = await _bulk(server, 4, 5)
        later = await _bulk(server, 4, 5)
        seen: list[str] = []
        async with gather_until_done(client, first, open_ended=True) as results:
            async for task in results:
                assert isinstance(task, Task)
                seen.append(task.task_id)
                if len(seen) == 4:  # every first id is done: the gather still runs
                    assert results.progress.pending == 0
                    assert results.add([*later, later[0]]) == 4
                    assert results.add(later) == 0  # pending: not added twice
                    assert results.add([first[0]]) == 1  # finished: joins again
                if len(seen) == 9:
                    results.end_input()
        assert sorted(seen) == sorted([*first, *later, first[0]])
        assert results.progress.total == 9


async def test_a_discarded_id_is_neither_polled_again_nor_yielded_and_may_join_again() -> None:
    async with SandboxServer(time_scale=0.01, seed=12) as server, server.client() as client:
        ids = await _bulk(server, 6, 40)
        gone, kept = ids[:3], ids[3:]
        seen: list[str] = []
        async with gather_until_done(client, ids, open_ended=True) as results:
            with anyio.fail_after(10):
                await server.wait_until(lambda: all(_polls(server)[i] > 0 for i in ids))
            assert results.discard([*gone, "not-an-id-of-it"]) == gone
            assert results.discard(gone) == []
            server.reset_stats()
            assert results.add([gone[0]]) == 1  # back again, polled as a new id
            results.end_input()
            async for task in results:
                seen.append(task.task_id)
        assert sorted(seen) == sorted([*kept, gone[0]])
        polls = _polls(server)
        assert all(polls[i] == 0 for i in gone[1:]), polls
        assert polls[gone[0]] > 0


async def test_ids_added_before_the_gather_starts_are_scheduled_with_the_others() -> None:
    async with SandboxServer(time_scale=0.01, seed=13) as server, server.client() as client:
        ids = await _bulk(server, 5, 3)
        results = gather_until_done(client, ids[:2])
        assert results.add(ids[2:]) == 3
        async with results:
            seen = sorted([task.task_id async for task in results])  # type: ignore[union-attr]
        assert seen == sorted(ids)


async def test_add_checks_its_ids() -> None:
    async with SandboxServer(time_scale=0.01, seed=14) as server, server.client() as client:
        results = gather_until_done(client, [], open_ended=True)
        with pytest.raises(InvalidRequestError, match="single string"):
            results.add("abc")
        with pytest.raises(InvalidRequestError, match="task_id: must be a non-empty string"):
            results.add([1])  # type: ignore[list-item]
        results.end_input()
        async with results:
            assert [x async for x in results] == []


async def test_a_long_lived_gather_keeps_only_the_ids_it_still_polls() -> None:
    async with SandboxServer(time_scale=0.01, seed=13) as server, server.client() as client:
        rounds = [await _bulk(server, 5, 5) for _ in range(3)]
        seen: list[str] = []
        async with gather_until_done(client, rounds[0], open_ended=True) as results:
            async for task in results:
                seen.append(task.task_id)
                done = len(seen)
                if done % 5 == 0 and done // 5 < len(rounds):
                    results.add(rounds[done // 5])
                    # The finished ids are forgotten: neither the gather nor their class holds
                    # them once new ids joined (a watcher's gather runs for days).
                    core = results._core
                    assert set(core.known) == set(rounds[done // 5])
                    classes = core.schedule.classes.values()
                    assert sum(len(klass.states) for klass in classes) == 5
                if done == 15:
                    results.end_input()
        assert sorted(seen) == sorted(i for ids in rounds for i in ids)
