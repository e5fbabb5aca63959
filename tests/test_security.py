"""Security: the API key never leaks, and nothing from the network can make the client misbehave.

* The key is never in a repr, a log record (DEBUG included, every logger), an exception (its
  text, repr, attributes, causes, and its traceback even with the local variables of every
  frame) or the command line's output, over a full run against the sandbox: every resource
  call, the errors, the waits and the gathers.
* The ``Authorization`` header never goes to another origin: API calls do not follow redirects
  (a 302/307 to another host reaches nobody), and downloads (``Transport.stream``, which does
  follow redirects) never send it at all, to the media host or wherever it redirects.
* A plain ``http://`` base URL to a host that is not loopback is refused (``ConfigurationError``)
  unless ``allow_insecure_http=True``; the loopback check and the HTTP stack agree on the host.
* Response bodies are bounded before they are parsed (``max_body_size``): a 100 MB body with or
  without ``Content-Length``, or a gzip bomb that inflates to 100 MB, is refused after at most
  the limit has been read, and the server is cut off long before it has sent it all.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import socket
import threading
import traceback
import zlib
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import anyio
import pytest
import yarl
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import videogen_async as vg
from videogen_async import AsyncVideoGen, ConfigurationError, PollPolicy
from videogen_async.testing import ProjectTiming, SandboxServer

from .hostile._behaviours import ECHOES, Misbehaviour
from .hostile._behaviours import KEY as HOSTILE_KEY
from .hostile._behaviours import raw as hostile_raw
from .hostile._paths import PATHS as HOSTILE_PATHS
from .hostile._scan import assert_no_key as assert_no_hostile_key
from .hostile._server import serve as serve_hostile
from .hostile.test_bodies import use as use_hostile

_T = TypeVar("_T")

KEY = "vg-sec-SECRET-0123456789abcdef"
WRONG_KEY = "vg-sec-WRONG-fedcba9876543210"
SECRETS = (KEY, WRONG_KEY)
FAST = PollPolicy(min_interval=0.01, max_interval=0.05, dense_interval=0.01, coalesce=0.001)


# --------------------------------------------------------------------------------------------
# Leak scanning
# --------------------------------------------------------------------------------------------


class Scanner:
    """Collects every text a user could see (or log, or send to an error tracker)."""

    def __init__(self) -> None:
        self.texts: list[tuple[str, str]] = []
        self.errors: list[BaseException] = []

    def add(self, where: str, value: Any) -> None:
        self.texts.append((where, value if isinstance(value, str) else repr(value)))

    def error(self, exc: BaseException) -> None:
        """An exception, with its causes: text, repr, traceback and attributes."""
        seen: set[int] = set()
        stack = [exc]
        self.errors.append(exc)
        while stack:
            current = stack.pop()
            if id(current) in seen:
                continue
            seen.add(id(current))
            name = type(current).__name__
            self.add(f"str({name})", str(current))
            self.add(f"repr({name})", repr(current))
            self.add(f"args({name})", repr(current.args))
            self.add(f"vars({name})", repr(vars(current)))
            self.add(f"traceback({name})", "".join(traceback.format_exception(current)))
            # As error trackers, debuggers and ``pytest --showlocals`` see it: with the local
            # variables of every frame (the SDK's and aiohttp's) that the error went through.
            with_locals = traceback.TracebackException.from_exception(current, capture_locals=True)
            self.add(f"traceback with locals({name})", "".join(with_locals.format()))
            stack.extend(e for e in (current.__cause__, current.__context__) if e is not None)
            stack.extend(getattr(current, "exceptions", ()))

    async def expect(
        self, kind: type[BaseException] | tuple[type[BaseException], ...], call: Any
    ) -> BaseException:
        """Await ``call`` expecting it to raise ``kind``; scan the error."""
        with pytest.raises(kind) as info:
            await call
        self.error(info.value)
        return info.value

    async def value(self, call: Any) -> Any:
        """Await ``call`` and scan the repr of what it returned."""
        result = await call
        self.add(f"result {type(result).__name__}", result)
        return result

    def records(self, records: list[logging.LogRecord]) -> None:
        formatter = logging.Formatter("%(name)s %(levelname)s %(message)s")
        for record in records:
            self.add(f"log {record.name}", formatter.format(record))
            self.add(f"log args {record.name}", repr(record.args))
            if record.exc_info and record.exc_info[1] is not None:
                self.error(record.exc_info[1])

    def assert_clean(self, *, minimum: int) -> None:
        assert len(self.texts) >= minimum, len(self.texts)  # the run did produce output
        for where, text in self.texts:
            for secret in SECRETS:
                assert secret not in text, f"the key leaked in {where}: {text[:300]}"


@pytest.fixture
def debug_logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """Every logger at DEBUG (the SDK's, the sandbox's, aiohttp's, asyncio's)."""
    caplog.set_level(logging.DEBUG)
    for name in ("videogen_async", "videogen_async.testing", "aiohttp", "asyncio"):
        caplog.set_level(logging.DEBUG, logger=name)
    return caplog


async def test_the_key_never_leaks_in_a_full_run(
    debug_logs: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    scan = Scanner()
    timing = ProjectTiming(preparing_media=1.0, analyzing=1.0, generating_script=1.0)
    async with SandboxServer(
        api_key=KEY, time_scale=0.002, seed=11, project_timing=timing, credits=10_000
    ) as server:
        async with server.client(poll_policy=FAST, max_retries=2) as client:
            scan.add("repr(client)", repr(client))
            scan.add("repr(transport)", repr(client._transport))
            scan.add("repr(view)", repr(client.with_options(max_retries=0)))
            scan.add("repr(namespaces)", (client.tasks, client.projects, client.credits))
            scan.add("repr(server)", repr(server))

            # --- every resource call ----------------------------------------------------
            await scan.value(client.credits.get())
            created = await scan.value(client.tasks.create("a paper boat", duration=5))
            await scan.value(client.tasks.get(created.task_id))
            done = await scan.value(client.tasks.wait(created.task_id, timeout=10))
            await scan.value(client.download(done, tmp_path))
            failing = await scan.value(client.tasks.create("sandbox-fail please"))
            others = [(await client.tasks.create(f"boat {i}")).task_id for i in range(3)]
            async with client.tasks.gather_until_done(
                [*others, failing.task_id, "no-such-task"], return_exceptions=True, timeout=10
            ) as results:
                async for item in results:
                    if isinstance(item, BaseException):
                        scan.error(item)
                    else:
                        scan.add("gathered", item)
            project = await scan.value(
                client.projects.create(
                    "https://cdn.example.com/ad.mp4",
                    ["https://cdn.example.com/p.png"],
                    mode="manual",
                )
            )
            await scan.value(client.projects.get(project.project_id))
            await scan.value(client.projects.wait_for_script(project.project_id, timeout=10))
            await scan.value(client.projects.create_videos(project.project_id, out_number=1))
            await scan.value(client.projects.wait(project.project_id, timeout=10))

            # --- errors -------------------------------------------------------------------
            await scan.expect(vg.InvalidRequestError, client.tasks.create("x", duration=99))
            await scan.expect(vg.NotFoundError, client.tasks.get("no-such-task"))
            await scan.expect(vg.NotFoundError, client.projects.get("no-such-project"))
            await scan.expect(
                vg.TaskFailedError, client.tasks.wait(failing.task_id, raise_on_failure=True)
            )
            # Made to end far ahead at once: a create then a reschedule could find it ended on a
            # busy machine (its simulated minute is a tenth of a second here).
            (slow,) = server.create_tasks(1, prompt="slow", finish_in=10_000)
            await scan.expect(vg.WaitTimeoutError, client.tasks.wait(slow, timeout=0.05))
            await scan.expect(
                vg.WaitTimeoutError,
                _drain(client.tasks.gather_until_done([slow], timeout=0.05)),
            )
            await scan.expect(
                vg.NotFoundError, _drain(client.tasks.gather_until_done(["no-such-task"]))
            )
            await scan.expect(
                vg.MediaStorageError,
                client.projects.create("https://cdn.invalid/ad.mp4", ["https://cdn.example.com/p"]),
            )
            doomed = await client.projects.create(
                "https://cdn.example.com/sandbox-fail.mp4", ["https://cdn.example.com/p.png"]
            )
            await scan.expect(
                vg.ProjectFailedError, client.projects.wait_for_script(doomed.project_id)
            )
            server.faults.set("GET /v1/credits", error_rate=1.0, retry_after=0)
            await scan.expect(vg.ServerError, client.credits.get())
            server.faults.set("GET /v1/credits", html_rate=1.0)
            await scan.expect(vg.ServerError, client.credits.get())
            server.faults.set("GET /v1/credits", rate_limit_rate=1.0, retry_after=0)
            await scan.expect(vg.RateLimitError, client.credits.get())
            server.faults.clear()
            for fault in ("drop_before_rate", "drop_after_rate", "error_rate"):
                server.faults.set("POST /v1/video/videomodel-2", **{fault: 1.0})
                error = await scan.expect(vg.VideoGenError, client.tasks.create("dropped"))
                assert error.request_may_have_taken_effect
            server.faults.clear()
            server.set_credits(available=0)
            await scan.expect(vg.InsufficientCreditsError, client.tasks.create("broke"))

            # --- a wrong key, and a cancelled create (its id is logged) -------------------
            async with AsyncVideoGen(WRONG_KEY, server.base_url) as wrong:
                scan.add("repr(wrong)", repr(wrong))
                await scan.expect(vg.AuthenticationError, wrong.credits.get())
                await scan.expect(vg.AuthenticationError, wrong.tasks.create("x"))
            server.set_credits(available=10_000)
            server.faults.set("POST /v1/video/videomodel-2", latency=0.2)
            job = asyncio.ensure_future(client.tasks.create("cancelled"))
            with anyio.fail_after(5):
                await server.wait_until(lambda: server.stats().in_flight > 0)
            job.cancel()
            await scan.expect(asyncio.CancelledError, job)
    scan.records(debug_logs.records)
    assert any("the service created" in r.getMessage() for r in debug_logs.records)
    assert any(r.levelno == logging.DEBUG for r in debug_logs.records)
    scan.assert_clean(minimum=200)


async def _drain(results: Any) -> None:
    async with results as stream:
        async for _ in stream:
            pass


# --------------------------------------------------------------------------------------------
# The command line
# --------------------------------------------------------------------------------------------


class ThreadedSandbox:
    """A sandbox in a thread of its own: ``main([...])`` runs ``asyncio.run`` itself."""

    def __init__(self, **options: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.options = options
        self.server: SandboxServer | None = None

    def run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=30)

    def __enter__(self) -> SandboxServer:
        self.thread.start()
        self.server = self.run(SandboxServer(**self.options).start())
        return self.server

    def __exit__(self, *exc: object) -> None:
        if self.server is not None:
            self.run(self.server.aclose())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


def test_the_key_never_leaks_from_the_command_line(
    debug_logs: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    cli = pytest.importorskip("videogen_async._cli")
    scan = Scanner()
    with ThreadedSandbox(api_key=KEY, time_scale=0.002, seed=5) as server:
        monkeypatch.setenv("VIDEOGEN_BASE_URL", server.base_url)
        monkeypatch.setenv("VIDEOGEN_API_KEY", KEY)
        monkeypatch.delenv("VIDEOGEN_LOG", raising=False)
        runs = [
            ["--debug", "credits"],
            ["--debug", "--json", "create", "a fox", "--wait"],
            ["--debug", "create", "sandbox-fail", "--wait"],
            ["--debug", "status", "no-such-task"],
            ["--debug", "project", "get", "no-such-project"],
            ["--debug", "create", "x", "--duration", "99"],
            ["--debug", "--api-key", KEY, "credits"],
            ["--debug", "--api-key", WRONG_KEY, "credits"],
            ["--debug", "--api-key", WRONG_KEY, "create", "x"],
        ]
        codes = []
        for argv in runs:
            capsys.readouterr()
            codes.append(cli.main(argv))
            out, err = capsys.readouterr()
            scan.add(f"stdout {argv}", out)
            scan.add(f"stderr {argv}", err)
        task_ids = list(server.task_ids)
        capsys.readouterr()
        codes.append(cli.main(["--debug", "download", "--to", str(tmp_path), task_ids[0]]))
        out, err = capsys.readouterr()
        scan.add("download", out + err)
    assert codes[0] == 0
    assert codes[-3] == 4  # the wrong key: refused (exit 4), said without the key
    scan.records(debug_logs.records)
    scan.assert_clean(minimum=20)


# --------------------------------------------------------------------------------------------
# The key never goes to another origin
# --------------------------------------------------------------------------------------------


class App:
    """A throwaway aiohttp.web server that records the headers of every request it gets."""

    def __init__(self, routes: Callable[[App, web.Application], None]) -> None:
        self.seen: list[tuple[str, str, dict[str, str]]] = []
        self.app = web.Application(middlewares=[self._record])
        routes(self, self.app)
        self.runner = web.AppRunner(self.app, access_log=None)
        self.url = ""

    @web.middleware
    async def _record(self, request: web.Request, handler: Any) -> web.StreamResponse:
        self.seen.append((request.method, request.path, dict(request.headers)))
        return await handler(request)

    async def __aenter__(self) -> App:
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self.runner.addresses[0][1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.runner.cleanup()

    def authorizations(self) -> list[str]:
        return [h["Authorization"] for _, _, h in self.seen if "Authorization" in h]


@pytest.fixture
async def elsewhere() -> AsyncIterator[App]:
    """Another origin: answers anything with an envelope (and would gladly take a key)."""

    def routes(app: App, web_app: web.Application) -> None:
        async def anything(request: web.Request) -> web.Response:
            data = {"api_available_credits": 1, "api_total_credits": 1}
            return web.json_response({"code": 200, "trace_id": "t", "message": None, "data": data})

        async def video(request: web.Request) -> web.Response:
            return web.Response(body=b"\0\0\0\x18ftypmp42" + b"\0" * 1000, content_type="video/mp4")

        web_app.router.add_get("/video.mp4", video)
        web_app.router.add_route("*", "/{tail:.*}", anything)

    async with App(routes) as app:
        yield app


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
async def test_api_redirects_to_another_origin_are_not_followed(
    elsewhere: App, status: int
) -> None:
    def routes(app: App, web_app: web.Application) -> None:
        async def moved(request: web.Request) -> web.Response:
            return web.Response(
                status=status, headers={"Location": elsewhere.url + request.path_qs}
            )

        web_app.router.add_route("*", "/{tail:.*}", moved)

    async with App(routes) as api:
        async with AsyncVideoGen(KEY, api.url, max_retries=2) as client:
            with pytest.raises(vg.APIResponseError) as read:
                await client.with_options(max_retries=0).credits.get()
            with pytest.raises(vg.APIResponseError) as create:
                await client.tasks.create("a fox")
    assert f"HTTP {status}" in str(read.value)
    assert create.value.request_may_have_taken_effect
    assert elsewhere.seen == [], "a request followed the redirect to another origin"
    # One read, one create (not retried, not re-sent to the new location).
    assert [h.get("Authorization") for _, _, h in api.seen] == [f"Bearer {KEY}"] * 2
    assert KEY not in str(read.value) + str(create.value)


async def test_downloads_never_send_the_key_even_through_redirects(elsewhere: App) -> None:
    def routes(app: App, web_app: web.Application) -> None:
        async def hop(request: web.Request) -> web.Response:
            raise web.HTTPFound(elsewhere.url + "/video.mp4")

        web_app.router.add_get("/hop.mp4", hop)

    async with App(routes) as media, AsyncVideoGen(KEY, "https://api.videogen.test") as client:
        # The transport's stream(): straight to the media host, and through a redirect.
        for url in (elsewhere.url + "/video.mp4", media.url + "/hop.mp4"):
            async with client._transport.stream(url) as response:
                body = b"".join([c async for c in response.iter_chunks()])
            assert response.status_code == 200
            assert body.startswith(b"\0\0\0\x18ftyp")
        seen = len(elsewhere.seen) + len(media.seen)
        assert seen == 3  # video, hop, video
    assert media.authorizations() == []
    assert elsewhere.authorizations() == []


async def test_downloads_from_the_api_origin_never_send_the_key(tmp_path: Path) -> None:
    """The sandbox serves videos from the API's own origin: still no key on a download."""
    async with SandboxServer(api_key=KEY, manual_clock=True, seed=2) as server:
        async with server.client() as client:
            created = await client.tasks.create("a fox")
            server.schedule_task(created.task_id, finish_in=0, outcome="succeeded")
            task = await client.tasks.get(created.task_id)
            target = await client.download(task, tmp_path)
    assert target.stat().st_size > 0
    [media] = [r for r in server.request_log if r.route.startswith("GET /media/")]
    assert media.status == 200  # served without a key (the sandbox never asks for one there)


