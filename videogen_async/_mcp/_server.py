"""The server: the tools and the entries' resources on ``MCPServer``, one watcher, a transport.

Over HTTP a caller is authenticated by the ``mcp`` package's own bearer middleware
(``AuthSettings`` and a ``TokenVerifier``, which also serve the protected resource's metadata):
a missing or wrong token is a 401 before any tool runs.
"""

import hmac
import json
import logging
import socket
from typing import Any

import anyio
import anyio.abc
import attrs
import uvicorn
from mcp.server.auth.provider import AccessToken, TokenVerifier
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError
from mcp.server.subscriptions import InMemorySubscriptionBus
from mcp.shared.subscriptions import ResourceUpdated
from pydantic import AnyHttpUrl

from .. import AsyncVideoGen, Ledger
from .._contract._redact import RedactingFilter
from .._version import __version__
from ._answers import dump, entry_data
from ._tools import VideoTools

INSTRUCTIONS = """Creates videos through a ledger with a spending cap. Pass a `key` to every
create (the same key never pays twice); wait with wait_for_video rather than polling get_video.
A wait answers within the host's time limit: call it again while it answers done=false."""
ENTRY_URI = "videogen://entries/{key}"


@attrs.frozen
class StaticToken(TokenVerifier):
    """One bearer token (``VIDEOGEN_MCP_TOKEN``), compared in constant time, never shown."""

    token: str = attrs.field(repr=False)

    async def verify_token(self, token: str) -> AccessToken | None:
        if hmac.compare_digest(token.encode(), self.token.encode()):
            return AccessToken(token="-", client_id="videogen-mcp-token", scopes=[])  # noqa: S106
        return None


def build_server(
    tools: VideoTools, bus: InMemorySubscriptionBus, token: str | None = None, url: str = ""
) -> MCPServer[object]:
    """The MCP server of the tools and ``videogen://entries/{key}``.

    ``token``: the bearer token every caller must send (over HTTP at ``url``, the protected
    resource its metadata names).
    """
    auth = None
    if token:
        address = AnyHttpUrl(url)
        auth = AuthSettings(
            issuer_url=address, resource_server_url=address, validate_token_resource=False
        )
    server = MCPServer(
        "videogen",
        instructions=INSTRUCTIONS,
        version=__version__,
        log_level="WARNING",
        subscriptions=bus,
        auth=auth,
        token_verifier=StaticToken(token) if token else None,
    )
    tools.register(server)

    @server.resource(
        ENTRY_URI,
        name="entry",
        mime_type="application/json",
        description="A ledger entry: a video's state, cost, video_url. Subscribe to hear when"
        " it changes (subscriptions/listen).",
    )
    async def entry(key: str) -> str:
        found = await tools.ledger.get(key)
        if found is None:
            raise ResourceNotFoundError("no entry of this key in the ledger")
        return json.dumps(dump(entry_data(found)), ensure_ascii=False)

    for handler in logging.getLogger().handlers:  # MCPServer's, on stderr
        handler.addFilter(RedactingFilter())
    return server


async def serve(
    ledger: Ledger,
    client: AsyncVideoGen,
    *,
    http: socket.socket | None = None,
    token: str | None = None,
    **options: Any,
) -> None:
    """Serve on stdio (``http`` ``None``: until stdin closes) or streamable HTTP at ``/mcp``.

    Args:
        ledger: The ledger every create goes through.
        client: The client that sends.
        http: A bound socket to serve streamable HTTP on (``None``: stdio).
        token: The bearer token a caller over HTTP must send (``None``: anyone who reaches
            the socket may call).
        **options: ``max_wait`` and ``confirm_above`` of :class:`VideoTools`.
    """
    bus = InMemorySubscriptionBus()
    async with anyio.create_task_group() as group:
        tools = VideoTools(ledger, client, group, **options)
        group.start_soon(_watch, ledger, client)
        group.start_soon(_publish, ledger, bus)
        if http is None:
            await build_server(tools, bus).run_stdio_async()
        else:
            host, port = http.getsockname()[:2]
            app = build_server(tools, bus, token, f"http://{host}:{port}/mcp").streamable_http_app(
                host=host
            )
            await uvicorn.Server(uvicorn.Config(app, log_level="warning")).serve(sockets=[http])
        group.cancel_scope.cancel()


async def _watch(ledger: Ledger, client: AsyncVideoGen) -> None:
    """The one watcher of the process: it moves every pending entry on; the waits read it."""
    async with ledger.watch(client) as finished:
        async for _ in finished:
            pass


async def _publish(ledger: Ledger, bus: InMemorySubscriptionBus) -> None:
    """Tell the subscribers of an entry's resource when it changes (any process's change)."""
    async with ledger.changes() as changes:
        async for change in changes:
            await bus.publish(ResourceUpdated(uri=ENTRY_URI.format(key=change.key)))
