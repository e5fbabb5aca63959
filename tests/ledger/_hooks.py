"""A webhook receiver of the tests, and terminal entries to deliver to it.

The receiver is a loopback ``aiohttp.web`` server that checks every delivery with the
``standardwebhooks`` package (the specification's reference implementation, not the SDK's
code), counts the deliveries of each entry in flight at once (two would be an overlap), and
can hold a delivery until its sender is SIGKILLed (it notices the dropped connection).
"""

from __future__ import annotations

import asyncio
import base64
import collections
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import standardwebhooks
from aiohttp import web

from videogen_async import Ledger
from videogen_async.testing import SandboxServer

SECRET = "whsec_" + base64.b64encode(os.urandom(32)).decode()


class Receiver:
    """Verifies each delivery; counts overlaps; holds the first one when asked to."""

    def __init__(self) -> None:
        self.verified: list[dict[str, Any]] = []
        self.bodies: list[tuple[bytes, dict[str, str]]] = []
        self.in_flight: collections.Counter[str] = collections.Counter()
        self.overlaps = 0
        self.hold = False
        self.held = asyncio.Event()
        self.held_by = ""
        self.changed = asyncio.Event()
        self.url = ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        try:
            payload = standardwebhooks.Webhook(SECRET).verify(body, dict(request.headers))
        except standardwebhooks.WebhookVerificationError:
            return web.Response(status=400)
        key = payload["data"]["key"]
        self.in_flight[key] += 1
        self.overlaps += self.in_flight[key] > 1
        try:
            if self.hold and not self.held.is_set():
                self.held_by = request.headers.get("X-Dispatcher", "")
                self.held.set()
                await asyncio.Event().wait()  # until its sender dies (the handler is cancelled)
            self.verified.append(payload)
            self.bodies.append((body, dict(request.headers)))
            return web.Response(status=204)
        finally:
            self.in_flight[key] -= 1
            self.changed.set()

    def keys(self) -> list[str]:
        return sorted(payload["data"]["key"] for payload in self.verified)


@asynccontextmanager
async def serve() -> AsyncIterator[Receiver]:
    """A receiver on loopback, for the block."""
    found = Receiver()
    app = web.Application()
    app.router.add_post("/hooks/video", found.handle)
    runner = web.AppRunner(app, handle_signals=False, access_log=None, handler_cancellation=True)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    found.url = f"http://127.0.0.1:{runner.addresses[0][1]}/hooks/video"
    yield found
    await runner.cleanup()


async def finished(ledger: Ledger, count: int, **metadata: Any) -> list[str]:
    """``count`` tasks created and watched to their end: their keys."""
    async with SandboxServer(time_scale=0.001) as server, server.client() as client:
        keys = [f"v{n:03d}-{os.urandom(3).hex()}" for n in range(count)]
        for key in keys:
            await ledger.create_task(client, f"clip {key}", key=key, metadata=metadata or None)
        with anyio.fail_after(60):
            async with ledger.watch(client, claim_interval=0.05, stop_when_idle=True) as done:
                async for _ in done:
                    pass
    return sorted(keys)
