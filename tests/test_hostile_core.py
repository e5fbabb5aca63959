"""Hostile upstreams against the runtime core: bounds on a call, closing, pacing, proxies.

Each test runs a real ``aiohttp.web`` server (or a raw asyncio server) on loopback that
misbehaves on purpose: trickling bytes, going silent, answering 429 storms, or standing in as
a proxy. Server-side counters and events decide, never the wall clock of the test.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import math
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from aiohttp import web

import videogen_async as vg
from videogen_async import AsyncVideoGen, BackoffPolicy, PollPolicy, Timeout
from videogen_async._http._session import proxy_for

KEY = "sk-hostile-test"
PROMPT = "a cat on a skateboard"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def envelope(data: Any, code: int = 200) -> bytes:
    return json.dumps({"code": code, "trace_id": "t", "message": "ok", "data": data}).encode()


def task_data(task_id: str, status: str = "running") -> dict[str, Any]:
    return {"task_id": task_id, "status": status, "created_at": None, "result": None}


@asynccontextmanager
async def serve(handler: Handler) -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def trickle(request: web.Request, body: bytes, gap: float = 0.05) -> web.StreamResponse:
    """Headers at once, then the body one byte per ``gap`` seconds."""
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    response.content_length = len(body) * 1000
    await response.prepare(request)
    for _ in range(1000):
        for byte in body:
            await response.write(bytes([byte]))
            await asyncio.sleep(gap)
    return response


async def raw_server(
    handle: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
) -> tuple[asyncio.AbstractServer, int]:
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


# ---------------------------------------------------------------------------------------------
# Defect class 1: a call can hang forever; one deadline across all retries
# ---------------------------------------------------------------------------------------------


def test_default_timeouts_bound_the_whole_attempt() -> None:
    assert Timeout().total is not None
    client = AsyncVideoGen(api_key=KEY, base_url="http://127.0.0.1:9")
    assert client.timeout.total is not None
    assert math.isfinite(client.timeout.total)
    assert client.deadline is None


@pytest.mark.parametrize("method", ["get", "create"])
@pytest.mark.parametrize("misbehaviour", ["trickle-body", "trickle-headers", "silent-after"])
async def test_a_trickling_server_cannot_hold_a_call(method: str, misbehaviour: str) -> None:
    """Each read arrives well within the read timeout; the whole attempt is still bounded."""
    served = 0

    async def handler(request: web.Request) -> web.StreamResponse:
        nonlocal served
        served += 1
        body = envelope(task_data("t1"))
        if misbehaviour == "trickle-body":
            return await trickle(request, body)
        if misbehaviour == "silent-after":
            response = web.StreamResponse()
            response.content_length = 100
            await response.prepare(request)
            await response.write(b"{")
            await asyncio.sleep(3600)
            return response
        # Headers trickled: the status line and each header, one byte at a time.
        transport = request.transport
        assert transport is not None
        for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 10_000:
            transport.write(bytes([byte]))
            await asyncio.sleep(0.05)
        return web.Response()

    async with serve(handler) as base:
        timeout = Timeout(connect=1.0, read=1.0, total=0.6)
        async with AsyncVideoGen(
            api_key=KEY, base_url=base, timeout=timeout, max_retries=0
        ) as client:
            call = client.tasks.get("t1") if method == "get" else client.tasks.create(PROMPT)
            with anyio.fail_after(10), pytest.raises(vg.APITimeoutError) as caught:
                await call
    assert served == 1
    # A create that timed out after it was sent may have taken effect: never retried.
    assert caught.value.request_may_have_taken_effect is (method == "create")


async def test_one_timer_bounds_an_attempt_its_silences_and_nothing_else(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Attempts share one timer (aiohttp's would be one for the total and one per read).

    An attempt schedules none while the client's timer is due before its own first check; the
    timer still ends a silence after the first bytes when no total is set, and leaves a
    cancellation from outside a cancellation.
    """
    silent = asyncio.Event()

    async def handler(request: web.Request) -> web.StreamResponse:
        if request.query.get("task_id") != "silent":
            return web.Response(body=envelope(task_data("t1")), content_type="application/json")
        response = web.StreamResponse()
        response.content_length = 100
        await response.prepare(request)
        await response.write(b"{")
        silent.set()
        await asyncio.sleep(3600)
        return response

    loop = asyncio.get_running_loop()
    call_at = loop.call_at
    scheduled: list[str] = []

    def counting(when: float, callback: Callable[..., object], *args: Any, **kw: Any) -> Any:
        if not getattr(callback, "__module__", "").startswith("aiohttp.web"):  # the server's
            scheduled.append(getattr(callback, "__qualname__", repr(callback)))
        return call_at(when, callback, *args, **kw)

    timeout = Timeout(connect=1.0, read=0.3, total=None)
    async with serve(handler) as base:
        async with AsyncVideoGen(api_key=KEY, base_url=base, max_retries=0) as client:
            await client.tasks.get("t1")  # the connection is open
            monkeypatch.setattr(loop, "call_at", counting)
            for _ in range(3):
                assert (await client.tasks.get("t1")).task_id == "t1"
            assert scheduled == [], scheduled  # the first get's timer is still due
            with anyio.fail_after(10), pytest.raises(vg.APITimeoutError):
                await client.tasks.get("silent", timeout=timeout)
            silent.clear()
            call = asyncio.ensure_future(client.tasks.get("silent"))
            await silent.wait()
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call


