"""``extra_headers``, ``extra_query``, ``extra_body`` and ``timeout`` on every call.

What reaches the service is read from the sandbox's own records (its request log, its tasks)
and, where the sandbox keeps no trace (whole headers, raw bodies), from a server of the test's
own that records every request it receives.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from aiohttp import web

from videogen_async import (
    APITimeoutError,
    AsyncVideoGen,
    BadRequestError,
    ConfigurationError,
    InvalidRequestError,
    Timeout,
)
from videogen_async._http._options import NO_OPTIONS, call_options
from videogen_async.testing import SandboxServer

KEY = "sk-test-0123456789abcdef"


@pytest.fixture
async def sandbox() -> AsyncIterator[SandboxServer]:
    async with SandboxServer(manual_clock=True) as server:
        yield server


class Recorder:
    """A server that answers every request with a valid envelope and records it."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.hold = anyio.Event()  # GET /slow waits on it (never set): a server that hangs

    async def handle(self, request: web.Request) -> web.Response:
        raw = await request.read()
        self.requests.append(
            {
                "method": request.method,
                "path": request.path,
                "query": dict(request.query),
                "headers": dict(request.headers),
                "header_names": list(request.headers.keys()),
                "body": json.loads(raw) if raw else None,
            }
        )
        if "slow" in request.query:
            await self.hold.wait()
        data: dict[str, Any] = {"api_available_credits": 5, "api_total_credits": 9}
        if request.path != "/v1/credits":
            data = {"task_id": "t-1", "project_id": "p-1", "task_ids": ["t-1"], "status": "running"}
        return web.json_response({"code": 200, "trace_id": "x", "message": None, "data": data})


@pytest.fixture
async def recorder() -> AsyncIterator[tuple[Recorder, str]]:
    rec = Recorder()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", rec.handle)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield rec, f"http://127.0.0.1:{port}"
    finally:
        rec.hold.set()
        await runner.cleanup()


# -- extra_body ------------------------------------------------------------------------------


async def test_extra_body_wins_over_the_checked_fields_on_the_wire(sandbox: SandboxServer) -> None:
    async with sandbox.client() as client:
        created = await client.tasks.create(
            "a kite", model="videomodel_2_0", extra_body={"model": "videomodel_2_0_fast"}
        )
    assert sandbox.describe_task(created.task_id)["model"] == "videomodel_2_0_fast"
    (record,) = sandbox.request_log
    assert (record.route, record.status) == ("POST /v1/video/videomodel-2", 200)


async def test_an_unknown_model_is_refused_before_sending_and_names_extra_body(
    sandbox: SandboxServer,
) -> None:
    async with sandbox.client() as client:
        with pytest.raises(InvalidRequestError) as refused:
            await client.tasks.create("a kite", model="videomodel_2_1")
        assert sandbox.request_log == ()  # nothing was sent
        assert refused.value.field == "model"
        assert "extra_body={'model': 'videomodel_2_1'}" in str(refused.value)
        with pytest.raises(InvalidRequestError, match=r"extra_body=\{'ratio': '5:4'\}"):
            await client.tasks.create("a kite", ratio="5:4")
        with pytest.raises(InvalidRequestError, match=r"extra_body=\{'aspect_ratio': '4:5'\}"):
            await client.projects.create(
                "https://cdn.example.com/ad.mp4", ["https://cdn.example.com/p.png"],
                aspect_ratio="4:5",
            )  # fmt: skip
        assert sandbox.request_log == ()
        # Sent through extra_body, the value reaches the service, which judges it: the
        # sandbox's list has no such model, and its refusal is not the SDK's advice.
        with pytest.raises(BadRequestError) as answered:
            await client.tasks.create("a kite", extra_body={"model": "videomodel_2_1"})
    (record,) = sandbox.request_log
    assert (record.route, record.status) == ("POST /v1/video/videomodel-2", 400)
    assert "videomodel_2_1" in str(answered.value)
    assert "extra_body" not in str(answered.value)


async def test_extra_body_goes_with_every_creating_call(recorder: tuple[Recorder, str]) -> None:
    rec, base = recorder
    extra = {"seed": 7, "note": None, "tags": ["a"]}
    async with AsyncVideoGen(api_key=KEY, base_url=base) as client:
        await client.tasks.create("p", duration=5, extra_body={**extra, "duration": 6})
        await client.projects.create(
            "https://cdn.example.com/ad.mp4", ["https://cdn.example.com/p.png"], extra_body=extra
        )
        await client.projects.create_videos("proj-1", out_number=2, extra_body=extra)
        await client.credits.get(extra_body={"x": 1})  # a GET sends it too, as given
    task, project, videos, credits = (r["body"] for r in rec.requests)
    assert task == {"prompt": "p", "duration": 6, **extra}
    assert project["seed"] == 7
    assert project["note"] is None
    assert project["reference_video_url"] == "https://cdn.example.com/ad.mp4"
    assert videos == {"out_number": 2, **extra}
    assert credits == {"x": 1}


