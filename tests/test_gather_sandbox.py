"""gather_until_done and the wait helpers against the sandbox, over real HTTP on loopback.

The clock is manual where a test needs tasks to stay pending, and otherwise runs 1000 times
faster than real time (a 25-35 s task takes 25-35 ms). No test sleeps to wait for a state: it
drives the clock, or polls with a deadline.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import anyio
import pytest

import videogen_async as vg
from videogen_async import AsyncVideoGen
from videogen_async._contract._exceptions import NotFoundError, TaskPollError, WaitTimeoutError
from videogen_async._contract._models import Task
from videogen_async._http._retry import BackoffPolicy
from videogen_async._waiting._gather import gather_until_done
from videogen_async._waiting._policy import PollPolicy
from videogen_async._waiting._polling import poll_until, source_of, wait_on_source
from videogen_async.testing import FaultRule, SandboxServer

FAST = PollPolicy(min_interval=0.005, max_interval=0.03, dense_interval=0.005, sparse_cap=0.03)
FAST_BACKOFF = BackoffPolicy(
    initial_delay=0.002,
    max_delay=0.01,
    rate_limit_pause=0.01,
    max_retry_after=1.0,
    rate_recovery=100.0,
)

TASKS_ROUTE = "GET /v1/tasks"


async def create(client: AsyncVideoGen, n: int) -> list[str]:
    return [(await client.tasks.create(f"clip {i}")).task_id for i in range(n)]


@pytest.fixture
async def fast_server() -> AsyncIterator[SandboxServer]:
    async with SandboxServer(
        time_scale=0.001, seed=3, task_duration=(25, 35), failure_rate=0.1, credits=1e9
    ) as server:
        yield server


@pytest.fixture
async def frozen_server() -> AsyncIterator[SandboxServer]:
    async with SandboxServer(manual_clock=True, seed=4, credits=1e9) as server:
        yield server


def gather_tasks() -> list[asyncio.Task[Any]]:
    """The gather's own tasks still running (the in-process sandbox has tasks of its own)."""
    return [
        t
        for t in asyncio.all_tasks()
        if not t.done() and "_Coordinator" in getattr(t.get_coro(), "__qualname__", "")
    ]


async def drained(server: SandboxServer) -> None:
    with anyio.fail_after(5):
        await server.wait_until(lambda: server.stats().in_flight == 0)


async def test_every_task_once_with_bounded_concurrency(fast_server: SandboxServer) -> None:
    fast_server.faults.set(TASKS_ROUTE, latency=0.003)
    async with fast_server.client(backoff=FAST_BACKOFF) as client:
        names = await create(client, 40)
        fast_server.reset_stats()
        async with gather_until_done(
            client, [*names, *names[:5]], max_concurrency=4, poll_policy=FAST
        ) as results:
            got = [t async for t in results]
    assert sorted(t.task_id for t in got) == sorted(names)  # type: ignore[union-attr]
    assert all(isinstance(t, Task) and t.is_terminal for t in got)
    truth = {n: fast_server.describe_task(n)["status"] for n in names}
    assert {t.task_id: t.status for t in got} == truth  # type: ignore[union-attr]
    assert "failed" in truth.values()  # failed tasks are results
    stats = fast_server.stats()
    assert stats.peak_in_flight_by_route[TASKS_ROUTE] == 4
    assert stats.by_route[TASKS_ROUTE] == results.progress.requests


async def test_breaking_out_leaves_no_request_or_connection(frozen_server: SandboxServer) -> None:
    frozen_server.faults.set(TASKS_ROUTE, latency=0.05)
    connector = aiohttp.TCPConnector(limit=100)
    async with aiohttp.ClientSession(connector=connector) as session:
        client = frozen_server.client(backoff=FAST_BACKOFF, session=session)
        names = await create(client, 20)
        frozen_server.schedule_task(names[7], finish_in=0)
        async with gather_until_done(client, names, max_concurrency=8, poll_policy=FAST) as res:
            async for task in res:
                assert task.task_id == names[7]  # type: ignore[union-attr]
                with anyio.fail_after(5):  # wait until polls are in flight, then leave
                    await frozen_server.wait_until(lambda: frozen_server.stats().in_flight >= 8)
                break
        assert len(connector._acquired) == 0  # no connection is held
        assert gather_tasks() == []
        await drained(frozen_server)


async def test_plain_iteration_closed_leaves_no_connection(frozen_server: SandboxServer) -> None:
    frozen_server.faults.set(TASKS_ROUTE, latency=0.05)
    connector = aiohttp.TCPConnector(limit=100)
    async with aiohttp.ClientSession(connector=connector) as session:
        client = frozen_server.client(backoff=FAST_BACKOFF, session=session)
        names = await create(client, 10)
        frozen_server.schedule_task(names[0], finish_in=0)
        results = gather_until_done(client, names, poll_policy=FAST)
        async for _task in results:
            break
        assert gather_tasks()  # still polling until closed
        await results.aclose()
        assert gather_tasks() == []
        assert len(connector._acquired) == 0
        await drained(frozen_server)