# --------------------------------------------------------------------------------------------
# Plain http only to loopback
# --------------------------------------------------------------------------------------------


def _non_loopback_address() -> str | None:
    """An address of this machine that is not loopback (no packet is sent to find it)."""
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.1", 9))  # TEST-NET-1: connect() on UDP only picks a route
        address = probe.getsockname()[0]
        if not address.startswith("127."):
            return str(address)
    return None


async def test_plain_http_to_a_non_loopback_host_is_refused_end_to_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    address = _non_loopback_address()
    if address is None:
        pytest.skip("this machine has no non-loopback IPv4 address")
    async with SandboxServer(host="0.0.0.0", api_key=KEY, manual_clock=True) as server:  # noqa: S104
        base = f"http://{address}:{server.port}"
        with pytest.raises(ConfigurationError, match="plain http") as info:
            AsyncVideoGen(KEY, base)
        assert KEY not in str(info.value)
        monkeypatch.setenv("VIDEOGEN_API_KEY", KEY)
        monkeypatch.setenv("VIDEOGEN_BASE_URL", base)
        with pytest.raises(ConfigurationError, match="plain http"):
            AsyncVideoGen()
        assert server.request_log == ()  # nothing was sent
        # Asked for explicitly, it works, over the network interface.
        async with AsyncVideoGen(allow_insecure_http=True) as client:
            balance = await client.credits.get()
        assert balance.api_available_credits == 10_000
        assert len(server.request_log) == 1
        # Loopback over plain http needs no permission.
        async with AsyncVideoGen(KEY, f"http://127.0.0.1:{server.port}") as client:
            await client.credits.get()