async def test_a_bad_extra_body_is_refused_before_sending(recorder: tuple[Recorder, str]) -> None:
    rec, base = recorder
    async with AsyncVideoGen(api_key=KEY, base_url=base) as client:
        with pytest.raises(InvalidRequestError, match="extra_body: must be JSON-serializable"):
            await client.tasks.create("p", extra_body={"when": object()})
        with pytest.raises(InvalidRequestError, match="extra_body: must be a mapping"):
            await client.tasks.create("p", extra_body=["model"])  # type: ignore[arg-type]
    assert rec.requests == []


# -- extra_query and extra_headers -----------------------------------------------------------


async def test_extra_query_and_headers_reach_the_sandbox(sandbox: SandboxServer) -> None:
    async with sandbox.client() as client:
        created = await client.tasks.create("a kite", extra_query={"region": "eu", "v": 2})
        await client.tasks.get(created.task_id, extra_headers={"User-Agent": "my-app/1.0"})
        await client.credits.get(extra_query={"fields": "all"})
    create, get, credits = sandbox.request_log
    assert create.query == "region=eu&v=2"
    assert get.query == f"task_id={created.task_id}"
    assert get.user_agent == "my-app/1.0"
    assert credits.query == "fields=all"


async def test_extra_headers_and_query_replace_and_remove(recorder: tuple[Recorder, str]) -> None:
    rec, base = recorder
    team = {"X-Team": "video"}
    async with AsyncVideoGen(api_key=KEY, base_url=base, default_headers=team) as client:
        await client.tasks.get(
            "t-1",
            extra_headers={"user-agent": "mine", "X-Trace": "abc", "x-team": None},
            extra_query={"task_id": "t-2", "verbose": 1},
        )
        await client.tasks.create("p", extra_headers={"content-type": "application/json+v2"})
        await client.tasks.get("t-1", extra_query={"task_id": None})
    get, create, without = rec.requests
    assert get["headers"]["User-Agent"] == "mine"
    assert [n.lower() for n in get["header_names"]].count("user-agent") == 1
    assert get["headers"]["X-Trace"] == "abc"
    assert "X-Team" not in get["headers"]
    assert create["headers"]["X-Team"] == "video"
    assert get["headers"]["Authorization"] == f"Bearer {KEY}"
    assert get["query"] == {"task_id": "t-2", "verbose": "1"}
    assert create["headers"]["Content-Type"] == "application/json+v2"
    assert without["query"] == {}


async def test_ids_and_extra_query_are_percent_encoded(recorder: tuple[Recorder, str]) -> None:
    """An id and ``extra_query`` names and values holding ``&``, ``=``, ``?``, ``%``, spaces or
    non-ASCII letters reach the service as they were given (each encoded once, by its check)."""
    rec, base = recorder
    odd = {"a b": "x&y=z", "ü": 1, "p%": "100%"}
    async with AsyncVideoGen(api_key=KEY, base_url=base) as client:
        await client.tasks.get("a?b&c=ü", extra_query=odd)
        await client.projects.get("p?q=ü%")
    get, project = rec.requests
    assert get["query"] == {"task_id": "a?b&c=ü", "a b": "x&y=z", "ü": "1", "p%": "100%"}
    assert project["path"] == "/v1/video/viral-ads-clone/p?q=ü%"


async def test_waits_and_gathers_send_the_extras_with_every_poll(sandbox: SandboxServer) -> None:
    async with sandbox.client() as client:
        ids = [(await client.tasks.create(f"t{n}")).task_id for n in range(2)]
        sandbox.clock.advance(600)  # every task is done
        extras: dict[str, Any] = {
            "extra_headers": {"User-Agent": "poller"},
            "extra_query": {"p": "1"},
        }
        await client.tasks.wait(ids[0], **extras)
        async for _ in client.tasks.watch(ids[0], **extras):
            pass
        async with client.tasks.gather_until_done(ids, **extras) as results:
            assert len([task async for task in results]) == 2
    polls = [r for r in sandbox.request_log if r.method == "GET"]
    assert len(polls) == 4
    assert all(r.user_agent == "poller" and r.query.endswith("&p=1") for r in polls)


HEADERS_REFUSED = ["Authorization", "authorization", "AUTHORIZATION", "Proxy-Authorization"]


