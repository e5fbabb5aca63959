"""A service that sends an absurd ``Retry-After``, on the wire (a misbehaving server of our own).

An unreadable, overflowing, past or far too long value never becomes the client-wide pause:
the calls that follow go out. A call (or a wait) whose own bound ends before a wait the
service asked for fails at once and says why.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from aiohttp import web

import videogen_async as vg
from videogen_async import AsyncVideoGen, BackoffPolicy, PollPolicy

from .test_hostile_core import KEY, envelope, serve, task_data

#: Beyond ``max_retry_after`` (60 s): the request raises its 429 at once.
TOO_LONG = ["Fri, 31 Dec 9999 23:59:59 GMT", "3600"]
#: Unreadable, overflowing or past: as if absent (the backoff), or 0.
UNUSABLE = ["soon", "", "1e309", "Wed, 21 Oct 2015 07:28:00 GMT"]
QUICK = BackoffPolicy(initial_delay=0.01, rate_limit_pause=0.05)
CREDITS = {"api_available_credits": 7, "api_total_credits": 9}


def limited(retry_after: str) -> web.Response:
    body = json.dumps({"code": 429, "message": "slow down"}).encode()
    return web.Response(status=429, headers={"Retry-After": retry_after}, body=body)


@pytest.mark.parametrize("value", TOO_LONG + UNUSABLE)
async def test_an_unusable_retry_after_never_pauses_the_client(value: str) -> None:
    sent: list[str] = []  # what reached the server, in order ("429" for the limited one)

    async def handler(request: web.Request) -> web.StreamResponse:
        if not sent:
            sent.append("429")
            return limited(value)
        sent.append(request.path)
        if request.path == "/v1/tasks":
            return web.Response(body=envelope(task_data(request.query["task_id"], "succeeded")))
        return web.Response(body=envelope(CREDITS))

    async with serve(handler) as base, AsyncVideoGen(KEY, base, backoff=QUICK) as client:
        if value in TOO_LONG:
            with pytest.raises(vg.RateLimitError) as caught:
                await client.credits.get()
            assert "(Retry-After)" in str(caught.value)
            assert "max_retry_after" in str(caught.value)
            assert sent == ["429"]  # raised at once, not retried
        else:
            assert (await client.credits.get()).api_available_credits == 7
            assert sent == ["429", "/v1/credits"]  # retried on the backoff
        # The 429 paused the client for the backoff's pause at most, never for the cap (60 s).
        pacing = client._transport.pacing
        assert pacing.paused_until - asyncio.get_running_loop().time() <= QUICK.rate_limit_pause
        # The calls that follow go out: a read, and a gather.
        before = len(sent)
        assert (await client.credits.get()).api_available_credits == 7
        async with client.tasks.gather_until_done(["t-1"], poll_policy=PollPolicy()) as results:
            got = [task async for task in results]
        assert [t.task_id for t in got] == ["t-1"]
        assert sent[before:] == ["/v1/credits", "/v1/tasks"]


@pytest.mark.parametrize("value", TOO_LONG + UNUSABLE)
async def test_a_poll_treats_an_unusable_retry_after_as_absent(value: str) -> None:
    polls: list[int] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        polls.append(1)
        if len(polls) == 1:
            return limited(value)
        return web.Response(body=envelope(task_data(request.query["task_id"], "succeeded")))

    async with serve(handler) as base, AsyncVideoGen(KEY, base, backoff=QUICK) as client:
        async with client.tasks.gather_until_done(["t-1"]) as results:
            got = [task async for task in results]
        assert got[0].is_succeeded  # type: ignore[union-attr]
        assert results.progress.rate_limited == 1
        assert results.progress.errors == 0
        task = await client.tasks.wait("t-1", timeout=30)
        assert task.is_succeeded
    assert len(polls) == 3


async def test_a_call_that_would_wait_past_its_deadline_fails_fast_and_says_why() -> None:
    sent: list[str] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        sent.append(request.path)
        if len(sent) == 1:
            return limited("30")  # honoured (within max_retry_after), but past the deadline
        return web.Response(body=envelope(CREDITS))

    async with serve(handler) as base, AsyncVideoGen(KEY, base, deadline=5) as client:
        with pytest.raises(vg.RateLimitError) as caught:
            await client.credits.get()
        assert "waiting 30 s (Retry-After)" in str(caught.value)
        assert "call's bound" in str(caught.value)
        # The client is paused for the 30 s the service asked: the next call's deadline ends
        # first, so it fails at once, without sending anything.
        with pytest.raises(vg.APITimeoutError) as paused:
            await client.credits.get()
        assert "before the client's 429 pause" in str(paused.value)
        assert not paused.value.request_may_have_taken_effect
    assert sent == ["/v1/credits"]


async def test_a_wait_whose_timeout_ends_before_a_retry_after_fails_fast() -> None:
    polls: list[str] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        polls.append(request.query["task_id"])
        return limited("30")

    async with serve(handler) as base, AsyncVideoGen(KEY, base) as client:
        with pytest.raises(vg.WaitTimeoutError) as caught:
            await client.tasks.wait("t-1", timeout=10)
    assert isinstance(caught.value.__cause__, vg.RateLimitError)
    assert "30 s (Retry-After)" in str(caught.value)
    assert caught.value.pending == ("t-1",)
    assert polls == ["t-1"]