async def test_sandbox_429_pauses_then_recovers(fast_server: SandboxServer) -> None:
    # Seen from the client: when each poll was sent (the "request" event comes once the
    # client's pacing let the attempt go) and when the 429 was read. Polls sent before the 429
    # was read may land after it on the server; none may be *sent* in the pause.
    sent: list[float] = []
    limited_at: list[float] = []

    def on_request(event: vg.RequestEvent) -> None:
        if event.path == "/v1/tasks":
            sent.append(time.monotonic())

    def on_response(event: vg.ResponseEvent) -> None:
        if event.status_code == 429:
            limited_at.append(time.monotonic())

    hooks = {"request": [on_request], "response": [on_response]}
    async with fast_server.client(backoff=FAST_BACKOFF, event_hooks=hooks) as client:
        names = await create(client, 20)
        fast_server.faults.add(
            FaultRule(route=TASKS_ROUTE, rate_limit_rate=1.0, retry_after=0.2, times=1)
        )
        async with gather_until_done(client, names, poll_policy=FAST) as results:
            got = [t async for t in results]
    assert len(got) == 20
    assert results.progress.rate_limited == 1
    assert len(limited_at) == 1
    pause_start = limited_at[0]
    in_pause = [s for s in sent if pause_start <= s < pause_start + 0.2]
    assert in_pause == []
    assert any(s >= pause_start + 0.2 for s in sent)  # and polling resumed


async def test_sandbox_transient_faults_never_end_the_batch(fast_server: SandboxServer) -> None:
    async with fast_server.client(backoff=FAST_BACKOFF) as client:
        names = await create(client, 25)
        fast_server.faults.set(
            TASKS_ROUTE, error_rate=0.2, html_rate=0.1, drop_before_rate=0.05, retry_after=None
        )
        async with gather_until_done(client, names, poll_policy=FAST) as results:
            got = [t async for t in results]
    assert all(isinstance(t, Task) for t in got)
    assert len(got) == 25
    assert results.progress.transient_errors > 0
    assert results.progress.errors == 0


async def test_sandbox_unknown_id(fast_server: SandboxServer) -> None:
    async with fast_server.client(backoff=FAST_BACKOFF) as client:
        names = await create(client, 3)
        with pytest.raises(NotFoundError):
            async for _ in gather_until_done(client, [*names, "nope"], poll_policy=FAST):
                pass
        got = [
            t
            async for t in gather_until_done(
                client, [*names, "nope"], poll_policy=FAST, return_exceptions=True
            )
        ]
    errors = [e for e in got if isinstance(e, TaskPollError)]
    assert [e.task_id for e in errors] == ["nope"]
    assert isinstance(errors[0].__cause__, NotFoundError)


async def test_sandbox_timeout_names_the_pending_ids(frozen_server: SandboxServer) -> None:
    async with frozen_server.client(backoff=FAST_BACKOFF) as client:
        names = await create(client, 4)
        frozen_server.schedule_task(names[2], finish_in=0)
        got: list[Any] = []

        async def consume() -> None:
            async for task in gather_until_done(client, names, timeout=0.2, poll_policy=FAST):
                got.append(task)

        with pytest.raises(WaitTimeoutError) as caught:
            await consume()
    assert [t.task_id for t in got] == [names[2]]
    assert caught.value.pending == (names[0], names[1], names[3])
    await drained(frozen_server)


async def test_the_clock_moving_forward_finishes_the_gather(frozen_server: SandboxServer) -> None:
    async with frozen_server.client(backoff=FAST_BACKOFF) as client:
        names = await create(client, 10)
        async with gather_until_done(client, names, poll_policy=FAST) as results:
            frozen_server.clock.advance(3600)
            got = [t async for t in results]
    assert len(got) == 10


async def wait_for_task(client: AsyncVideoGen, task_id: str, **options: Any) -> Task:
    return await wait_on_source(source_of(client), task_id, **options)


async def test_wait_for_task_over_http(frozen_server: SandboxServer) -> None:
    async with frozen_server.client(backoff=FAST_BACKOFF) as client:
        (name,) = await create(client, 1)
        with pytest.raises(WaitTimeoutError) as caught:
            await wait_for_task(
                client, name, timeout=0.05, raise_on_failure=False, poll_policy=FAST
            )
        assert isinstance(caught.value.last, Task)
        assert caught.value.last.status == "running"
        frozen_server.schedule_task(name, finish_in=0)
        task = await wait_for_task(client, name, timeout=5, raise_on_failure=True, poll_policy=FAST)
        assert task.is_succeeded
        with pytest.raises(NotFoundError):
            await wait_for_task(client, "nope", timeout=5, raise_on_failure=False, poll_policy=FAST)


async def test_poll_until_over_http(frozen_server: SandboxServer) -> None:
    async with frozen_server.client(backoff=FAST_BACKOFF) as client:
        (name,) = await create(client, 1)
        frozen_server.schedule_task(name, finish_in=0, outcome="failed")
        task = await poll_until(
            lambda: client.tasks.get(name),
            lambda t: t.is_terminal,
            timeout=5,
            poll_policy=FAST,
            what=name,
            backoff=client.backoff,
        )
    assert task.status == "failed"