HOST_PARTS = [
    "127.0.0.1",
    "localhost",
    "a.localhost",
    "[::1]",
    "evil.example",
    "127.0.0.1.evil.example",
    "localhost.evil.example",
    "0.0.0.0",  # noqa: S104 - a host name to parse, not an interface to bind
    "2130706433",
    "0x7f000001",
    "[::ffff:127.0.0.1]",
    "LOCALHOST",
    "localhost.",
    "@",
    ":",
    ":80",
    "%2F",
    "%00",
    "\\",
    "/",
    "#",
    "?",
    "\t",
    " ",
    ".",
    "[",
    "]",
    "b\u00fccher",
    "-",
    "_",
]


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.sampled_from(["http", "https"]),
    st.lists(st.sampled_from(HOST_PARTS), min_size=1, max_size=4).map("".join),
)
def test_the_host_checked_is_the_host_connected_to(scheme: str, authority: str) -> None:
    """The check parses with urllib; aiohttp connects where yarl says. They must agree: a base
    URL is refused, or yarl parses it to the host the check saw, and plain http only to
    loopback."""
    url = f"{scheme}://{authority}/v1"
    try:
        client = AsyncVideoGen(KEY, url)
    except ConfigurationError:
        return
    parsed = yarl.URL(client.base_url)  # a URL the HTTP stack cannot parse was refused above
    assert parsed.host is not None
    assert _same_host(parsed.host, urlsplit(url).hostname or ""), url
    if scheme == "http":
        assert _loopback_oracle(parsed.host), (url, parsed.host)


