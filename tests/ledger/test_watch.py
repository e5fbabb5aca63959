"""Watchers in one process: every terminal entry recorded and yielded; shared work and pacing."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import gc
import itertools
import time
import warnings
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs

import anyio
import pytest

from videogen_async import (
    AsyncVideoGen,
    Ledger,
    LedgerEntry,
    RequestEvent,
    ResponseEvent,
    Task,
    TaskStatus,
)
from videogen_async._ledger._claims import pause_remaining
from videogen_async.testing import FaultRule, SandboxServer

GET = "GET /v1/tasks"


def _client(server: SandboxServer, name: str) -> AsyncVideoGen:
    return AsyncVideoGen(
        api_key=server.api_key, base_url=server.base_url, default_headers={"User-Agent": name}
    )


def polls_by_id(server: SandboxServer) -> dict[str, list[tuple[float, str | None]]]:
    """``task_id -> [(time, user agent)]`` of the status queries the sandbox served."""
    polls: dict[str, list[tuple[float, str | None]]] = collections.defaultdict(list)
    for record in server.request_log:
        if record.route == GET:
            task_id = parse_qs(record.query)["task_id"][0]
            polls[task_id].append((record.started_at, record.user_agent))
    return polls


def assert_never_polled_at_once(server: SandboxServer) -> None:
    """Per id, each watcher's polls form one stretch, and the stretches do not overlap.

    A watcher that holds more than its share when another one joins gives its latest claimed
    ids back (after they left its gather): an id then passes from one watcher to the other.
    """
    for task_id, polls in polls_by_id(server).items():
        spans: dict[str | None, tuple[float, float]] = {}
        for started, agent in polls:
            low, high = spans.get(agent, (started, started))
            spans[agent] = (min(low, started), max(high, started))
        for (_, end), (start, _) in itertools.pairwise(sorted(spans.values())):
            assert end < start, (task_id, spans)


async def test_watch_records_and_yields_every_terminal_entry(ledger_url: str) -> None:
    async with (
        SandboxServer(time_scale=0.002, seed=5, task_duration=(20, 60), failure_rate=0.2) as server,
        server.client() as client,
        Ledger.open(ledger_url) as ledger,
    ):
        for i in range(8):
            await ledger.create_task(client, f"clip {i}", key=f"early-{i}")
        seen: list[LedgerEntry] = []
        async with ledger.watch(client, claim_interval=0.05) as finished:
            async for entry in finished:
                seen.append(entry)
                if len(seen) == 1:  # created after the watch started: picked up too
                    for i in range(4):
                        await ledger.create_task(client, f"late {i}", key=f"late-{i}")
                if len(seen) == 12:
                    break
        assert sorted(e.key for e in seen) == sorted(
            [f"early-{i}" for i in range(8)] + [f"late-{i}" for i in range(4)]
        )
        for entry in seen:
            truth = server.describe_task(entry.task_id)
            assert entry.state == truth["status"]
            assert entry.task is not None
            assert entry.task.status == truth["status"]
            assert entry.credits_cost == truth["credits_cost"]
            assert entry.finished_at is not None
        stored = {e.key: e for e in [x async for x in ledger.entries()]}
        assert all(stored[e.key].state == e.state for e in seen)
        # Everything was delivered: a new watcher has nothing to yield.
        async with ledger.watch(client, stop_when_idle=True) as finished:
            assert [e async for e in finished] == []


async def test_two_watchers_share_the_work_without_double_polling(ledger_url: str) -> None:
    async with SandboxServer(time_scale=0.005, seed=6, task_duration=(20, 80)) as server:
        async with server.client() as creator, Ledger.open(ledger_url) as ledger:
            for i in range(40):
                await ledger.create_task(creator, f"clip {i}", key=f"k{i:02d}")
        server.reset_stats()

        opened: list[str] = []
        both_open = asyncio.Event()

        async def watcher(name: str) -> list[str]:
            async with _client(server, name) as client, Ledger.open(ledger_url) as own:
                # Both start claiming together: one that opened its ledger late on a busy
                # machine would find every entry claimed by the other.
                opened.append(name)
                if len(opened) == 2:
                    both_open.set()
                await both_open.wait()
                watch = own.watch(client, claim_size=5, claim_interval=0.05, stop_when_idle=True)
                async with watch as finished:
                    return [entry.key async for entry in finished]

        a, b = await asyncio.gather(watcher("watcher-a"), watcher("watcher-b"))
        assert sorted(a + b) == [f"k{i:02d}" for i in range(40)]
        assert not set(a) & set(b)
        assert a
        assert b
        assert_never_polled_at_once(server)


async def test_a_429_seen_by_one_watcher_pauses_every_watcher(ledger_url: str) -> None:
    pause = 1.0
    names = ("watcher-a", "watcher-b")
    # Seen from each watcher's client: when each poll was sent (the "request" event comes once
    # the client's pacing let it go), when a 429 was read, and when its ledger first reported
    # the shared pause.
    sent: dict[str, list[float]] = {name: [] for name in names}
    limited: dict[str, float] = {}
    learned: dict[str, float] = {}
    # Tasks outlive the start of both watchers even on a loaded machine (4-5 s), and a short
    # lease lets a watcher that joined late get its share soon (claims are handed on).
    async with SandboxServer(time_scale=0.01, seed=7, task_duration=(400, 500)) as server:
        async with server.client() as creator, Ledger.open(ledger_url) as ledger:
            for i in range(20):
                await ledger.create_task(creator, f"clip {i}", key=f"k{i:02d}")

        async def watcher(name: str) -> None:
            def on_request(event: RequestEvent) -> None:
                if event.path == "/v1/tasks":
                    sent[name].append(time.monotonic())

            def on_response(event: ResponseEvent) -> None:
                if event.status_code == 429:
                    limited.setdefault(name, time.monotonic())

            hooks = {"request": [on_request], "response": [on_response]}
            client = AsyncVideoGen(
                api_key=server.api_key,
                base_url=server.base_url,
                default_headers={"User-Agent": name},
                event_hooks=hooks,
            )
            async with client, Ledger.open(ledger_url) as own:
                read = own.store.read

                async def reading(plan: Any, *args: Any) -> Any:
                    found = await read(plan, *args)
                    if plan is pause_remaining and found > 0:
                        learned.setdefault(name, time.monotonic())
                    return found

                own.store.read = reading  # type: ignore[method-assign]
                watch = own.watch(
                    client, lease=3.0, claim_size=10, claim_interval=0.05, stop_when_idle=True
                )
                async with watch as finished:
                    async for _ in finished:
                        pass

        async def inject() -> None:
            # Once both watchers are polling, the next status query is answered 429.
            with anyio.fail_after(20):
                await server.wait_until(
                    lambda: len({r.user_agent for r in server.request_log if r.route == GET}) >= 2
                )
            server.faults.add(FaultRule(route=GET, rate_limit_rate=1.0, retry_after=pause, times=1))

        await asyncio.gather(watcher(names[0]), watcher(names[1]), inject())
    assert len([r for r in server.request_log if r.status == 429]) == 1
    assert len(limited) == 1
    ((seen_by, limited_at),) = limited.items()
    other = names[1] if seen_by == names[0] else names[0]
    # The other watcher read the pause from the ledger (within its 1 s) ...
    assert other in learned, f"{other} never read the pause that {seen_by} met"
    learned_at = learned[other]
    # ... and sent nothing from then until the pause ended, then polled again.
    ends = limited_at + pause - 0.05
    assert [t - limited_at for t in sent[other] if learned_at < t < ends] == []
    assert any(t >= ends for t in sent[other]), "the other watcher polled again after the pause"


async def test_a_watcher_that_stops_when_idle_waits_for_a_result_handed_to_its_writer(
    sqlite_url: str,
) -> None:
    # The gather's result goes straight to the writer waiting in receive(): until the writer
    # task runs, the result is in neither the channel's buffer nor a batch being written. A
    # watcher asked at that moment whether it is idle must say no; saying yes ended the watch
    # and cancelled the writer mid-write, so the result was recorded but never yielded.
    async with SandboxServer() as server, server.client() as client:
        async with Ledger.open(sqlite_url) as ledger:
            watch: Any = ledger.watch(client, stop_when_idle=True)
            watch._polling["t-1"] = ("k-1", time.monotonic())
            watch._held = 1
            # A watch makes its streams when entered: this one, never entered, is given its own.
            watch._send, watch._receive = anyio.create_memory_object_stream[Any](10)
            watch._finished_send, watch._finished_receive = anyio.create_memory_object_stream[Any](
                10
            )

            async def one_result() -> Any:
                yield Task(task_id="t-1", status=TaskStatus.SUCCEEDED)

            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(watch._writer)
                    while not watch._finished_receive.statistics().tasks_waiting_receive:
                        await anyio.lowlevel.checkpoint()
                    await watch._collect(one_result())  # no checkpoint: the writer has not run
                    assert not await watch._idle()
                    tg.cancel_scope.cancel()
            finally:  # a watch never entered: its streams are closed here, not by its exit
                for stream in (watch._send, watch._receive, watch._finished_send):
                    stream.close()
                watch._finished_receive.close()


@contextlib.contextmanager
def no_stream_left_open() -> Iterator[None]:
    """Fail if what is dropped in the block (and collected after it) warns of an open stream."""
    gc.collect()  # what earlier tests left is not this test's
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        yield
        gc.collect()
    assert [str(w.message) for w in caught if "Unclosed <MemoryObject" in str(w.message)] == []


async def test_a_watch_left_unentered_or_before_its_runner_started_leaves_no_stream_open(
    sqlite_url: str,
) -> None:
    # The streams were made with the watch and the consumer's send end closed by the watch's
    # runner task alone: a watch never entered left four streams open, and a runner cancelled
    # before it ever ran (as asyncio.run and pytest's loop do to every task left when they
    # end) left that one. Either warned when collected, in whichever test ran then.
    async with SandboxServer() as server, server.client() as client:
        async with Ledger.open(sqlite_url) as ledger:
            watch: Any = ledger.watch(client)
            with pytest.raises(RuntimeError, match="use the watch as"):
                await watch.__anext__()
            with no_stream_left_open():
                del watch

            watch = ledger.watch(client)
            with warnings.catch_warnings():  # of the runner's coroutine, never started
                warnings.filterwarnings("ignore", "coroutine .* never awaited", RuntimeWarning)
                async with watch:  # no checkpoint in the block: the runner has not run
                    (runner,) = [
                        task
                        for task in asyncio.all_tasks()
                        if task.get_name().endswith("Watch._guarded_run")
                    ]
                    runner.cancel()
                assert runner.cancelled()
                with no_stream_left_open():
                    del watch, runner