@pytest.mark.parametrize("name", HEADERS_REFUSED)
async def test_headers_that_carry_or_replace_the_key_are_refused(
    sandbox: SandboxServer, name: str
) -> None:
    async with sandbox.client() as client:
        with pytest.raises(InvalidRequestError, match=f"extra_headers: must not set '{name}'"):
            await client.credits.get(extra_headers={name: "Bearer other"})
        with pytest.raises(InvalidRequestError, match="must not carry the API key"):
            await client.tasks.create("p", extra_headers={"X-Api-Key": sandbox.api_key})
        with pytest.raises(InvalidRequestError, match="must be a string without line breaks"):
            await client.credits.get(extra_headers={"X-A": "a\r\nAuthorization: x"})
        with pytest.raises(InvalidRequestError, match="is not a valid header name"):
            await client.credits.get(extra_headers={"X A": "b"})
        with pytest.raises(InvalidRequestError, match="extra_query: the value of 'x'"):
            await client.credits.get(extra_query={"x": True})
    assert sandbox.request_log == ()  # refused before sending
    async with sandbox.client() as client:  # a cookie neither carries nor replaces the key
        await client.credits.get(extra_headers={"Cookie": "session=1"})
    assert len(sandbox.request_log) == 1


@pytest.mark.parametrize("name", HEADERS_REFUSED)
def test_default_headers_refuse_what_extra_headers_refuse(name: str) -> None:
    with pytest.raises(ConfigurationError, match=f"default_headers: must not set '{name}'"):
        AsyncVideoGen(api_key=KEY, base_url="http://127.0.0.1:9", default_headers={name: "x"})
    with pytest.raises(ConfigurationError, match="'X-Api-Key' must not carry the API key"):
        AsyncVideoGen(
            api_key=KEY, base_url="http://127.0.0.1:9", default_headers={"X-Api-Key": KEY}
        )


async def test_a_header_carrying_the_environments_key_is_refused(
    sandbox: SandboxServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    env_key = f"vg-env-{secrets.token_hex(16)}"  # no client of the process was given it
    monkeypatch.setenv("VIDEOGEN_API_KEY", env_key)
    async with sandbox.client() as client:
        with pytest.raises(InvalidRequestError, match="must not carry the API key"):
            await client.credits.get(extra_headers={"X-Other": f"Bearer {env_key}"})
    with pytest.raises(ConfigurationError, match="must not carry the API key"):
        AsyncVideoGen(KEY, sandbox.base_url, default_headers={"X-Other": env_key})
    assert sandbox.request_log == ()


# -- timeout ---------------------------------------------------------------------------------


@pytest.mark.parametrize("timeout", [0.2, Timeout(connect=5, read=0.2, total=None)])
async def test_a_per_call_timeout_bounds_that_call(
    recorder: tuple[Recorder, str], timeout: float | Timeout
) -> None:
    rec, base = recorder
    # The client's own timeouts would wait far longer than the test runs.
    async with AsyncVideoGen(api_key=KEY, base_url=base, timeout=3600, max_retries=0) as client:
        with pytest.raises(APITimeoutError) as read:
            await client.credits.get(extra_query={"slow": "1"}, timeout=timeout)
        assert read.value.request_may_have_taken_effect is False
        with pytest.raises(APITimeoutError) as create:
            await client.tasks.create("p", extra_query={"slow": "1"}, timeout=timeout)
        assert create.value.request_may_have_taken_effect is True
        assert (await client.credits.get()).api_total_credits == 9  # the next call: unbounded
    assert len(rec.requests) == 3


@pytest.mark.parametrize("timeout", [0, -1, True, "5"])
async def test_a_bad_timeout_is_refused(recorder: tuple[Recorder, str], timeout: Any) -> None:
    rec, base = recorder
    async with AsyncVideoGen(api_key=KEY, base_url=base) as client:
        with pytest.raises(InvalidRequestError, match=r"^timeout: "):
            await client.credits.get(timeout=timeout)
    assert rec.requests == []


async def test_an_option_a_call_does_not_take_is_refused_before_sending(
    recorder: tuple[Recorder, str],
) -> None:
    rec, base = recorder
    async with AsyncVideoGen(api_key=KEY, base_url=base) as client:
        with pytest.raises(TypeError, match="'extra_header'"):
            await client.tasks.create("p", extra_header={"X-A": "b"})  # type: ignore[call-arg]
        with pytest.raises(TypeError, match=r"'extra_body'.* extra_headers, extra_query"):
            await client.tasks.wait("t-1", extra_body={"a": 1})  # type: ignore[call-arg]
        with pytest.raises(TypeError, match="'retries'"):
            await client.projects.wait_for_script("p-1", retries=0)  # type: ignore[call-arg]
    assert rec.requests == []


async def test_options_all_unset_are_no_options_and_a_poll_pays_nothing_for_them() -> None:
    # A gather passes its options through whether set or not: all None is no option at all,
    # and the polls then go through the bound read itself (a partial would cost every poll).
    unset = call_options({"extra_headers": None, "extra_query": None}, polls=True)
    assert unset is NO_OPTIONS
    async with AsyncVideoGen(api_key="k", base_url="http://127.0.0.1:9") as client:
        assert client.tasks._source(unset).fetch == client.tasks._fetch_once