def _loopback_oracle(host: str) -> bool:
    """Loopback, judged independently of the SDK: localhost names, 127.0.0.0/8, ::1, and
    IPv4-mapped IPv6 forms of 127.0.0.0/8."""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        packed = ipaddress.ip_address(host).packed
    except ValueError:
        return False
    if len(packed) == 4:
        return packed[0] == 127
    if packed == bytes(15) + b"\x01":
        return True
    return packed[:12] == bytes(10) + b"\xff\xff" and packed[12] == 127


def _same_host(a: str, b: str) -> bool:
    """Whether two spellings name one host (IPv6 forms, IDNA, case, a final dot)."""
    try:
        return ipaddress.ip_address(a) == ipaddress.ip_address(b)
    except ValueError:
        return _wire(a) == _wire(b)


def _wire(host: str) -> str:
    return host.encode("idna").decode("ascii").lower().rstrip(".")


@pytest.mark.parametrize(
    "url",
    [
        "http://[::1]evil.example/v1",
        "http://127.0.0.1[::1]/v1",
        "http://localhost:99999",
        "http://localhost:abc",
        "http://loc\talhost",
        "http://localhost\\@evil.example",
        "http://localhost%2F.evil.example",
        "https://api.example.com:443:1",
        "https://.b\u00fccher.example/v1",
        "https://b\u00fccher..example/v1",
        "https://" + "b\u00fccher" * 20 + ".example/v1",
    ],
)
def test_base_urls_the_http_stack_reads_otherwise_are_refused(url: str) -> None:
    with pytest.raises(ConfigurationError):
        AsyncVideoGen(KEY, url)


