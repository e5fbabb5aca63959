"""The server: the tools and the entries' resources on ``MCPServer``, one watcher, a transport."""

from __future__ import annotations

import json
import logging

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError

from .. import AsyncVideoGen, Ledger
from .._contract._redact import RedactingFilter
from .._version import __version__
from ._tools import VideoTools, entry_data

INSTRUCTIONS = """Creates videos through a ledger with a spending cap. Pass a `key` to every
create (the same key never pays twice); wait with wait_for_video rather than polling get_video."""


def build_server(ledger: Ledger, client: AsyncVideoGen) -> MCPServer[object]:
    """The MCP server of a ledger and a client: the tools and ``videogen://entries/{key}``."""
    tools = VideoTools(ledger, client).tools()
    server: MCPServer[object] = MCPServer(
        "videogen", instructions=INSTRUCTIONS, version=__version__, tools=tools, log_level="WARNING"
    )

    @server.resource("videogen://entries/{key}", name="entry", mime_type="application/json",
                     description="A ledger entry: a video's state, cost, video_url.")  # fmt: skip
    async def entry(key: str) -> str:
        found = await ledger.get(key)
        if found is None:
            raise ResourceNotFoundError("no entry of this key in the ledger")
        return json.dumps(entry_data(found), ensure_ascii=False)

    for handler in logging.getLogger().handlers:  # MCPServer's, on stderr
        handler.addFilter(RedactingFilter())
    return server


async def serve(ledger: Ledger, client: AsyncVideoGen, *, http: tuple[str, int] | None) -> None:
    """Serve on stdio (``http`` ``None``: until stdin closes) or streamable HTTP at ``/mcp``."""
    server = build_server(ledger, client)
    async with anyio.create_task_group() as group:
        group.start_soon(_watch, ledger, client)
        if http is None:
            await server.run_stdio_async()
        else:
            await server.run_streamable_http_async(host=http[0], port=http[1])
        group.cancel_scope.cancel()


async def _watch(ledger: Ledger, client: AsyncVideoGen) -> None:
    """The one watcher of the process: it moves every pending entry on; the waits read it."""
    async with ledger.watch(client) as finished:
        async for _ in finished:
            pass
