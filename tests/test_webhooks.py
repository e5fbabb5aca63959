"""Signed webhooks: every signature checked by the ``standardwebhooks`` package, hostile receivers.

The receiver is a real ``aiohttp.web`` server on loopback that verifies each delivery with the
reference implementation of the specification (not the SDK's own code), and misbehaves on
demand: an error status, a redirect to another server, an answer that never comes, a body that
never ends.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime, timezone
from typing import Any

import pytest
from aiohttp import web

from videogen_async import (
    InvalidRequestError,
    LedgerEntry,
    WebhookDeliveryError,
    WebhookVerificationError,
    verify_webhook,
    webhook,
)
from videogen_async._http._webhooks import message_id, sign
from videogen_async.testing import SandboxServer

standardwebhooks = pytest.importorskip(
    "standardwebhooks", reason="pip install standardwebhooks (in the test extra)"
)

SECRET = "whsec_" + base64.b64encode(os.urandom(32)).decode()


def entry(key: str, state: str = "succeeded", request: dict[str, Any] | None = None) -> LedgerEntry:
    """A terminal ledger entry, as a dispatch hands it to its ``deliver``."""
    finished = datetime(2026, 11, 25, 12, 0, tzinfo=timezone.utc)
    return LedgerEntry(key, state, task_id=f"t-{key}", request=request or {}, finished_at=finished)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Receiver:
    """A loopback server whose answer each test sets; it keeps every request it was sent."""

    def __init__(self) -> None:
        self.handler: Handler = self.verify
        self.seen: list[tuple[dict[str, str], bytes]] = []
        self.verified: list[Any] = []
        self.url = ""
        self.arrived = asyncio.Event()

    async def verify(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        try:
            payload = standardwebhooks.Webhook(SECRET).verify(body, dict(request.headers))
        except standardwebhooks.WebhookVerificationError:
            return web.Response(status=400)
        self.verified.append(payload)
        return web.Response(status=204)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.seen.append((dict(request.headers), await request.read()))
        self.arrived.set()
        return await self.handler(request)


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[], Awaitable[Receiver]]]:
    runners: list[web.AppRunner] = []

    async def start() -> Receiver:
        receiver = Receiver()
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", receiver._handle)
        runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        receiver.url = f"http://127.0.0.1:{runner.addresses[0][1]}/hooks/video"
        return receiver

    yield start
    for runner in runners:
        await runner.cleanup()


async def test_each_delivery_checks_with_the_reference_implementation(serve: Any) -> None:
    receiver = await serve()
    deliver = webhook(receiver.url, SECRET)
    try:
        for index, state in enumerate(["succeeded", "failed", "error"]):
            await deliver(entry(f"order-{index}", state, {"prompt": "café ✓ \u2028"}))
    finally:
        await deliver.aclose()
    assert [p["data"]["key"] for p in receiver.verified] == ["order-0", "order-1", "order-2"]
    assert [p["type"] for p in receiver.verified] == [
        "video.succeeded",
        "video.failed",
        "video.error",
    ]
    assert receiver.verified[0]["data"]["request"]["prompt"] == "café ✓ \u2028"
    headers, _ = receiver.seen[0]
    assert headers["webhook-id"] == message_id(entry("order-0"))
    assert "Authorization" not in headers


async def test_a_tampered_delivery_is_rejected_by_both_implementations(serve: Any) -> None:
    receiver = await serve()
    deliver = webhook(receiver.url, SECRET)
    try:
        await deliver(entry("order-1"))
    finally:
        await deliver.aclose()
    headers, body = receiver.seen[0]
    assert verify_webhook(body, headers, SECRET)["data"]["key"] == "order-1"
    tampered = body.replace(b"order-1", b"order-2")
    with pytest.raises(standardwebhooks.WebhookVerificationError):
        standardwebhooks.Webhook(SECRET).verify(tampered, headers)
    with pytest.raises(WebhookVerificationError, match="no signature matches"):
        verify_webhook(tampered, headers, SECRET)


def test_verify_accepts_what_the_reference_implementation_signs() -> None:
    body = json.dumps({"type": "video.succeeded", "data": {"key": "k"}})
    now = datetime.now(timezone.utc)
    signature = standardwebhooks.Webhook(SECRET).sign("msg_1", now, body)
    headers = {
        "Webhook-Id": "msg_1",
        "Webhook-Timestamp": str(int(now.timestamp())),
        "Webhook-Signature": f"v1,bm90IGl0 {signature}",
    }
    assert verify_webhook(body, headers, SECRET)["data"] == {"key": "k"}


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"webhook-signature": None}, "missing"),
        ({"webhook-id": ""}, "missing"),
        ({"webhook-timestamp": "soon"}, "not a number"),
        ({"webhook-timestamp": "1"}, "outside the tolerance"),
        ({"webhook-signature": "v1"}, "no signature matches"),
        ({"webhook-signature": "v1,,,, v2,é ,"}, "no signature matches"),
        ({"webhook-signature": "v1,é"}, "no signature matches"),
    ],
)
def test_malformed_headers_raise_the_verification_error(
    change: dict[str, str | None], reason: str
) -> None:
    body = b'{"data": {}}'
    stamp = int(datetime.now(timezone.utc).timestamp())
    key = base64.b64decode(SECRET.removeprefix("whsec_"))
    headers = {
        "webhook-id": "msg_1",
        "webhook-timestamp": str(stamp),
        "webhook-signature": sign(key, "msg_1", stamp, body),
    }
    assert verify_webhook(body, headers, SECRET) == {"data": {}}
    for name, value in change.items():
        if value is None:
            del headers[name]
        else:
            headers[name] = value
    with pytest.raises(WebhookVerificationError, match=reason):
        verify_webhook(body, headers, SECRET)


def test_a_signed_body_that_is_not_json_is_refused() -> None:
    stamp = int(datetime.now(timezone.utc).timestamp())
    key = base64.b64decode(SECRET.removeprefix("whsec_"))
    headers = {
        "webhook-id": "m",
        "webhook-timestamp": str(stamp),
        "webhook-signature": sign(key, "m", stamp, b"\xff"),
    }
    with pytest.raises(WebhookVerificationError, match="not JSON"):
        verify_webhook(b"\xff", headers, SECRET)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"url": "ftp://example.com/hook"}, "url"),
        ({"url": "https:///no-host"}, "url"),
        ({"url": "example.com/hook"}, "url"),
        ({"url": "https://example.com/a b"}, "url"),
        ({"url": 42}, "url"),
        ({"secret": "not-a-secret"}, "secret"),
        ({"secret": "whsec_!!!"}, "secret"),
        ({"secret": "whsec_" + base64.b64encode(b"short").decode()}, "secret"),
        ({"timeout": 0}, "timeout"),
        ({"headers": {"webhook-signature": "v1,x"}}, "headers"),
    ],
)
async def test_bad_input_is_refused_before_anything_is_sent(
    serve: Any, kwargs: dict[str, Any], field: str
) -> None:
    receiver = await serve()
    options: dict[str, Any] = {"url": receiver.url, "secret": SECRET, **kwargs}
    with pytest.raises(InvalidRequestError) as caught:
        webhook(options.pop("url"), options.pop("secret"), **options)
    assert caught.value.field == field
    assert receiver.seen == []


async def test_an_error_status_is_a_failed_delivery_with_a_bounded_excerpt(serve: Any) -> None:
    receiver = await serve()

    async def fail(request: web.Request) -> web.StreamResponse:
        return web.Response(status=500, text="boom " * 10_000)

    receiver.handler = fail
    deliver = webhook(receiver.url, SECRET)
    try:
        with pytest.raises(WebhookDeliveryError) as caught:
            await deliver(entry("k"))
    finally:
        await deliver.aclose()
    assert caught.value.status_code == 500
    assert len(str(caught.value)) < 1000


async def test_a_redirect_is_never_followed(serve: Any) -> None:
    receiver, elsewhere = await serve(), await serve()

    async def redirect(request: web.Request) -> web.StreamResponse:
        raise web.HTTPTemporaryRedirect(elsewhere.url)

    receiver.handler = redirect
    deliver = webhook(receiver.url, SECRET)
    try:
        with pytest.raises(WebhookDeliveryError, match="redirect, not followed"):
            await deliver(entry("k"))
    finally:
        await deliver.aclose()
    assert len(receiver.seen) == 1
    assert elsewhere.seen == []


async def test_a_receiver_that_never_answers_is_bounded_by_the_timeout(serve: Any) -> None:
    receiver = await serve()
    never = asyncio.Event()

    async def hang(request: web.Request) -> web.StreamResponse:
        await never.wait()
        return web.Response()

    receiver.handler = hang
    deliver = webhook(receiver.url, SECRET, timeout=0.2)
    try:
        with pytest.raises(WebhookDeliveryError, match="Timeout"):
            await deliver(entry("k"))
    finally:
        never.set()
        await deliver.aclose()
    assert receiver.arrived.is_set()


async def test_a_body_that_never_ends_is_not_read(serve: Any) -> None:
    receiver = await serve()
    written = 0

    async def endless(request: web.Request) -> web.StreamResponse:
        nonlocal written
        response = web.StreamResponse(status=500)
        await response.prepare(request)
        chunk = b"x" * 65536
        try:
            while written < 1 << 30:
                await response.write(chunk)
                written += len(chunk)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        return response

    receiver.handler = endless
    deliver = webhook(receiver.url, SECRET)
    try:
        with pytest.raises(WebhookDeliveryError) as caught:
            await deliver(entry("k"))
    finally:
        await deliver.aclose()
    assert caught.value.status_code == 500
    # The client read an excerpt and hung up: what the server managed to write is bounded by
    # the sockets' buffers, far from the gigabyte it would send to a reader.
    assert written < 64 << 20


async def test_the_api_key_is_never_sent_to_a_receiver(serve: Any) -> None:
    receiver = await serve()
    async with SandboxServer() as sandbox, sandbox.client():
        key = sandbox.api_key
        with pytest.raises(InvalidRequestError, match="API key"):
            webhook(receiver.url, SECRET, headers={"X-Token": f"Bearer {key}"})
        deliver = webhook(receiver.url, SECRET, headers={"X-Token": "receiver's own"})
        try:
            await deliver(entry("k"))
        finally:
            await deliver.aclose()
    headers, body = receiver.seen[0]
    assert key not in json.dumps(headers) + body.decode()
    assert headers["X-Token"] == "receiver's own"


async def test_a_header_carrying_the_environments_key_is_refused(
    serve: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    receiver = await serve()
    env_key = f"vg-env-{secrets.token_hex(16)}"  # no client of the process was given it
    monkeypatch.setenv("VIDEOGEN_API_KEY", env_key)
    for name in ("Authorization", "X-Token"):
        with pytest.raises(InvalidRequestError, match=f"'{name}' must not carry the API key"):
            webhook(receiver.url, SECRET, headers={name: f"Bearer {env_key}"})
    assert receiver.seen == []


METADATA_URLS = [
    "http://169.254.169.254/latest/meta-data/",  # AWS, Azure, GCP, Oracle, DigitalOcean...
    "http://169.254.1.1:8080/hook",  # any link-local address
    "http://[fe80::1]/hook",
    "http://[fe80::1%25eth0]/hook",
    "http://[::ffff:169.254.169.254]/",
    "http://[fd00:ec2::254]/latest/meta-data/",  # AWS over IPv6
    "http://100.100.100.200/latest/meta-data/",  # Alibaba Cloud
    "http://metadata.google.internal/computeMetadata/v1/",
    "https://METADATA.Google.Internal./computeMetadata/v1/",
    "http://metadata/computeMetadata/v1/",
]


@pytest.mark.parametrize("url", METADATA_URLS)
def test_a_metadata_address_is_refused_unless_the_caller_opts_in(url: str) -> None:
    with pytest.raises(InvalidRequestError, match="link-local or cloud metadata") as caught:
        webhook(url, SECRET)
    assert caught.value.field == "url"
    assert "allow_metadata_hosts=True" in str(caught.value)
    assert webhook(url, SECRET, allow_metadata_hosts=True).url == url  # made, nothing sent


async def test_a_name_that_resolves_to_a_metadata_address_is_refused_before_connecting(
    serve: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(InvalidRequestError):  # the literal address: refused when made
        webhook("http://169.254.169.254/", SECRET)
    receiver = await serve()
    port = receiver.url.split(":")[2].split("/")[0]
    # Numeric names that are no address to aiohttp: the system's resolver reads them, as
    # 127.0.0.1 and 169.254.169.254; only the first is connected to.
    loopback = webhook(f"http://0x7f000001:{port}/hooks/video", SECRET)
    metadata = webhook("http://0xa9fea9fe:9/hook", SECRET)
    try:
        await loopback(entry("k"))
        with pytest.raises(WebhookDeliveryError, match=r"resolves to 169\.254\.169\.254, a link"):
            await metadata(entry("k"))
    finally:
        await loopback.aclose()
        await metadata.aclose()
    assert len(receiver.verified) == 1


@pytest.mark.parametrize(
    "url",
    [
        "http://user:s3cret-pw@127.0.0.1:9/hook",
        "https://user@example.com/hook",
        "http://@127.0.0.1/",
    ],
)
def test_a_url_with_user_info_is_refused_without_quoting_it(url: str) -> None:
    with pytest.raises(
        InvalidRequestError, match=r"must not hold user info \(user:password@\)"
    ) as caught:
        webhook(url, SECRET)
    assert caught.value.field == "url"
    assert "s3cret" not in str(caught.value)