# --------------------------------------------------------------------------------------------
# Bodies bounded before they are parsed
# --------------------------------------------------------------------------------------------

HUGE = 100 * 1024 * 1024
LIMIT = 1024 * 1024
CHUNK = b"x" * (64 * 1024)


def _gzip_bomb(size: int) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = b" " * (1 << 20)
    return b"".join(compressor.compress(block) for _ in range(size >> 20)) + compressor.flush()


class Firehose:
    """An API whose every answer would be 100 MB; it counts what it managed to send."""

    def __init__(self) -> None:
        self.sent: list[int] = []
        self.finished = anyio.Event()
        self.bomb = _gzip_bomb(HUGE)

    def routes(self, app: App, web_app: web.Application) -> None:
        async def stream(request: web.Request) -> web.StreamResponse:
            kind = request.query.get("kind") or request.headers.get("X-Kind", "")
            if request.path.endswith("videomodel-2"):
                kind = "length"
            response = web.StreamResponse(headers={"Content-Type": "application/json"})
            if kind == "gzip":
                response.headers["Content-Encoding"] = "gzip"
                response.content_length = len(self.bomb)
                await response.prepare(request)
                await response.write(self.bomb)
                self.sent.append(len(self.bomb))
                self.finished.set()
                return response
            if kind == "length":
                response.content_length = HUGE
            else:
                response.enable_chunked_encoding()
            await response.prepare(request)
            sent = 0
            try:
                while sent < HUGE:
                    await response.write(CHUNK)
                    sent += len(CHUNK)
            except OSError:  # the client hung up (ConnectionResetError and kin)
                pass
            finally:
                self.sent.append(sent)
                self.finished.set()
            return response

        web_app.router.add_route("*", "/{tail:.*}", stream)