async def test_attempts_in_flight_share_the_timer_each_within_its_own_bounds() -> None:
    """A short attempt started while a long one's first check is far off still ends in time.

    The long attempt is held by the server until the short one timed out, then answered: the
    shared timer cut only the attempt past its bound, and checks a short attempt again once
    none is in flight.
    """
    arrived, release = asyncio.Event(), asyncio.Event()

    async def handler(request: web.Request) -> web.StreamResponse:
        if request.query.get("task_id") == "held":
            arrived.set()
            await release.wait()
            return web.Response(body=envelope(task_data("held")), content_type="application/json")
        response = web.StreamResponse()
        response.content_length = 100
        await response.prepare(request)
        await response.write(b"{")
        await asyncio.sleep(3600)
        return response

    async with serve(handler) as base:
        async with AsyncVideoGen(api_key=KEY, base_url=base, max_retries=0) as client:
            held = asyncio.ensure_future(client.tasks.get("held"))  # checked first in 15 s
            await arrived.wait()
            short = Timeout(connect=1.0, read=0.2, total=None)
            with anyio.fail_after(10), pytest.raises(vg.APITimeoutError):
                await client.tasks.get("silent", timeout=short)
            assert not held.done()
            release.set()
            assert (await held).task_id == "held"
            with anyio.fail_after(10), pytest.raises(vg.APITimeoutError):
                await client.tasks.get("silent", timeout=0.3)


async def test_one_deadline_bounds_all_retries_of_a_call() -> None:
    """A 0.4 s timeout with 5 retries and a 1 s deadline makes at most 3 attempts."""
    attempts = 0

    async def handler(request: web.Request) -> web.StreamResponse:
        nonlocal attempts
        attempts += 1
        await asyncio.sleep(3600)
        return web.Response()

    async with serve(handler) as base:
        async with AsyncVideoGen(
            api_key=KEY, base_url=base, timeout=0.4, max_retries=5, deadline=1.0
        ) as client:
            with anyio.fail_after(10), pytest.raises(vg.APITimeoutError):
                await client.credits.get()
            assert 1 <= attempts <= 3
            # A view takes its own deadline; None turns it off again.
            assert client.with_options(deadline=2.0).deadline == 2.0
            assert client.with_options(deadline=None).deadline is None
            assert client.with_options(max_retries=1).deadline == 1.0


@pytest.mark.parametrize("bad", [0, -1, "5", True, math.nan])
def test_deadline_is_checked(bad: Any) -> None:
    with pytest.raises(vg.ConfigurationError, match="deadline"):
        AsyncVideoGen(api_key=KEY, base_url="http://127.0.0.1:9", deadline=bad)


async def test_a_deadline_does_not_stop_a_quick_call() -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        return web.Response(body=envelope({"api_available_credits": 5, "api_total_credits": 9}))

    async with serve(handler) as base:
        async with AsyncVideoGen(api_key=KEY, base_url=base, deadline=5.0) as client:
            balance = await client.credits.get()
    assert balance.api_available_credits == 5


