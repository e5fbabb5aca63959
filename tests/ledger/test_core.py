"""The ledger on both engines: write-ahead creates, idempotent keys, states, the budget."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from videogen_async import (
    AmbiguousCreateError,
    AsyncVideoGen,
    BudgetExceededError,
    InsufficientCreditsError,
    InvalidRequestError,
    Ledger,
    LedgerEntry,
)
from videogen_async.testing import FaultRule, SandboxServer

POST = "POST /v1/video/videomodel-2"


def _posts(server: SandboxServer) -> int:
    return sum(1 for r in server.request_log if r.route == POST)


async def test_create_writes_entry_and_id(ledger_url: str) -> None:
    async with SandboxServer(manual_clock=True, seed=1) as server, server.client() as client:
        async with Ledger.open(ledger_url) as ledger:
            entry = await ledger.create_task(client, "a paper boat", key="boat", duration=6)
            assert entry.state == "pending"
            assert entry.task_id == server.task_ids[0]
            assert entry.model == "videomodel_2_0"
            assert entry.duration == 6
            assert entry.credits_cost == server.describe_task(entry.task_id)["credits_cost"]
            assert await ledger.get("boat") == entry
            assert await ledger.get("nothing") is None
        # Durable: another connection sees it.
        async with Ledger.open(ledger_url) as again:
            assert (await again.get("boat")) == entry
            assert [e.key async for e in again.entries()] == ["boat"]


async def test_same_key_is_created_once_across_connections(ledger_url: str) -> None:
    async with SandboxServer(manual_clock=True, seed=2) as server, server.client() as client:
        ledgers = [await Ledger.open(ledger_url) for _ in range(6)]
        try:
            results = await asyncio.gather(
                *(ledger.create_task(client, "one fox", key="fox") for ledger in ledgers)
            )
        finally:
            for ledger in ledgers:
                await ledger.aclose()
        assert len(server.task_ids) == 1
        assert _posts(server) == 1
        assert {entry.task_id for entry in results} == {server.task_ids[0]}
        assert all(entry.state == "pending" for entry in results)


async def test_same_key_is_created_once_by_concurrent_calls_of_one_ledger(ledger_url: str) -> None:
    async with SandboxServer(manual_clock=True, seed=3) as server, server.client() as client:
        async with Ledger.open(ledger_url) as ledger:
            results = await asyncio.gather(
                *(ledger.create_task(client, "one hare", key="hare") for _ in range(6))
            )
            # One that waited behind a create refused by the cap sends its own.
            capped = await Ledger.open(ledger_url, max_credits=0.0)
            try:
                outcomes = await asyncio.gather(
                    *(capped.create_task(client, "x", key="capped") for _ in range(3)),
                    return_exceptions=True,
                )
            finally:
                await capped.aclose()
        assert _posts(server) == 1
        assert {entry.task_id for entry in results} == {server.task_ids[0]}
        assert all(entry.state == "pending" for entry in results)
        assert all(isinstance(outcome, BudgetExceededError) for outcome in outcomes)


async def test_bad_fields_write_nothing(ledger_url: str) -> None:
    async with SandboxServer(manual_clock=True) as server, server.client() as client:
        async with Ledger.open(ledger_url) as ledger:
            with pytest.raises(InvalidRequestError, match="duration"):
                await ledger.create_task(client, "x", key="bad", duration=99)
            with pytest.raises(InvalidRequestError, match="key"):
                await ledger.create_task(client, "x", key="")
            assert await ledger.get("bad") is None
        assert server.request_log == ()


async def test_refused_create_is_recorded_and_can_be_sent_again(ledger_url: str) -> None:
    async with SandboxServer(manual_clock=True, credits=0) as server, server.client() as client:
        async with Ledger.open(ledger_url) as ledger:
            with pytest.raises(InsufficientCreditsError):
                await ledger.create_task(client, "a whale", key="whale")
            entry = await ledger.get("whale")
            assert entry is not None
            assert entry.state == "refused"
            assert entry.task_id is None
            server.add_credits(1000)
            again = await ledger.create_task(client, "a whale", key="whale")
            assert again.state == "pending"
            assert len(server.task_ids) == 1


@pytest.mark.parametrize(
    "rule",
    [
        FaultRule(route=POST, drop_after_rate=1.0, times=1),  # created, the answer lost
        FaultRule(route=POST, error_rate=1.0, error_statuses=(500,), times=1),  # a 500
        FaultRule(route=POST, html_rate=1.0, html_status=502, times=1),  # a proxy's page
    ],
    ids=["drop_after", "500", "html"],
)
async def test_ambiguous_create_is_never_sent_again_silently(
    ledger_url: str, rule: FaultRule
) -> None:
    async with SandboxServer(manual_clock=True, faults=rule) as server:
        async with server.client() as client, Ledger.open(ledger_url) as ledger:
            with pytest.raises(AmbiguousCreateError) as caught:
                await ledger.create_task(client, "a storm", key="storm")
            assert caught.value.key == "storm"
            assert caught.value.entry.state == "unknown"
            sent = _posts(server)
            with pytest.raises(AmbiguousCreateError):
                await ledger.create_task(client, "a storm", key="storm")
            assert _posts(server) == sent  # nothing sent
            entry = await ledger.resend(client, "storm")
            assert entry.state == "pending"
            assert entry.task_id == server.task_ids[-1]
            assert _posts(server) == sent + 1
            assert await ledger.create_task(client, "a storm", key="storm") == entry


async def test_budget_holds_under_concurrency(ledger_url: str) -> None:
    async with SandboxServer(manual_clock=True, seed=3) as server, server.client() as client:
        # The sandbox charges 2 credits per second of videomodel_2_0: 10 for 5 s.
        ledgers = [
            await Ledger.open(ledger_url, max_credits=35, price_estimate=lambda m, d: 2.0 * d)
            for _ in range(4)
        ]
        try:
            results = await asyncio.gather(
                *(
                    ledgers[i % 4].create_task(client, f"clip {i}", key=f"k{i}", duration=5)
                    for i in range(10)
                ),
                return_exceptions=True,
            )
            summary = await ledgers[0].summary()
        finally:
            for ledger in ledgers:
                await ledger.aclose()
        created = [r for r in results if isinstance(r, LedgerEntry)]
        refused = [r for r in results if isinstance(r, BudgetExceededError)]
        assert len(created) == 3
        assert len(refused) == 7
        assert len(server.task_ids) == 3
        assert summary["spent"] == 30
        assert summary["reserved"] == 0


async def test_unpriced_create_holds_the_rest_of_the_budget(ledger_url: str) -> None:
    async with SandboxServer(manual_clock=True, seed=4) as server, server.client() as client:
        async with Ledger.open(ledger_url, max_credits=25) as ledger:
            # No price known: the first create reserves all 25, is answered 10, then the rate
            # (2 credits per second) prices the next ones.
            first, second = await asyncio.gather(
                ledger.create_task(client, "a", key="a", duration=5),
                ledger.create_task(client, "b", key="b", duration=5),
            )
            assert first.state == second.state == "pending"
            with pytest.raises(BudgetExceededError) as caught:
                await ledger.create_task(client, "c", key="c", duration=5)
            assert caught.value.estimate == 10
            assert caught.value.spent == 20
            assert len(server.task_ids) == 2


async def test_unknown_create_counts_as_spent(ledger_url: str) -> None:
    rule = FaultRule(route=POST, drop_after_rate=1.0, times=1)
    async with SandboxServer(manual_clock=True, faults=rule) as server:
        async with (
            server.client() as client,
            Ledger.open(ledger_url, max_credits=15, price_estimate=lambda m, d: 2.0 * d) as ledger,
        ):
            with pytest.raises(AmbiguousCreateError):
                await ledger.create_task(client, "a", key="a", duration=5)
            summary = await ledger.summary()
            assert summary["spent"] == 10  # may have been charged: counted
            with pytest.raises(BudgetExceededError):
                await ledger.create_task(client, "b", key="b", duration=5)
            assert len(server.task_ids) == 1


async def test_cancelled_create_becomes_unknown(ledger_url: str) -> None:
    # A service that takes the request and never answers: the create is on the wire when it
    # is cancelled, so it may have taken effect.
    arrived, release = asyncio.Event(), asyncio.Event()

    async def hang(request: web.Request) -> web.Response:
        arrived.set()
        await release.wait()
        return web.json_response({})

    app = web.Application()
    app.router.add_post("/v1/video/videomodel-2", hang)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        async with (
            AsyncVideoGen(api_key="k", base_url=f"http://127.0.0.1:{port}") as client,
            Ledger.open(ledger_url) as ledger,
        ):
            task = asyncio.ensure_future(ledger.create_task(client, "slow", key="slow"))
            await arrived.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            entry = await ledger.get("slow")
            assert entry is not None
            assert entry.state == "unknown"
            with pytest.raises(AmbiguousCreateError):
                await ledger.create_task(client, "slow", key="slow")
            release.set()  # the client finishes the abandoned create before it closes
    finally:
        release.set()
        await runner.cleanup()
