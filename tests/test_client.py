"""Client construction, configuration, session ownership and secrecy of the key."""

from __future__ import annotations

import gc
import logging
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aioresponses import aioresponses

import videogen_async as vg
from videogen_async import AsyncVideoGen, ConfigurationError

from .helpers import BASE, KEY, envelope, task_data


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VIDEOGEN_API_KEY", raising=False)
    monkeypatch.delenv("VIDEOGEN_BASE_URL", raising=False)


def test_missing_key_is_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="VIDEOGEN_API_KEY"):
        AsyncVideoGen(base_url=BASE)


def test_missing_base_url_is_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="VIDEOGEN_BASE_URL"):
        AsyncVideoGen(api_key=KEY)


def test_environment_is_read_and_arguments_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VIDEOGEN_API_KEY", "env-key")
    monkeypatch.setenv("VIDEOGEN_BASE_URL", "https://env.example.com/")
    client = AsyncVideoGen()
    assert client.base_url == "https://env.example.com"
    assert client._transport._api_key == "env-key"
    client = AsyncVideoGen(api_key=KEY, base_url="https://arg.example.com")
    assert client.base_url == "https://arg.example.com"
    assert client._transport._api_key == KEY


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("ftp://x.example.com", "http"),
        ("not a url", "http"),
        ("https://user:pw@x.example.com", "user info"),
        ("http://api.example.com", "plain http"),
        ("https://x.example.com/?a=1", "query"),
    ],
)
def test_bad_base_urls(url: str, match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        AsyncVideoGen(KEY, url)


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8080", "http://localhost:1", "http://[::1]:9", "http://a.localhost"]
)
def test_plain_http_allowed_to_loopback(url: str) -> None:
    AsyncVideoGen(KEY, url)


def test_plain_http_elsewhere_when_explicitly_allowed() -> None:
    assert AsyncVideoGen(KEY, "http://10.0.0.5", allow_insecure_http=True).base_url