@pytest.mark.parametrize("kind", ["length", "chunked", "gzip"])
async def test_a_huge_body_is_refused_without_reading_it(kind: str) -> None:
    firehose = Firehose()
    async with App(firehose.routes) as api:
        headers = {"X-Kind": kind}
        async with AsyncVideoGen(
            KEY, api.url, max_body_size=LIMIT, max_retries=0, default_headers=headers
        ) as client:
            with pytest.raises(vg.APIResponseError, match="limit") as info:
                await client.credits.get()
            with anyio.fail_after(5):
                await firehose.finished.wait()
    assert not info.value.request_may_have_taken_effect
    if kind == "gzip":
        # 100 kB on the wire; what matters is that it was not inflated past the limit
        # (the error says "exceeds", not "not JSON": the body was never parsed).
        assert firehose.sent == [len(firehose.bomb)]
    else:
        # Cut off long before 100 MB (what is sent is the limit plus the socket buffers).
        assert firehose.sent[0] < HUGE // 4, firehose.sent


async def test_a_huge_answer_to_a_create_says_it_may_have_taken_effect() -> None:
    firehose = Firehose()
    async with App(firehose.routes) as api:
        async with AsyncVideoGen(KEY, api.url, max_body_size=LIMIT) as client:
            with pytest.raises(vg.APIResponseError, match="limit") as info:
                await client.tasks.create("a fox")
    assert info.value.request_may_have_taken_effect
    assert len(api.seen) == 1  # and it was not retried


def test_scanner_catches_a_leak() -> None:
    """The scanner itself can fail (a test that cannot fail proves nothing)."""
    scan = Scanner()
    try:
        raise vg.APIConnectionError("boom") from RuntimeError(f"Bearer {KEY}")
    except vg.APIConnectionError as exc:
        scan.error(exc)
    with pytest.raises(AssertionError, match="leaked"):
        scan.assert_clean(minimum=1)