# ---------------------------------------------------------------------------------------------
# Defect class 5: closing can stall; an unclosed client is reported cleanly
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [{"deadline": 0.5}, {"timeout": Timeout(connect=1.0, read=60.0, total=0.5)}],
    ids=["deadline", "total"],
)
async def test_aclose_drain_is_bounded_by_the_timeout_settings(
    options: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    received = asyncio.Event()

    async def handler(request: web.Request) -> web.StreamResponse:
        received.set()
        await asyncio.sleep(3600)  # silent: never answers the create
        return web.Response()

    async with serve(handler) as base:
        client = AsyncVideoGen(api_key=KEY, base_url=base, **options)
        create = asyncio.ensure_future(client.tasks.create(PROMPT))
        await received.wait()
        create.cancel()
        with pytest.raises(asyncio.CancelledError):
            await create
        with caplog.at_level(logging.WARNING, logger="videogen_async"), anyio.fail_after(10):
            await client.aclose()
    assert client.is_closed
    assert any("may have taken effect" in r.getMessage() for r in caplog.records)


async def test_aclose_drain_waits_for_a_create_that_answers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    release = asyncio.Event()
    received = asyncio.Event()

    async def handler(request: web.Request) -> web.StreamResponse:
        received.set()
        await release.wait()
        return web.Response(body=envelope({"task_id": "t-new", "status": "running", "cost": 1}))

    async with serve(handler) as base:
        client = AsyncVideoGen(api_key=KEY, base_url=base, deadline=30.0)
        create = asyncio.ensure_future(client.tasks.create(PROMPT))
        await received.wait()
        create.cancel()
        with pytest.raises(asyncio.CancelledError):
            await create
        release.set()
        with caplog.at_level(logging.WARNING, logger="videogen_async"), anyio.fail_after(10):
            await client.aclose()
    assert any("t-new" in r.getMessage() for r in caplog.records)


def _made_here() -> AsyncVideoGen:
    return AsyncVideoGen(api_key=KEY, base_url="http://127.0.0.1:9")


async def test_unclosed_client_warns_once_naming_where_it_was_made() -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        return web.Response(body=envelope({"api_available_credits": 1, "api_total_credits": 1}))

    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    try:
        async with serve(handler) as base:
            client = AsyncVideoGen(api_key=KEY, base_url=base)
            await client.credits.get()
            # Garbage of earlier tests in this process is found first, outside the count (a
            # resource one of them leaked fails here, named by pytest, not as a second warning).
            gc.collect()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                del client
                gc.collect()
            await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(previous)
    messages = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert len(messages) == 1, messages
    assert "AsyncVideoGen client was not closed" in messages[0]
    assert "test_hostile_core.py" in messages[0]
    assert "test_unclosed_client_warns_once_naming_where_it_was_made" in messages[0]
    assert KEY not in messages[0]
    assert reported == []  # no "Unclosed client session" / "Unclosed connector" from aiohttp


def test_a_client_never_used_is_dropped_silently() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        client = _made_here()
        del client
        gc.collect()
    assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []


# ---------------------------------------------------------------------------------------------
# Defect class 6: one 429 slows the whole client
# ---------------------------------------------------------------------------------------------

FAST = PollPolicy(
    first_delay=0.0,
    min_interval=0.01,
    max_interval=0.02,
    growth=0.0,
    jitter=0.0,
)
QUICK_PAUSE = BackoffPolicy(rate_limit_pause=0.05, max_retry_after=2.0)


async def test_a_429_pauses_every_wait_of_the_client_and_its_views() -> None:
    """20 waits on one client (half through views): after a 429 with Retry-After, none polls
    until the pause is over, and polling then resumes."""
    loop = asyncio.get_running_loop()
    arrivals: list[float] = []
    limited_at: list[float] = []
    pause = 1.0

    async def handler(request: web.Request) -> web.StreamResponse:
        now = loop.time()
        arrivals.append(now)
        task_id = request.query["task_id"]
        if len(arrivals) == 60:
            limited_at.append(now)
            return web.Response(
                status=429,
                headers={"Retry-After": f"{pause:g}"},
                body=json.dumps({"code": 429, "message": "slow down"}).encode(),
            )
        status = "succeeded" if limited_at and now > limited_at[0] + pause + 0.2 else "running"
        return web.Response(body=envelope(task_data(task_id, status)))

    async with serve(handler) as base:
        async with AsyncVideoGen(
            api_key=KEY, base_url=base, poll_policy=FAST, backoff=QUICK_PAUSE
        ) as client:
            view = client.with_options(timeout=5.0)
            waits = [(client if i % 2 else view).tasks.wait(f"t{i}", timeout=20) for i in range(20)]
            with anyio.fail_after(30):
                done = await asyncio.gather(*waits)
    assert all(t.is_succeeded for t in done)
    assert limited_at
    start = limited_at[0]
    # Requests already on the wire when the 429 was sent may still land just after it.
    during = [t for t in arrivals if start + 0.3 < t < start + pause - 0.05]
    assert during == [], f"{len(during)} requests during the client's pause"
    assert any(t >= start + pause for t in arrivals)


async def test_a_429_seen_by_a_gather_pauses_other_calls_of_the_client() -> None:
    loop = asyncio.get_running_loop()
    arrivals: list[tuple[float, str]] = []
    limited_at: list[float] = []
    # Set when the client has read the 429, not when the server sent it: the answer may
    # still be in flight then, and a call started before the client read it is not paused.
    paused = asyncio.Event()

    def on_response(event: vg.ResponseEvent) -> None:
        if event.status_code == 429:
            paused.set()

    async def handler(request: web.Request) -> web.StreamResponse:
        now = loop.time()
        arrivals.append((now, request.path))
        if request.path == "/v1/credits":
            return web.Response(body=envelope({"api_available_credits": 1, "api_total_credits": 1}))
        if not limited_at:
            limited_at.append(now)
            return web.Response(
                status=429,
                headers={"Retry-After": "1"},
                body=json.dumps({"code": 429, "message": "slow down"}).encode(),
            )
        return web.Response(body=envelope(task_data(request.query["task_id"], "succeeded")))

    hooks = {"response": [on_response]}
    async with serve(handler) as base:
        async with AsyncVideoGen(
            api_key=KEY, base_url=base, poll_policy=FAST, backoff=QUICK_PAUSE, event_hooks=hooks
        ) as client:
            async with client.tasks.gather_until_done(["a"]) as results:
                with anyio.fail_after(10):
                    await paused.wait()
                balance = await client.credits.get()
                got = [t async for t in results]
    assert balance.api_available_credits == 1
    assert len(got) == 1
    credits_at = [t for t, path in arrivals if path == "/v1/credits"]
    assert credits_at
    assert credits_at[0] >= limited_at[0] + 0.9


# ---------------------------------------------------------------------------------------------
# Defect class 7: proxies from the environment
# ---------------------------------------------------------------------------------------------


class RecordingProxy:
    """A proxy on loopback: records each request line; answers absolute-URI requests with a
    credits envelope and refuses CONNECT (502)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            writer.close()
            return
        line = head.split(b"\r\n", 1)[0].decode("latin-1")
        self.lines.append(line)
        if line.startswith("CONNECT "):
            writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
        else:
            body = envelope({"api_available_credits": 7, "api_total_credits": 7})
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
        await writer.drain()
        writer.close()


@pytest.fixture
def clean_proxy_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    return monkeypatch


async def test_http_proxy_from_the_environment_is_used(
    clean_proxy_env: pytest.MonkeyPatch,
) -> None:
    proxy = RecordingProxy()
    server, port = await raw_server(proxy.handle)
    async with server:
        clean_proxy_env.setenv("HTTP_PROXY", f"http://127.0.0.1:{port}")
        # A host that does not resolve: only the proxy can answer for it.
        async with AsyncVideoGen(
            api_key=KEY,
            base_url="http://service.invalid:8123",
            max_retries=0,
            allow_insecure_http=True,
        ) as client:
            balance = await client.credits.get()
    assert balance.api_available_credits == 7
    assert proxy.lines == ["GET http://service.invalid:8123/v1/credits HTTP/1.1"]


async def test_https_proxy_gets_a_connect(clean_proxy_env: pytest.MonkeyPatch) -> None:
    proxy = RecordingProxy()
    server, port = await raw_server(proxy.handle)
    async with server:
        clean_proxy_env.setenv("https_proxy", f"127.0.0.1:{port}")  # no scheme, lower case
        async with AsyncVideoGen(
            api_key=KEY, base_url="https://api.service.invalid", max_retries=0
        ) as client:
            with pytest.raises(vg.APIConnectionError):
                await client.credits.get()
    assert proxy.lines
    assert proxy.lines[0].startswith("CONNECT api.service.invalid:443 ")


@pytest.mark.parametrize("how", ["no_proxy", "loopback"])
async def test_proxy_is_skipped_by_no_proxy_or_for_loopback(
    how: str, clean_proxy_env: pytest.MonkeyPatch
) -> None:
    proxy = RecordingProxy()
    server, port = await raw_server(proxy.handle)

    async def handler(request: web.Request) -> web.StreamResponse:
        return web.Response(body=envelope({"api_available_credits": 3, "api_total_credits": 3}))

    async with server, serve(handler) as base:
        clean_proxy_env.setenv("HTTP_PROXY", f"http://127.0.0.1:{port}")
        if how == "no_proxy":
            clean_proxy_env.setenv("NO_PROXY", "example.com,127.0.0.1")
        async with AsyncVideoGen(api_key=KEY, base_url=base) as client:
            balance = await client.credits.get()
    assert balance.api_available_credits == 3
    assert proxy.lines == []


@pytest.mark.parametrize(
    ("host", "proxied"),
    [
        ("localhost", False),
        ("api.localhost", False),  # plain http is allowed to it: it must not reach a proxy
        ("127.0.0.2", False),
        ("[::1]", False),
        ("[::ffff:127.0.0.1]", False),
        ("[::ffff:10.0.0.5]", True),
        ("localhost.example.com", True),
    ],
)
def test_the_proxy_rule_and_the_plain_http_rule_agree_on_this_machine(
    host: str, proxied: bool, clean_proxy_env: pytest.MonkeyPatch
) -> None:
    clean_proxy_env.setenv("HTTP_PROXY", "http://proxy.invalid:3128")
    url = f"http://{host}:8080"
    assert (proxy_for(url) is not None) is proxied
    try:
        AsyncVideoGen(api_key=KEY, base_url=url)
    except vg.ConfigurationError:
        insecure_refused = True
    else:
        insecure_refused = False
    assert insecure_refused is proxied


@pytest.mark.parametrize("method", ["get", "create"])
async def test_a_silent_tls_handshake_is_bounded_and_a_create_never_sent(method: str) -> None:
    """The TCP connection is accepted but the TLS handshake never answered."""
    accepted = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal accepted
        accepted += 1
        writers.append(writer)
        try:
            await reader.read()  # read the ClientHello and say nothing, until the client leaves
        finally:
            writer.close()

    writers: list[asyncio.StreamWriter] = []
    server, port = await raw_server(handle)
    async with server:
        timeout = Timeout(connect=0.3, read=5.0, total=3.0)
        async with AsyncVideoGen(
            api_key=KEY, base_url=f"https://127.0.0.1:{port}", timeout=timeout, max_retries=1
        ) as client:
            call = client.tasks.get("t1") if method == "get" else client.tasks.create(PROMPT)
            with anyio.fail_after(15), pytest.raises(vg.APITimeoutError) as caught:
                await call
        for writer in writers:
            writer.close()
    assert accepted == 2  # retried once: the request never left
    assert caught.value.request_may_have_taken_effect is False


async def test_trust_env_false_never_uses_the_proxy(clean_proxy_env: pytest.MonkeyPatch) -> None:
    proxy = RecordingProxy()
    server, port = await raw_server(proxy.handle)
    async with server:
        clean_proxy_env.setenv("HTTP_PROXY", f"http://127.0.0.1:{port}")
        clean_proxy_env.setenv("ALL_PROXY", f"http://127.0.0.1:{port}")
        async with AsyncVideoGen(
            api_key=KEY,
            base_url="http://service.invalid:8123",
            max_retries=0,
            trust_env=False,
            allow_insecure_http=True,
        ) as client:
            with anyio.fail_after(30), pytest.raises(vg.APIConnectionError):
                await client.credits.get()  # direct: the name does not resolve
    assert proxy.lines == []


async def test_a_socks_proxy_is_ignored_with_a_warning(
    clean_proxy_env: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        return web.Response(body=envelope({"api_available_credits": 4, "api_total_credits": 4}))

    async with serve(handler) as base:
        clean_proxy_env.setenv("HTTP_PROXY", "socks5://127.0.0.1:1080")
        # A name for loopback that is not "localhost" itself, so the proxy rule applies.
        host_base = base.replace("127.0.0.1", "127.0.0.1.nip.invalid")
        with caplog.at_level(logging.WARNING, logger="videogen_async"):
            client = AsyncVideoGen(api_key=KEY, base_url=host_base, allow_insecure_http=True)
        await client.aclose()
    assert any("only http(s) proxies" in r.getMessage() for r in caplog.records)


# ---------------------------------------------------------------------------------------------
# Retry loops do not stack
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("what", ["task", "project", "script"])
async def test_wait_loops_own_the_backoff_alone(what: str) -> None:
    """Each poll of a wait is one request: the client's own retries do not multiply them."""
    requests = 0

    async def handler(request: web.Request) -> web.StreamResponse:
        nonlocal requests
        requests += 1
        return web.Response(status=503, body=json.dumps({"code": 503, "message": "x"}).encode())

    policy = PollPolicy(min_interval=0.01, max_interval=0.02)
    backoff = BackoffPolicy(initial_delay=0.01, max_delay=0.02, max_consecutive_failures=3)
    async with serve(handler) as base:
        async with AsyncVideoGen(
            api_key=KEY, base_url=base, max_retries=2, poll_policy=policy, backoff=backoff
        ) as client:
            if what == "task":
                call = client.tasks.wait("t1", timeout=20)
            elif what == "project":
                call = client.projects.wait("p1", timeout=20)
            else:
                call = client.projects.wait_for_script("p1", timeout=20)
            with anyio.fail_after(20), pytest.raises(vg.ServerError):
                await call
    assert requests == 3