@pytest.mark.parametrize("key", ["  ", "a b\n", "k\r\nX-Evil: 1"])
def test_bad_keys_rejected_without_echo(key: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        AsyncVideoGen(key, BASE)
    assert key.strip() == "" or key not in str(info.value)


@pytest.mark.parametrize("bad", [-1, True, 1.5])
def test_bad_max_retries(bad: Any) -> None:
    with pytest.raises(ConfigurationError, match="max_retries"):
        AsyncVideoGen(KEY, BASE, max_retries=bad)


def test_bad_timeout() -> None:
    with pytest.raises(ConfigurationError, match="timeout"):
        AsyncVideoGen(KEY, BASE, timeout=0)


def test_authorization_in_default_headers_refused() -> None:
    with pytest.raises(ConfigurationError, match="Authorization"):
        AsyncVideoGen(KEY, BASE, default_headers={"authorization": "x"})


def test_timeout_of_number() -> None:
    assert vg.Timeout.of(30) == vg.Timeout(connect=10.0, read=30.0, total=30.0)
    assert vg.Timeout.of(2) == vg.Timeout(connect=2.0, read=2.0, total=2.0)
    assert vg.Timeout.of(None) == vg.Timeout(None, None, None)


def test_repr_never_shows_key() -> None:
    client = AsyncVideoGen(KEY, BASE)
    for text in (repr(client), str(client), repr(client._transport), repr(client.tasks)):
        assert KEY not in text
    assert BASE in repr(client)


async def test_key_absent_from_errors_and_logs(caplog: Any) -> None:
    with aioresponses() as mock:
        mock.get(f"{BASE}/v1/credits", status=401, payload=envelope(code=401, message="bad key"))
        with caplog.at_level(logging.DEBUG, logger="videogen_async"):
            async with AsyncVideoGen(KEY, BASE) as client:
                with pytest.raises(vg.AuthenticationError) as info:
                    await client.credits.get()
    err = info.value
    assert KEY not in str(err)
    assert KEY not in repr(err)
    assert KEY not in repr(err.headers)
    assert KEY not in caplog.text


def test_with_options_view_shares_pool_and_keeps_settings() -> None:
    client = AsyncVideoGen(KEY, BASE, max_retries=3)
    view = client.with_options(timeout=5, max_retries=0)
    assert view.max_retries == 0
    assert view.timeout == vg.Timeout.of(5)
    assert client.max_retries == 3
    assert view._transport.owner is client._transport.owner
    assert view.with_options().timeout == view.timeout
    with pytest.raises(ConfigurationError):
        client.with_options(max_retries=-1)
    with pytest.raises(ConfigurationError):
        client.with_options(timeout=-3)


async def _app_server(aiohttp_handler: Any) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_get("/v1/credits", aiohttp_handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}"


async def _credits(request: web.Request) -> web.Response:
    assert request.headers["Authorization"] == f"Bearer {KEY}"
    return web.json_response(envelope({"api_available_credits": 7, "api_total_credits": 8}))


async def test_real_http_session_created_lazily_and_closed() -> None:
    runner, url = await _app_server(_credits)
    try:
        client = AsyncVideoGen(KEY, url)
        assert client._transport.owner._session is None
        async with client:
            balance = await client.credits.get()
            session = client._transport.owner._session
            assert session is not None
            assert not session.closed
        assert balance.api_available_credits == 7
        assert session.closed
        assert client.is_closed
        await client.aclose()  # idempotent
        with pytest.raises(RuntimeError, match="closed"):
            await client.credits.get()
    finally:
        await runner.cleanup()


async def test_callers_session_is_used_and_never_closed() -> None:
    runner, url = await _app_server(_credits)
    try:
        async with aiohttp.ClientSession() as session:
            async with AsyncVideoGen(KEY, url, session=session) as client:
                await client.credits.get()
                assert client._transport.owner.get() is session
            assert not session.closed
            async with session.get(
                f"{url}/v1/credits", headers={"Authorization": f"Bearer {KEY}"}
            ) as r:
                assert r.status == 200
    finally:
        await runner.cleanup()


async def test_view_aclose_does_not_close_parent() -> None:
    runner, url = await _app_server(_credits)
    try:
        async with AsyncVideoGen(KEY, url) as client:
            view = client.with_options(max_retries=0)
            await view.credits.get()
            await view.aclose()
            assert (await client.credits.get()).api_total_credits == 8
    finally:
        await runner.cleanup()


async def test_many_concurrent_requests_share_one_session() -> None:
    import asyncio

    runner, url = await _app_server(_credits)
    try:
        async with AsyncVideoGen(KEY, url, connection_limit=4) as client:
            results = await asyncio.gather(*(client.credits.get() for _ in range(50)))
            assert len(results) == 50
            assert client._transport.owner.open_connections == 0
    finally:
        await runner.cleanup()
    gc.collect()


def test_connection_limit_validated() -> None:
    with pytest.raises(ConfigurationError):
        AsyncVideoGen(KEY, BASE, connection_limit=0)


def test_log_env_switch_attaches_handler(monkeypatch: pytest.MonkeyPatch) -> None:
    from videogen_async._observe import _logging

    monkeypatch.setattr(_logging, "_configured", False)
    monkeypatch.setenv("VIDEOGEN_LOG", "debug")
    logger = logging.getLogger("videogen_async")
    before = list(logger.handlers)
    try:
        AsyncVideoGen(KEY, BASE)
        added = [h for h in logger.handlers if h not in before]
        assert len(added) == 1
        assert logger.level == logging.DEBUG
        AsyncVideoGen(KEY, BASE)
        assert len([h for h in logger.handlers if h not in before]) == 1
    finally:
        for h in logger.handlers[:]:
            if h not in before:
                logger.removeHandler(h)
        logger.setLevel(logging.NOTSET)


async def test_cancelled_create_still_reports_the_created_id(caplog: Any) -> None:
    import asyncio

    from .helpers import created_task

    arrived = asyncio.Event()
    release = asyncio.Event()

    async def slow_create(request: web.Request) -> web.Response:
        arrived.set()
        await release.wait()
        return web.json_response(envelope(created_task("t-charged")))

    app = web.Application()
    app.router.add_post("/v1/video/videomodel-2", slow_create)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        # The level is held until the client has closed: the warning is logged then.
        with caplog.at_level(logging.WARNING, logger="videogen_async"):
            async with AsyncVideoGen(KEY, url) as client:
                job = asyncio.ensure_future(client.tasks.create("a cat"))
                await asyncio.wait_for(arrived.wait(), 10)
                job.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await job  # the caller's cancellation is not delayed
                release.set()
                # leaving the block waits for the in-flight create before closing the pool
        assert "t-charged" in caplog.text
        assert "cancelled while POST /v1/video/videomodel-2" in caplog.text
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("host", ["[::ffff:127.0.0.1]", "[::ffff:7f00:5]", "[0:0:0:0:0:0:0:1]"])
def test_plain_http_to_loopback_in_ipv6_forms(host: str) -> None:
    AsyncVideoGen(KEY, f"http://{host}:8080")


def test_plain_http_to_mapped_public_address_refused() -> None:
    with pytest.raises(ConfigurationError, match="plain http"):
        AsyncVideoGen(KEY, "http://[::ffff:10.0.0.5]:8080")


@pytest.mark.parametrize("prefix", ["", "/", "/api", "/api/", "/a%20b/v"])
async def test_request_urls_keep_the_base_urls_host_and_path(prefix: str) -> None:
    seen: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(request.raw_path)
        if request.path.endswith("/v1/credits"):
            return web.json_response(
                envelope({"api_available_credits": 5, "api_total_credits": 10})
            )
        return web.json_response(envelope(task_data(request.query["task_id"])))

    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        async with AsyncVideoGen(KEY, f"http://127.0.0.1:{port}{prefix}") as client:
            credits = await client.credits.get()
            task = await client.tasks.get("tsk_A-1.b~c")
    finally:
        await runner.cleanup()
    base = prefix.rstrip("/")
    assert seen == [f"{base}/v1/credits", f"{base}/v1/tasks?task_id=tsk_A-1.b~c"]
    assert credits.api_available_credits == 5
    assert task.task_id == "tsk_A-1.b~c"
