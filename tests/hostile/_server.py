"""A real ``aiohttp.web`` server on loopback whose answers each test chooses.

The server answers every path with the behaviour the test set (``server.api``) and serves the
media route ``/media/...`` with ``server.media``. A behaviour is a coroutine taking the request
and returning the response; :mod:`tests.hostile._behaviours` holds the misbehaviours. The
server remembers every request it saw (``server.seen``) and the ``Authorization`` header it
was sent (``server.authorization``), as an attacker on the path would.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web

Behaviour = Callable[["HostileServer", web.Request], Awaitable[web.StreamResponse]]


async def _not_set(server: HostileServer, request: web.Request) -> web.StreamResponse:
    return web.json_response({"code": 500, "message": "no behaviour set"}, status=500)


class HostileServer:
    """The server's state: the behaviours, what it saw, and its base URL."""

    def __init__(self) -> None:
        self.api: Behaviour = _not_set
        self.media: Behaviour = _not_set
        self.seen: list[tuple[str, str]] = []
        self.authorization: str | None = None
        self.base_url = ""

    @property
    def media_url(self) -> str:
        """The URL of a video on the media route."""
        return f"{self.base_url}/media/video.mp4"

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.seen.append((request.method, request.path_qs))
        if "Authorization" in request.headers:
            self.authorization = request.headers["Authorization"]
        if request.path.startswith("/media/"):
            return await self.media(self, request)
        return await self.api(self, request)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        return app


async def serve() -> AsyncIterator[HostileServer]:
    """Run a :class:`HostileServer` on an ephemeral loopback port for the duration."""
    server = HostileServer()
    runner = web.AppRunner(server.app(), handle_signals=False, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    server.base_url = f"http://127.0.0.1:{port}"
    try:
        yield server
    finally:
        await runner.cleanup()