# --------------------------------------------------------------------------------------------
# A traceback printed with its locals, over every request path, from a server that echoes
# --------------------------------------------------------------------------------------------

#: A successful envelope whose data echoes the key in fields that do not parse, or that no
#: model keeps, and no identifier (so that parsing fails after the answer was read), and in
#: the headers.
_ECHO_IN_DATA = hostile_raw(
    "ok-envelope-echoing-data-and-headers",
    200,
    json.dumps(
        {
            "code": 200,
            "message": f"ok {HOSTILE_KEY}",
            "trace_id": HOSTILE_KEY,
            "data": {
                "remaining_credits": HOSTILE_KEY,
                "total_credits": {HOSTILE_KEY: HOSTILE_KEY},
                "echo": [HOSTILE_KEY],
            },
        }
    ),
    headers={"X-Echo-Authorization": f"Bearer {HOSTILE_KEY}", "ETag": f'"{HOSTILE_KEY}"'},
)


def _locals_texts(exc: BaseException) -> list[tuple[str, str]]:
    """Every local variable of every frame of the chain, as a traceback with locals shows it."""
    texts: list[tuple[str, str]] = []
    seen: set[int] = set()
    stack = [exc]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        formatted = traceback.TracebackException.from_exception(current, capture_locals=True)
        texts.append(
            (f"traceback with locals({type(current).__name__})", "".join(formatted.format()))
        )
        for frame in formatted.stack:
            for name, value in (frame.locals or {}).items():
                texts.append((f"local {name} of {frame.name}", value))
        stack.extend(e for e in (current.__cause__, current.__context__) if e is not None)
        stack.extend(getattr(current, "exceptions", ()))
    return texts


#: One echo of each class: the request's headers in an error envelope, in a page (an error
#: and a 200), the key in the answer's headers, in an error's data, and in a success's data.
_LOCALS_ECHOES = [
    *(e for e in ECHOES if str(e).startswith("echo-request-headers") and e.status != 500),
    *(e for e in ECHOES if str(e) in ("in-response-headers", "in-data")),
    _ECHO_IN_DATA,
]


@pytest.mark.parametrize("echo", _LOCALS_ECHOES, ids=str)
async def test_a_traceback_with_locals_never_shows_an_echoed_key(
    echo: Misbehaviour, tmp_path: Path
) -> None:
    """Over every request path: the locals of every frame an error went through (the
    transport's raw answer, the decoded envelope, the parsed data, the download's headers)
    hold no form of the key a server echoed in its body or its headers."""
    raised = 0
    async for server in serve_hostile():
        for path in HOSTILE_PATHS:
            use_hostile(server, path, echo)
            async with AsyncVideoGen(HOSTILE_KEY, server.base_url, max_retries=0) as client:
                try:
                    await path.call(client, server, tmp_path / path.name)
                except vg.VideoGenError as exc:
                    raised += 1
                    _assert_no_key_in_locals(exc)
    assert raised >= len(HOSTILE_PATHS) // 2


def _assert_no_key_in_locals(exc: BaseException) -> None:
    # A function of its own, so that the texts scanned for one error are not themselves a
    # local of the test's frame (which every later traceback passes through).
    texts = _locals_texts(exc)
    assert any(where.startswith("local ") for where, _ in texts)
    assert_no_hostile_key(texts)


def test_the_locals_scan_catches_a_leak() -> None:
    def holds(raw: str) -> None:
        raise vg.APIResponseError("no")

    try:
        holds(f"Bearer {HOSTILE_KEY}")
    except vg.APIResponseError as exc:
        texts = _locals_texts(exc)
    with pytest.raises(AssertionError, match="leaked"):
        assert_no_hostile_key(texts)


async def test_a_timeout_of_ours_inside_a_stream_comes_out_as_it_was(elsewhere: App) -> None:
    # APITimeoutError is a TimeoutError: the stream's network clause must not wrap it again
    # (as "the connection broke", with its message and attributes replaced).
    async with AsyncVideoGen(KEY, "https://api.videogen.test") as client:
        ours = vg.APITimeoutError("GET /video.mp4: no byte within the read timeout")
        with pytest.raises(vg.APITimeoutError) as caught:
            async with client._transport.stream(elsewhere.url + "/video.mp4"):
                raise ours
    assert caught.value is ours
